"""Quantized frozen bases on a GPU: Qwen3-8B with LoRA r16 over each base of the table (bf16, NF4 as QLoRA, NF4 with
its rest bf16, float8), timed over
one epoch of the same samples (plain and with the workbook's best kernels), and their first-step parity against
the bf16 base within each format's bound (``models.frozen_base.FROZEN_BASES``); and the best row on the GPUs people
have: under memory caps of 80, 48 and 24 GiB (a smaller GPU on a larger one, enforced by the CUDA allocator), each
base at the largest token budget the memory planner fits under the cap, with the least recomputation that fits."""

from __future__ import annotations

from nbhelpers.analysis.adapter_plan import largest_fitting_tokens
from nbhelpers.data.strategies import STRATEGIES
from nbhelpers.kernels.registry import REGIONAL_BACKEND
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.memory_plan import plan_memory, recomputed_layers, settings_from_config
from nbhelpers.models.families import model_shape
from nbhelpers.models.float8_cast import CAST_VARIABLE
from nbhelpers.models.frozen_base import BF16_BASE, FLOAT8_BASE, FROZEN_BASE_NAMES, FROZEN_BASES
from nbhelpers.models.loading import model_config
from nbhelpers.models.shape import ModelShape

from .lora_forwards import epilogue_rows
from .suite import Suite, parity_probe

NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
LORA_8B = RunConfig(
    model="qwen3-8b", adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear", batch_size=4,
    max_length=2048, num_samples=32, timing="epoch", attn_implementation="sdpa", kernels="eager", padding="static",
    timeout_s=900,
)  # fmt: skip
BEST_8B = LORA_8B.replace(kernels="liger", liger_kernels=NO_FLCE, padding="token_budget", token_budget=8192,
                          attn_implementation="torch_varlen")  # fmt: skip
EAGER_CAST_LABEL = "eager cast"
NEEDS = "bitsandbytes (pip install 'nbhelpers[qlora]') for nf4; an sm89+ GPU (L4, H100, H200) for float8"


def base_rows(row: RunConfig, what: str) -> list[RunConfig]:
    """``row`` once per frozen base of the table, the bf16 base first (the suite's parity reference)."""
    size = row.model.rsplit("-", 1)[-1]  # "8b", "27b"
    return [row.replace(label=f"{size} lora r{row.lora_rank}, {base} base, {what}", frozen_base=base)
            for base in FROZEN_BASE_NAMES]  # fmt: skip


# An 80 GB card (H100, A100), a 48 GB one (L40S, A6000), a 24 GB one (L4 in Colab, 4090). The 80 GB class at 79
# GiB: an H100 80GB HBM3 gives torch 79.2 GiB, so a cap of 80 is refused there.
CAPS_GIB = (79.0, 48.0, 24.0)
BUDGET_STEP = 1024  # token budgets of the capped rows are multiples of this
MAX_BUDGET = 16384  # and at most this (the uncapped best row's budget is 8,192)
RECOMPUTATION = (("none", 2), ("every_k", 4), ("every_k", 2), ("full", 2))  # the choices, least recomputation first
# A step's tokens buy throughput up to about this many; past it a larger budget is not worth recomputing layers for.
# The 8B LoRA rows on an H100 (2026-12-06): 4,096 tokens a step 12,759 real tok/s and 9,216 13,679 without
# recomputation; 2,048 without it 5,371 (float8 base) against 8,744 at 5,120 with every layer recomputed (bf16).
SATURATING_TOKENS = 4096
# Over a base that dequantizes each weight at every pass (a bf16 copy per matmul: NF4) a step costs time however few
# its tokens, and at small budgets the host's launches set its pace, so tokens pay up to the largest budget. The 27B's
# 4-bit row under 79 GiB (H100, 2026-12-07, one machine): 2,922 real tok/s at 16,384 tokens with every layer
# recomputed against 2,480 and 2,250 at the 4,096 the rule above gave it with every 4th layer recomputed.


def saturating_tokens(frozen_base: str) -> int:
    """Tokens a step past which a larger budget is not worth recomputing layers for, over this frozen base."""
    base = FROZEN_BASES[frozen_base]
    return MAX_BUDGET if base.quantized and base.working_bytes >= 2 else SATURATING_TOKENS


