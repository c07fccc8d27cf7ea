"""Qwen3-1.7B and Qwen3-8B: the kernel entries past the tuner's pick (regional compile, float8, Cut Cross-Entropy,
bf16 weights with fp32 master state), at the GPU command's workload: batch 8 x 2048 (8B: 4 x 2048, pure bf16),
32 samples, one timed epoch repeated to at least 10 timed steps. Each parity suite measures the padded eager
baseline first; a float8 row's packed rows are padded to a multiple of 16 positions by the kernel table.
"""

from __future__ import annotations

from typing import Any

from nbhelpers.analysis.convergence import KIND, ROLES
from nbhelpers.kernels.registry import liger_switches_for
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.curve_samples import samples_for_steps

from .suite import CONVERGENCE, STARTUP, Suite

NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
LOSS_ONLY = ("cross_entropy",)  # Liger's switches beside regional compile
REGIONAL = RunConfig(
    model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=32, steps=10, warmup=1, timing="epoch",
    min_timed_steps=10, padding="static", liger_kernels=NO_FLCE, timeout_s=900,
)  # fmt: skip
REGIONAL_8B = REGIONAL.replace(model="qwen3-8b", batch_size=4, dtype="bf16")

BASELINE = "baseline: eager, static, sdpa"
PICK = "liger (no fused CE), token budget, varlen (the tuner's pick)"
CE_REGIONAL = "liger cross-entropy + regional compile, token budget, varlen"
FLCE_REGIONAL = "liger fused linear cross-entropy + regional compile, token budget, varlen"
FLOAT8_REGIONAL = "liger cross-entropy + float8 + regional compile, token budget, varlen"
CCE_REGIONAL = "cut cross-entropy + regional compile, token budget, varlen"
FLOAT8_CCE_REGIONAL = "float8 + cut cross-entropy + regional compile, token budget, varlen"
CCE_STATIC = "cut cross-entropy, static, sdpa"
EAGER_PACKED = "eager, token budget, varlen"  # the baseline's kernels at the best padding: what each entry bought
PACKED: dict[str, Any] = {"padding": "token_budget", "attn_implementation": "torch_varlen"}
ROWS: dict[str, dict[str, Any]] = {  # label -> the fields it changes on the workload
    BASELINE: {},
    "regional compile, static, sdpa": {"kernels": "regional_compile"},
    "liger + regional compile, static, sdpa": {"kernels": "liger+regional_compile"},
    EAGER_PACKED: PACKED,
    PICK: {"kernels": "liger", **PACKED},
    "regional compile, token budget, varlen": {"kernels": "regional_compile", **PACKED},
    "liger + regional compile, token budget, varlen": {"kernels": "liger+regional_compile", **PACKED},
    CE_REGIONAL: {"kernels": "liger+regional_compile", "liger_kernels": LOSS_ONLY, **PACKED},
    FLCE_REGIONAL: {"kernels": "liger+regional_compile", "liger_kernels": ("fused_linear_cross_entropy",), **PACKED},
    FLOAT8_REGIONAL: {"kernels": "liger+float8+regional_compile", "liger_kernels": LOSS_ONLY, **PACKED},
    CCE_STATIC: {"kernels": "cce"},
    CCE_REGIONAL: {"kernels": "cce+regional_compile", **PACKED},
    FLOAT8_CCE_REGIONAL: {"kernels": "float8+cce+regional_compile", **PACKED},
    f"{CE_REGIONAL}, bf16-master": {"kernels": "liger+regional_compile", "liger_kernels": LOSS_ONLY,
                                    "dtype": "bf16-master", **PACKED},
    f"{CCE_REGIONAL}, bf16-master": {"kernels": "cce+regional_compile", "dtype": "bf16-master", **PACKED},
    "eager, static, sdpa, bf16-master": {"dtype": "bf16-master"},
}  # fmt: skip
GROUPS = {  # after the baseline, the rows each suite measures
    "best": (EAGER_PACKED, PICK, CE_REGIONAL, FLCE_REGIONAL, FLOAT8_REGIONAL, CCE_REGIONAL, FLOAT8_CCE_REGIONAL),
    "regional": (
        "regional compile, static, sdpa", "liger + regional compile, static, sdpa", PICK,
        "regional compile, token budget, varlen", "liger + regional compile, token budget, varlen", CE_REGIONAL,
    ),
    "precision": (f"{CE_REGIONAL}, bf16-master", f"{CCE_REGIONAL}, bf16-master", "eager, static, sdpa, bf16-master"),
    "float8": (FLOAT8_REGIONAL, FLOAT8_CCE_REGIONAL, CCE_STATIC),
}  # fmt: skip

# The entries alone at static padding, and with the best padding beside the pick (whole-model compile on empty
# caches compiles twice, for the timed model and the parity probe's: those rows get a longer limit).
ALONE = ("float8", "float8+compile", "float8_rowwise+compile", "cce", "cce+compile")
WHOLE_MODEL_COMPILE = ("float8+compile", "float8_rowwise+compile", "cce+compile")
NEW_BEST = (
    "float8+regional_compile", "liger+float8", "cce", "liger+cce", "cce+regional_compile", "liger+float8+cce",
    "float8+cce+regional_compile",
)  # fmt: skip
ENTRIES = RunConfig(
    model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=32, timing="epoch", kernels="eager",
    padding="static", attn_implementation="sdpa", timeout_s=540,
)  # fmt: skip
CURVE_BACKEND = "float8+regional_compile"
CURVE_STEPS = 50


