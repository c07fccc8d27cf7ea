"""The Qwen3.5 hybrid family (Gated DeltaNet) on one GPU: the 2B's padding x kernels table, and LoRA on the seed's
27B shape, the 2B and Qwen3-8B (r16 on "all-linear" over a frozen bf16 base, batch 4 x 2048 or a token budget,
one timed epoch after one untimed pass). The first row of every suite is transformers' reference path at static
padding: the parity reference of the rest. The GPU needs fla and tilelang (../shared/gpu/hybrid_wheels.sh).
"""

from __future__ import annotations

from nbhelpers.kernels.registry import uses_liger_switches
from nbhelpers.measure.config import RunConfig

from .suite import STARTUP, Suite, parity_probe

STRATEGIES = ("static", "dynamic", "packed", "token_budget")
BACKENDS = ("eager", "liger", "fla", "fla+liger")
HYBRID_LIGER = ("rms_norm", "swiglu", "fused_linear_cross_entropy")  # Liger has no RoPE for Qwen3.5
HYBRID_LIGER_PLAIN_CE = ("rms_norm", "swiglu", "cross_entropy")
DENSE_LIGER = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy")
DENSE_LIGER_PLAIN_CE = ("rope", "rms_norm", "swiglu", "cross_entropy")
HEADLINE = (  # the reference first, then the cold fla row, then the rest
    ("eager", "static"), ("fla", "packed"), ("fla", "static"), ("fla+liger", "token_budget"), ("eager", "packed"),
)  # fmt: skip
TABLE = RunConfig(
    model="qwen3.5-2b", batch_size=4, max_length=2048, num_samples=32, timing="epoch", attn_implementation="sdpa",
    kernels="eager", padding="static", profile_steps=1, timeout_s=420,
)  # fmt: skip
LORA = RunConfig(
    adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear", batch_size=4, max_length=2048,
    num_samples=32, timing="epoch", attn_implementation="sdpa", kernels="eager", padding="static", profile_steps=1,
    timeout_s=900,
)  # fmt: skip
LORA_27B = LORA.replace(model="qwen3.8-27b")
FLA_NEEDS = "fla and tilelang (../shared/gpu/hybrid_wheels.sh), liger-kernel"


def table(base: RunConfig) -> list[RunConfig]:
    """Every strategy x backend; static and packed rows profiled."""
    return [
        base.replace(label=f"{k}, {s}, sdpa", kernels=k, padding=s, profile=s in ("static", "packed"),
                     liger_kernels=HYBRID_LIGER_PLAIN_CE if uses_liger_switches(k) else ())
        for k in BACKENDS
        for s in STRATEGIES
    ]  # fmt: skip


def headline(base: RunConfig) -> list[RunConfig]:
    rows = {(c.kernels, c.padding): c for c in table(base)}
    return [rows[key] for key in HEADLINE]


