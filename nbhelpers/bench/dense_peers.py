"""Qwen3 dense: TRL's SFTTrainer beside the workbook's best row, Unsloth and TRL beside the pick of a Qwen3-8B LoRA,
FSDP2 on one and two GPUs, where a row's wall time goes, pad-to-longest over a few steps, and a CPU smoke suite that
proves the bench path in seconds."""

from __future__ import annotations

from nbhelpers.analysis.convergence import convergence_pair
from nbhelpers.analysis.peers import peers_of
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import TRL_ENGINES

from .frozen_bases import CAPS_GIB, capped_row
from .lora_forwards import epilogue_rows
from .suite import CONVERGENCE, Suite

NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
TRL_BASE = RunConfig(model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=256, timing="epoch",
                     timeout_s=600)  # fmt: skip
BEST = TRL_BASE.replace(
    label="liger without fused linear cross-entropy, token_budget 16k, torch_varlen", padding="token_budget",
    token_budget=16384, kernels="liger", liger_kernels=NO_FLCE, attn_implementation="torch_varlen",
)  # fmt: skip
CONVERGENCE_STEPS = 50
# A fresh machine's start: the first step and a few after it are what counts (benchmarks/gpu_fresh_start.sh)
FIRST_STEPS = {"timing": "steps", "steps": 3, "warmup": 0, "profile": False}

LORA_8B = RunConfig(model="qwen3-8b", adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear",
                    batch_size=8, max_length=2048, num_samples=64, timing="epoch", timeout_s=600)  # fmt: skip
# The pick on an 80 GB card: the largest token budget (at most 16k) the memory planner fits under 79 GiB.
LORA_8B_PICK = capped_row(LORA_8B.replace(
    label="8b lora: liger without fused linear cross-entropy, torch_varlen", padding="token_budget",
    token_budget=16384, kernels="liger", liger_kernels=NO_FLCE, attn_implementation="torch_varlen",
), CAPS_GIB[0])  # fmt: skip
# Unsloth first: each row runs in its own process, so the order changes no figure, and a job cut short by its
# time limit keeps the peer the workbook had never stood beside.
LORA_8B_PEERS = "unsloth,trl_defaults,trl_best"
# The same pick and peers at the 1.7B shape: a first look at Unsloth in about two minutes of a GPU (a 3.4 GB preset
# to save and load instead of 16 GB).
LORA_17B_PICK = LORA_8B.replace(
    model="qwen3-1.7b", label="1.7b lora: liger without fused linear cross-entropy, token_budget 16k, torch_varlen",
    padding="token_budget", token_budget=16384, kernels="liger", liger_kernels=NO_FLCE,
    attn_implementation="torch_varlen", timeout_s=300,
)  # fmt: skip

FSDP = RunConfig(
    model="qwen3-8b", dtype="bf16", batch_size=64, max_length=2048, num_samples=1024, padding="token_budget",
    token_budget=8192, steps=5, warmup=2, sharding="fsdp2", timeout_s=280,
)  # fmt: skip
FSDP_BEST = FSDP.replace(attn_implementation="torch_varlen", kernels="liger", liger_kernels=NO_FLCE)

ROW_COST = RunConfig(model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=32, timing="epoch", profile=True,
                     timeout_s=600)  # fmt: skip
ROW_COST_ROWS = (("eager", "static", "sdpa"), ("liger", "token_budget", "torch_varlen"), ("liger", "static", "sdpa"))
FEW_STEPS = RunConfig(model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=96, steps=16, warmup=2,
                      attn_implementation="sdpa", timeout_s=300)  # fmt: skip
SMOKE = RunConfig(model="qwen3-tiny", batch_size=2, max_length=64, num_samples=8, steps=1, warmup=0, device="cpu",
                  attn_implementation="sdpa", kernels="eager", timeout_s=300)  # fmt: skip


def fsdp_rows() -> dict[str, list[RunConfig]]:
    """Plain FSDP2 (SDPA, eager) and the workbook's best row per GPU count; the best also at twice the tokens a
    GPU with every 2nd layer recomputed. Batch sizes and token budgets are per GPU."""
    twice = FSDP_BEST.replace(token_budget=2 * FSDP.token_budget, activation_checkpointing="every_k",
                              checkpoint_every=2)  # fmt: skip
    return {
        "plain": [FSDP.replace(label=f"plain FSDP2, sdpa, 8k tokens per GPU, {n} GPU", attn_implementation="sdpa",
                               kernels="eager", gpus=n) for n in (1, 2)],
        "best": [FSDP_BEST.replace(label=f"varlen + liger (no flce), 8k tokens per GPU, {n} GPU", gpus=n,
                                   profile=n == 2) for n in (1, 2)]
        + [twice.replace(label=f"varlen + liger, 16k per GPU, checkpoint every 2nd layer, {n} GPU", gpus=n)
           for n in (1, 2)],
    }  # fmt: skip