def group(name: str, base: RunConfig, profile: bool = False) -> list[RunConfig]:
    """The baseline, then the group's rows of :data:`ROWS`."""
    return [base.replace(label=label, profile=profile, **ROWS[label]) for label in (BASELINE, *GROUPS[name])]


def switches(kernels: str) -> tuple[str, ...]:
    """Liger's switches for an entry: the pick's set, less the cross-entropy beside Cut Cross-Entropy."""
    return liger_switches_for(kernels, NO_FLCE) or NO_FLCE


def alone(base: RunConfig) -> list[RunConfig]:
    return [base.replace(label=BASELINE)] + [
        base.replace(label=f"{k}, static, sdpa", kernels=k, liger_kernels=switches(k),
                     timeout_s=1500 if k in WHOLE_MODEL_COMPILE else base.timeout_s)
        for k in ALONE
    ]  # fmt: skip


def new_best(base: RunConfig) -> list[RunConfig]:
    padded = base.replace(padding="token_budget", token_budget=base.batch_size * base.max_length,
                          attn_implementation="torch_varlen")  # fmt: skip
    return [
        base.replace(label=BASELINE),
        padded.replace(label="eager, token budget, torch_varlen"),
        padded.replace(label="liger (no fused linear CE), token budget, torch_varlen", kernels="liger",
                       liger_kernels=NO_FLCE),
    ] + [padded.replace(label=f"{k}, token budget, torch_varlen", kernels=k, liger_kernels=switches(k))
         for k in NEW_BEST]  # fmt: skip


def curve_pair(base: RunConfig) -> list[RunConfig]:
    """The float8 entry and the baseline kernels, 50 steps each on the padded baseline's plan, no warm-up, each
    step on a batch not trained on before (a curve over repeated batches learns them by heart)."""
    steps = base.replace(timing="steps", steps=CURVE_STEPS, warmup=0, profile=False)
    steps = steps.replace(num_samples=samples_for_steps(steps, CURVE_STEPS + 1))
    return [
        steps.replace(label=f"curve: {CURVE_BACKEND}", kernels=CURVE_BACKEND, extra={KIND: ROLES[0]}),
        steps.replace(label="curve: eager (baseline kernels, same plan and attention)", extra={KIND: ROLES[1]}),
    ]


def startup_row(base: RunConfig) -> RunConfig:
    """Liger's cross-entropy + regional compile at a token budget: its first step on a cold, then a warm cache."""
    return base.replace(label="startup", kernels="liger+regional_compile", liger_kernels=LOSS_ONLY, **PACKED)


FLOAT8_NEEDS = "an H200 (compute capability 8.9+), torchao and cut-cross-entropy (benchmarks/float8_cce_wheels.sh)"
SUITES = (
    Suite("qwen3-1.7b/regional-compile/regional", "regional compile alone, with Liger, packed, beside the pick",
          lambda _: group("regional", REGIONAL)),
    Suite("qwen3-1.7b/regional-compile/startup", "regional compile's first step on a cold, then a warm cache",
          lambda _: [startup_row(REGIONAL)], measure=STARTUP, parity=False),
    Suite("qwen3-1.7b/bf16-master/precision", "bf16 weights with fp32 master state, eager and compiled",
          lambda _: group("precision", REGIONAL, profile=True), needs=FLOAT8_NEEDS),
    Suite("qwen3-1.7b/kernel-entries-token-budget/best", "every entry at a token budget, each row profiled",
          lambda _: group("best", REGIONAL, profile=True), needs=FLOAT8_NEEDS),
    Suite("qwen3-1.7b/kernel-entries-token-budget/float8-padded-rows",
          "float8 with packed rows padded to multiples of 16; Cut Cross-Entropy alone",
          lambda _: group("float8", REGIONAL, profile=True), needs=FLOAT8_NEEDS),
    Suite("qwen3-1.7b/kernel-entries-token-budget/new-entries", "float8 and Cut Cross-Entropy beside the pick",
          lambda _: new_best(ENTRIES), needs=FLOAT8_NEEDS),
    Suite("qwen3-1.7b/kernel-entries-static/alone", "float8 and Cut Cross-Entropy alone at static padding",
          lambda _: alone(ENTRIES), needs=FLOAT8_NEEDS),
    Suite("qwen3-1.7b/float8-loss-curve/distinct-batches", "float8's 50-step loss curve against eager's",
          lambda _: curve_pair(ENTRIES), measure=CONVERGENCE, parity=False, needs=FLOAT8_NEEDS),
    Suite("qwen3-8b/kernel-entries-token-budget/best", "every entry at a token budget, pure bf16, profiled",
          lambda _: group("best", REGIONAL_8B, profile=True), needs=FLOAT8_NEEDS),
    Suite("qwen3-8b/kernel-entries-token-budget/float8-padded-rows", "float8 at 8B, pure bf16, profiled",
          lambda _: group("float8", REGIONAL_8B, profile=True), needs=FLOAT8_NEEDS),
)  # fmt: skip
