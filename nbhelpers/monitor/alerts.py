"""Warnings a user can act on, each with the notebook (or setting) that fixes it; thresholds are named here."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from nbhelpers.profiling.parse import GPU_UNIT

HIGH_PADDING_FRACTION = 0.25  # above this share of positions being padding, padding reduction pays
KERNEL_BOUND_UTILIZATION = 0.90  # nominal GPU utilization at or above this ...
KERNEL_BOUND_MFU = 0.20  # ... with MFU below this: busy with small or slow kernels, not with useful FLOPs

HIGH_PADDING = "high_padding"
KERNEL_BOUND = "kernel_bound"
FALLBACK_KERNEL = "fallback_kernel"


@dataclass(frozen=True)
class Alert:
    """One warning: a code (for filtering) and a sentence saying what is wrong and what to do."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def padding_alert(padding_fraction: float | None) -> Alert | None:
    """High padding: positions the model computes and throws away."""
    if padding_fraction is None or padding_fraction <= HIGH_PADDING_FRACTION:
        return None
    return Alert(
        HIGH_PADDING,
        f"{padding_fraction:.0%} of the positions are padding (threshold {HIGH_PADDING_FRACTION:.0%}): pad to the "
        "longest row, bucket by length or pack sequences without padding; notebook 03 (03_dynamic_padding) "
        "measures each on your data (in TRL: padding_free=True or packing=True).",
    )


def kernel_bound_alert(nominal_utilization: float | None, mfu: float | None, unit: str | None) -> Alert | None:
    """High nominal utilization with low MFU, read off a GPU trace (a CPU trace's busy share means nothing here)."""
    if unit != GPU_UNIT or nominal_utilization is None or mfu is None:
        return None
    if nominal_utilization < KERNEL_BOUND_UTILIZATION or mfu >= KERNEL_BOUND_MFU:
        return None
    return Alert(
        KERNEL_BOUND,
        f"the GPU was busy {nominal_utilization:.0%} of the profiled steps but MFU is {mfu:.1%} (thresholds "
        f"{KERNEL_BOUND_UTILIZATION:.0%} / {KERNEL_BOUND_MFU:.0%}): the time goes to many small or slow kernels, "
        "not useful FLOPs; notebook 01 (01_baseline_profile) shows which, notebook 02 swaps in fused kernels.",
    )


def fallback_alert(layer_paths: list[dict[str, Any]], reference: str) -> Alert | None:
    """Gated DeltaNet layers that run transformers' PyTorch reference instead of fused kernels.

    ``layer_paths`` are :func:`nbhelpers.kernels.hybrid_paths.layer_paths` rows; ``reference`` is the label of
    the PyTorch fallback in them.
    """
    linear = [row for row in layer_paths if row.get("delta_rule")]
    slow = [row for row in linear if reference in (row.get("delta_rule"), row.get("conv"))]
    if not slow:
        return None
    parts = sorted({part for row in slow for part in ("delta_rule", "conv") if row.get(part) == reference})
    return Alert(
        FALLBACK_KERNEL,
        f"{len(slow)} of {len(linear)} Gated DeltaNet layers run transformers' PyTorch fallback for "
        f"{' and '.join(parts)} (a step measured 2.6x slower than with flash-linear-attention on an H200): install "
        "flash-linear-attention (and causal-conv1d) or use kernels='fla'; "
        "nbhelpers.kernels.hybrid_paths.layer_paths_frame(model) lists each layer's path.",
    )
