"""Quantized frozen bases on a GPU: Qwen3-8B with LoRA r16 over a bf16, an NF4 (QLoRA) and a float8 base, timed over
one epoch of the same samples (plain and with the workbook's best kernels), and their first-step parity against
the bf16 base within each format's bound (``models.frozen_base.FROZEN_BASES``)."""

from __future__ import annotations

from nbhelpers.measure.config import RunConfig
from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES

from .suite import Suite

NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
LORA_8B = RunConfig(
    model="qwen3-8b", adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear", batch_size=4,
    max_length=2048, num_samples=32, timing="epoch", attn_implementation="sdpa", kernels="eager", padding="static",
    timeout_s=900,
)  # fmt: skip
BEST_8B = LORA_8B.replace(kernels="liger", liger_kernels=NO_FLCE, padding="token_budget", token_budget=8192,
                          attn_implementation="torch_varlen")  # fmt: skip
NEEDS = "bitsandbytes (pip install 'nbhelpers[qlora]') for nf4; an sm89+ GPU (L4, H100, H200) for float8"


def base_rows(row: RunConfig, what: str) -> list[RunConfig]:
    """``row`` once per frozen base of the table, the bf16 base first (the suite's parity reference)."""
    return [row.replace(label=f"8b lora r16, {base} base, {what}", frozen_base=base) for base in FROZEN_BASE_NAMES]


def parity_rows() -> list[RunConfig]:
    """One step of each base on the same batch: the first-step loss and gradient norm each record is judged by."""
    return [r.replace(label=f"{r.label} (parity probe)", timing="steps", steps=1, warmup=0)
            for r in base_rows(LORA_8B, "eager, static, sdpa")]  # fmt: skip


SUITES = (
    Suite("qwen3-8b/frozen-base/plain", "LoRA r16 over a bf16, an NF4 and a float8 frozen base: eager, static, sdpa",
          lambda _: base_rows(LORA_8B, "eager, static, sdpa"), needs=NEEDS),
    Suite("qwen3-8b/frozen-base/best", "the same three bases under Liger (no fused linear CE), a token budget of "
          "8,192 and torch_varlen", lambda _: base_rows(BEST_8B, "liger, token_budget 8192, torch_varlen"),
          parity=False, needs=f"{NEEDS}; liger-kernel"),  # parity: the parity suite's, on the eager reference
    Suite("qwen3-8b/frozen-base/parity", "each base's first step against the bf16 base's, within the format's bound",
          lambda _: parity_rows(), needs=NEEDS),
)  # fmt: skip