CAPPED_8B = BEST_8B.replace(timing="steps", steps=10, warmup=2, num_samples=384)  # >= 12 batches at 16k tokens


def recomputation_cost(num_layers: int, checkpointing: str, every: int) -> float:
    """A step's time with this recomputation over its time without: each recomputed layer runs its forward again,
    about a third of its forward and backward."""
    return 1 + len(recomputed_layers(num_layers, checkpointing, every)) / num_layers / 3


def capped_row(row: RunConfig, cap_gib: float,
               recomputation: tuple[tuple[str, int], ...] = RECOMPUTATION) -> RunConfig:  # fmt: skip
    """``row`` under a cap of ``cap_gib``: of the ``recomputation`` choices at which the planner fits a token budget
    of at least one full-length row (the largest such budget, up to :data:`MAX_BUDGET`), the one whose budget
    (counted up to :func:`saturating_tokens`) over its :func:`recomputation_cost` is largest, the first on a tie. A
    row of a strategy without a token budget (static padding) keeps its recomputation and halves its batch until it
    fits. When nothing fits, the row as it is under the cap: the step refuses it with the planner's reason, a failed
    record."""
    shape = model_shape(model_config(row.model))
    if not STRATEGIES[row.padding].budgeted:  # a step of batch_size rows: its batch is what shrinks
        return _capped_batch(row, cap_gib, shape)
    best: tuple[float, RunConfig] | None = None
    for checkpointing, every in recomputation:
        config = row.replace(gpu_memory_gib=cap_gib, activation_checkpointing=checkpointing, checkpoint_every=every)
        tokens = min(largest_fitting_tokens(shape, settings_from_config(config), BUDGET_STEP), MAX_BUDGET)
        worth = min(tokens, saturating_tokens(row.frozen_base)) / recomputation_cost(shape.num_layers, checkpointing,
                                                                                     every)  # fmt: skip
        if tokens >= row.max_length and (best is None or worth > best[0]):
            what = checkpointing if checkpointing != "every_k" else f"every_k={every}"
            best = worth, config.replace(token_budget=tokens, label=f"{config.label}, cap {cap_gib:g} GiB: budget "
                                         f"{tokens}, checkpointing {what}")  # fmt: skip
    if best is None:
        return row.replace(gpu_memory_gib=cap_gib, label=f"{row.label}, cap {cap_gib:g} GiB: nothing fits")
    return best[1]


def _capped_batch(row: RunConfig, cap_gib: float, shape: ModelShape) -> RunConfig:
    """``row`` (a strategy without a token budget) under the cap at the largest batch, halved from its own, that the
    planner fits."""
    batch = row.batch_size
    while batch >= 1:
        config = row.replace(gpu_memory_gib=cap_gib, batch_size=batch)
        if plan_memory(shape, settings_from_config(config)).fits:
            return config.replace(label=f"{row.label}, cap {cap_gib:g} GiB: batch {batch}")
        batch //= 2
    return row.replace(gpu_memory_gib=cap_gib, label=f"{row.label}, cap {cap_gib:g} GiB: nothing fits")


def capped_rows() -> list[RunConfig]:
    """The best row over each frozen base under each cap, largest cap first."""
    return [capped_row(base, cap) for cap in CAPS_GIB for base in base_rows(CAPPED_8B, "liger, varlen")]


# Two rows of 2,048 tokens: the eager bf16 step plans 58 GiB, inside an 80 GB card (four rows plan 101 GiB: out of
# memory on an H100, 2026-12-06).
PARITY_BATCH = 2


def parity_rows() -> list[RunConfig]:
    """One step of each base on the same batch: the first-step loss and gradient norm each record is judged by."""
    return [parity_probe(r, batch_size=PARITY_BATCH) for r in base_rows(LORA_8B, "eager, static, sdpa")]


def function_rows_24() -> list[RunConfig]:
    """The 4-bit row (NF4 linears, the rest bf16) under a 24 GiB cap with each LoRA linear one autograd function,
    then with LoRA's product in the GEMM, each profiled after its timed steps, on the same batches."""
    row = next(r for r in capped_rows() if r.gpu_memory_gib == 24 and r.frozen_base == "nf4_bf16")
    return epilogue_rows(row, ("function", "fused"))