TRL_NEEDS = "TRL (../shared/gpu/wheels.sh trl), liger-kernel"
UNSLOTH_NEEDS = (TRL_NEEDS + "; Unsloth's own site: scripts/gpu_unsloth_wheels.sh installed with --target, "
                 "NBHELPERS_UNSLOTH_SITE naming it")  # fmt: skip
SUITES = (
    Suite("qwen3-1.7b/trl-peers/peers", "the workbook's static and best rows, then TRL's engines on the best's data",
          lambda _: [TRL_BASE.replace(label="eager, static, sdpa", padding="static"), BEST]
          + peers_of(BEST, BEST.label, ",".join(TRL_ENGINES), on_gpu=True), needs=TRL_NEEDS),
    Suite("qwen3-8b/lora-peers/unsloth", "Qwen3-8B LoRA r16 all-linear: the workbook's pick, then TRL's defaults, "
          "its best flags and Unsloth on the same samples", lambda _: [LORA_8B_PICK]
          + peers_of(LORA_8B_PICK, LORA_8B_PICK.label, LORA_8B_PEERS, on_gpu=True), parity=False,
          needs=UNSLOTH_NEEDS),
    Suite("qwen3-8b/lora-epilogue/pick", "Qwen3-8B LoRA r16 all-linear, the pick with PEFT's scale and add, then "
          "with LoRA's product added in the GEMM (lora_epilogue), each with a profiled step, on the same batches",
          lambda _: epilogue_rows(LORA_8B_PICK), parity=False, needs="liger-kernel"),
    Suite("qwen3-1.7b/lora-epilogue/pick", "Qwen3-1.7B LoRA r16 all-linear, the pick with PEFT's scale and add, then "
          "with LoRA's product added in the GEMM, each with a profiled step, on the same batches (a short GPU call)",
          lambda _: epilogue_rows(LORA_17B_PICK), parity=False, needs="liger-kernel"),
    Suite("qwen3-1.7b/lora-peers/unsloth", "Qwen3-1.7B LoRA r16 all-linear: the workbook's pick, then Unsloth, TRL's "
          "defaults and its best flags on the same samples", lambda _: [LORA_17B_PICK]
          + peers_of(LORA_17B_PICK, LORA_17B_PICK.label, LORA_8B_PEERS, on_gpu=True), parity=False,
          needs=UNSLOTH_NEEDS),
    Suite("qwen3-1.7b/fresh-machine/pick", "the 1.7B pick's first steps, on the kernel caches this machine has "
          "(empty, or unpacked from another machine's archive)", lambda _: [BEST.replace(**FIRST_STEPS)],
          parity=False),
    Suite("qwen3-1.7b/trl-peers/convergence", "the best row's loss curve against its baseline's, 50 steps each",
          lambda _: convergence_pair(BEST, BEST.label, CONVERGENCE_STEPS), measure=CONVERGENCE, parity=False),
    Suite("qwen3-8b/fsdp2-scaling/plain", "plain FSDP2 on 1 and 2 GPUs", lambda _: fsdp_rows()["plain"],
          parity=False, needs="2 GPUs (NCCL_NVLS_ENABLE=0)"),
    Suite("qwen3-8b/fsdp2-scaling/best", "the workbook's best row under FSDP2 on 1 and 2 GPUs",
          lambda _: fsdp_rows()["best"], parity=False, needs="2 GPUs (NCCL_NVLS_ENABLE=0), liger-kernel"),
    Suite("qwen3-1.7b/row-cost/phases", "where a grid row's wall time goes (metrics.phase_s, process_s)",
          lambda _: [ROW_COST.replace(label=":".join(row), kernels=row[0], padding=row[1], attn_implementation=row[2])
                     for row in ROW_COST_ROWS], parity=False),
    Suite("qwen3-1.7b/dynamic-padding-slow-steps/few-steps", "pad to longest and to a multiple of 8 over 16 steps",
          lambda _: [FEW_STEPS.replace(label=f"eager, {s}, sdpa", padding=s)
                     for s in ("static", "dynamic", "multiple")]),
    Suite("qwen3-tiny/bench-smoke/static-and-packed", "the bench path end to end on a CPU: two one-step rows",
          lambda _: [SMOKE.replace(label="eager, static, sdpa", padding="static"),
                     SMOKE.replace(label="eager, packed, sdpa", padding="packed")]),
)  # fmt: skip