def lora_27b() -> list[RunConfig]:
    """Reference path + static padding (checkpointed: without, 4 x 2048 does not fit) against fla's kernels on
    token-budget rows, with and without Liger's fused linear cross-entropy."""
    full = LORA_27B.replace(activation_checkpointing="full")
    return [
        full.replace(label="27b lora: eager, static, ckpt full", profile=True),
        full.replace(label="27b lora: fla+liger, token_budget 16384, ckpt full", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER, padding="token_budget", token_budget=16384, profile=True),
        full.replace(label="27b lora: fla, token_budget 8192, ckpt full", kernels="fla", liger_kernels=(),
                     padding="token_budget", token_budget=8192),
        LORA_27B.replace(label="27b lora: fla+liger, token_budget 8192, ckpt every 2nd", kernels="fla+liger",
                         liger_kernels=HYBRID_LIGER, padding="token_budget", token_budget=8192,
                         activation_checkpointing="every_k", checkpoint_every=2),
        full.replace(label="27b lora: fla+liger (plain CE), token_budget 16384, ckpt full", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget", token_budget=16384),
    ]  # fmt: skip


def parity_27b() -> list[RunConfig]:
    """The baseline and the fastest row of :func:`lora_27b` for one step each: their parity probes."""
    rows = lora_27b()
    return [parity_probe(r, profile=False) for r in (rows[0], rows[3])]


def mfu_27b() -> list[RunConfig]:
    """What the fastest row still spends, taken off one at a time: varlen attention in the gated attention layers,
    PEFT's input cast left to autocast ("uncast"), less recomputation."""
    fused = LORA_27B.replace(kernels="fla+liger", liger_kernels=HYBRID_LIGER, padding="token_budget", token_budget=8192,
                             attn_implementation="torch_varlen", activation_checkpointing="every_k",
                             checkpoint_every=2)  # fmt: skip
    return [
        LORA_27B.replace(label="27b lora: eager, static, ckpt full", activation_checkpointing="full"),
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


def larger_steps_27b() -> list[RunConfig]:
    """The fastest row of :func:`mfu_27b` with more tokens a step or less recomputation, as memory allows."""
    rows = mfu_27b()
    fastest = rows[1].replace(profile=False)
    label = "27b lora: fla+liger, token_budget {}, varlen, ckpt every {}, uncast"
    return [rows[0]] + [fastest.replace(label=label.format(budget, nth), token_budget=budget, checkpoint_every=every)
                        for budget, every, nth in ((9216, 2, "2nd"), (10240, 2, "2nd"), (7168, 3, "3rd"))]  # fmt: skip


def fused_norm_27b() -> list[RunConfig]:
    """With fla's fused gated RMSNorm in every Gated DeltaNet layer: the fastest row again (profiled), then less
    recomputation in the memory it frees."""
    rows = larger_steps_27b()
    best = rows[3].replace(label="27b lora: fla+liger (fused gated norm), token_budget 7168, varlen, ckpt every 3rd, "
                           "uncast", profile=True)  # fmt: skip
    return [
        rows[0],
        best,
        best.replace(label=best.label.replace("every 3rd", "every 4th"), checkpoint_every=4, profile=False),
        best.replace(label=best.label.replace("7168", "8192"), token_budget=8192, profile=False),
        best.replace(label=best.label.replace("7168", "6144").replace("every 3rd", "every 6th"), token_budget=6144,
                     checkpoint_every=6, profile=False),
    ]  # fmt: skip


def lora_2b() -> list[RunConfig]:
    base = LORA.replace(model="qwen3.5-2b")
    return [
        base.replace(label="2b lora: eager, static", profile=True),
        base.replace(label="2b lora: fla+liger, token_budget", kernels="fla+liger", liger_kernels=HYBRID_LIGER,
                     padding="token_budget", profile=True),
        base.replace(label="2b lora: fla+liger (plain CE), token_budget", kernels="fla+liger",
                     liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget"),
    ]  # fmt: skip


def lora_2b_pick() -> list[RunConfig]:
    """The 2B's LoRA pair, then its pick with what the 27B's pick has: varlen attention in the gated attention layers
    (SDPA masks a packed row's blocks), then LoRA's product in the GEMM as well, then that at twice the tokens a step
    (the pair's pick peaks at 21 GiB of 80)."""
    baseline, pick = lora_2b()[:2]
    varlen = pick.replace(label="2b lora: fla+liger, token_budget, varlen", attn_implementation="torch_varlen")
    fused = varlen.replace(label="2b lora: fla+liger, token_budget, varlen, LoRA product in the GEMM",
                           lora_epilogue="fused")
    larger = fused.replace(label=f"{fused.label}, 16384 tokens", token_budget=16384, profile=False)
    return [baseline, pick.replace(profile=False), varlen, fused, larger]


def lora_2b_varlen_short() -> list[RunConfig]:
    """The varlen rows of :func:`lora_2b_pick` after the reference's parity probe alone (one step, untimed): for a job
    too short for the reference's timed epoch, whose rate comes from the job that timed it on the same samples."""
    baseline, _, varlen, fused, _ = lora_2b_pick()
    return [parity_probe(baseline, profile=False), varlen, fused]


def wider(rows: list[RunConfig], samples: int) -> list[RunConfig]:
    """The rows on ``samples`` samples, labelled so."""
    return [row.replace(num_samples=samples, label=f"{row.label}, {samples} samples") for row in rows]


def lora_8b() -> list[RunConfig]:
    base = LORA.replace(model="qwen3-8b")
    return [
        base.replace(label="8b lora: eager, static", profile=True),
        base.replace(label="8b lora: liger, token_budget, torch_varlen", kernels="liger", liger_kernels=DENSE_LIGER,
                     padding="token_budget", attn_implementation="torch_varlen", profile=True),
        base.replace(label="8b lora: liger (plain CE), token_budget, torch_varlen", kernels="liger",
                     liger_kernels=DENSE_LIGER_PLAIN_CE, padding="token_budget", attn_implementation="torch_varlen"),
    ]  # fmt: skip


TWO_B = "hybrid/qwen3.5-2b/fused-kernels"
TWENTY_SEVEN_B = "hybrid/qwen3.8-27b-lora"
SUITES = (
    Suite(f"{TWO_B}/hybrid-table-b4", "every padding strategy x reference/fla x Liger", lambda _: table(TABLE),
          needs=FLA_NEEDS),
    Suite(f"{TWO_B}/hybrid-headline-b4", "the rows the hybrid's claims rest on", lambda _: headline(TABLE),
          needs=FLA_NEEDS),
    Suite(f"{TWO_B}/hybrid-startup-b4", "fla + Liger at a token budget: its first step cold and warm",
          lambda _: [TABLE.replace(label="fla+liger, token_budget, sdpa", kernels="fla+liger",
                                   liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget", timing="steps",
                                   num_samples=96, steps=2, warmup=1, timeout_s=480)],
          measure=STARTUP, parity=False, needs=FLA_NEEDS),
    Suite("hybrid/qwen3.5-2b/lora/lora-2b", "LoRA on the 2B hybrid: reference static against fla + Liger",
          lambda _: lora_2b(), needs=FLA_NEEDS),
    Suite("hybrid/qwen3.5-2b/lora/lora-2b-256", "LoRA on the 2B hybrid on 256 samples (13 timed steps for the pick, "
          "not 2): reference static against fla + Liger", lambda _: wider(lora_2b()[:2], 256), needs=FLA_NEEDS),
    Suite("hybrid/qwen3.5-2b/lora/lora-2b-pick-256", "the 2B's LoRA pair on 256 samples, then its pick with varlen "
          "attention, then with LoRA's product in the GEMM too (both profiled), then that at 16,384 tokens a step",
          lambda _: wider(lora_2b_pick(), 256), needs=FLA_NEEDS),
    Suite("hybrid/qwen3.5-2b/lora/lora-2b-varlen-256", "the 2B's LoRA pick on 256 samples with varlen attention, then "
          "with LoRA's product in the GEMM too, after the reference's parity probe alone (its rate: lora-2b-256's)",
          lambda _: wider(lora_2b_varlen_short(), 256), needs=FLA_NEEDS),
    Suite(f"{TWENTY_SEVEN_B}/fused-path/lora-27b", "LoRA on the 27B: reference static against fla's kernels",
          lambda _: lora_27b(), needs=FLA_NEEDS),
    Suite(f"{TWENTY_SEVEN_B}/fused-path/lora-27b-parity", "the parity probes of the 27B's baseline and fastest row",
          lambda _: parity_27b(), needs=FLA_NEEDS),
    Suite(f"{TWENTY_SEVEN_B}/toward-35-mfu/lora-27b-mfu", "the 27B's fastest row, one cost taken off at a time",
          lambda _: mfu_27b(), needs=FLA_NEEDS),
    Suite(f"{TWENTY_SEVEN_B}/toward-35-mfu/lora-27b-larger-steps", "more tokens a step, less recomputation",
          lambda _: larger_steps_27b(), needs=FLA_NEEDS),
    Suite(f"{TWENTY_SEVEN_B}/toward-35-mfu/lora-27b-fused-norm", "with fla's fused gated RMSNorm",
          lambda _: fused_norm_27b(), needs=FLA_NEEDS),
    Suite("qwen3-8b/lora/lora-8b", "LoRA on Qwen3-8B: eager static against Liger + torch_varlen token budget",
          lambda _: lora_8b(), needs="liger-kernel"),
)  # fmt: skip