def float8_cast_rows() -> list[RunConfig]:
    """The 8B's best row (Liger, token budget 8,192, ``torch_varlen``, no recomputation) over the bf16 base, then over
    the float8 base with each GEMM operand's cast fused (compiled), then with the eager cast it had before, each with
    a profiled step, on the same batches under a 79 GiB cap."""
    bf16, float8 = (row.replace(gpu_memory_gib=79.0, profile=True) for row in base_rows(BEST_8B, "liger, varlen")
                    if row.frozen_base in (BF16_BASE, FLOAT8_BASE))  # fmt: skip
    return [bf16, float8.replace(label=f"{float8.label}, fused cast"),
            float8.replace(label=f"{float8.label}, {EAGER_CAST_LABEL}")]  # fmt: skip


def float8_compile_rows() -> list[RunConfig]:
    """The two bases of :func:`float8_cast_rows` (the fused cast), each eager and then with every decoder layer
    compiled (the float8 GEMM one opaque operator in the compiled graph), each profiled, on the same batches: whether
    compiling the layers takes the host's time out of the float8 step (34% idle on an H100, bf16's 0.84x)."""
    bf16, float8 = float8_cast_rows()[:2]
    return [row for base in (bf16, float8)
            for row in (base, base.replace(kernels=f"{base.kernels}+{REGIONAL_BACKEND}",
                                           label=f"{base.label}, regional compile"))]  # fmt: skip


def float8_cast_env(config: RunConfig) -> dict[str, str]:
    """The eager cast for the row labelled so; the default (fused) for the others."""
    return {CAST_VARIABLE: "eager"} if config.label.endswith(EAGER_CAST_LABEL) else {}


SUITES = (
    Suite("qwen3-8b/memory-caps/24-gib-function", "the 4-bit row under a 24 GiB cap with each LoRA linear one "
          "autograd function, then with LoRA's product in the GEMM, both profiled, on the same batches",
          lambda _: function_rows_24(), parity=False, needs=f"{NEEDS}; liger-kernel"),
    Suite("qwen3-8b/float8-cast/fused-and-eager", "the best row over the bf16 base, then over the float8 base with its "
          "GEMM operands cast by one compiled kernel and by the eager ops it had, each profiled, on the same batches",
          lambda _: float8_cast_rows(), parity=False, needs=f"{NEEDS}; liger-kernel", row_env=float8_cast_env),
    Suite("qwen3-8b/float8-cast/regional-compile", "the best row over the bf16 base and over the float8 base, each "
          "eager and with its decoder layers compiled, each profiled, on the same batches",
          lambda _: float8_compile_rows(), parity=False, needs=f"{NEEDS}; liger-kernel"),
    Suite("qwen3-8b/float8-cast/regional-compile-only", "the compiled rows of regional-compile alone, bf16 base then "
          "float8 base (for a job too short for all four; the eager rows: fused-and-eager's)",
          lambda _: float8_compile_rows()[1::2], parity=False, needs=f"{NEEDS}; liger-kernel"),
    Suite("qwen3-8b/frozen-base/plain", "LoRA r16 over a bf16, an NF4 and a float8 frozen base: eager, static, sdpa",
          lambda _: base_rows(LORA_8B, "eager, static, sdpa"), needs=NEEDS),
    Suite("qwen3-8b/frozen-base/best", "the same three bases under Liger (no fused linear CE), a token budget of "
          "8,192 and torch_varlen", lambda _: base_rows(BEST_8B, "liger, token_budget 8192, torch_varlen"),
          parity=False, needs=f"{NEEDS}; liger-kernel"),  # parity: the parity suite's, on the eager reference
    Suite("qwen3-8b/memory-caps/best", "the best row over each base under caps of 80, 48 and 24 GiB, at the "
          "planner's largest token budget", lambda _: capped_rows(), parity=False, needs=f"{NEEDS}; liger-kernel"),
    Suite("qwen3-8b/frozen-base/parity", "each base's first step against the bf16 base's, within the format's bound",
          lambda _: parity_rows(), needs=NEEDS),
)  # fmt: skip
