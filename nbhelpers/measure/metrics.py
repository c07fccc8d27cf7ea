"""The arithmetic of a measured step: timing statistics, token counts, FLOPs and MFU."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from nbhelpers.models.shape import ModelShape


def step_time_stats(times_s: Sequence[float]) -> dict[str, float]:
    """Median and spread (inter-quartile range, min, max) of per-step wall times."""
    if not times_s:
        raise ValueError("times_s is empty: at least one timed step is needed")
    ordered = sorted(times_s)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "step_time_median_s": statistics.median(ordered),
        "step_time_iqr_s": q3 - q1,
        "step_time_min_s": ordered[0],
        "step_time_max_s": ordered[-1],
    }


def matmul_flops_per_token(shape: ModelShape) -> float:
    """Training FLOPs per real token of the weight matmuls: 6 x parameters (lm head in, embedding out)."""
    return 6.0 * shape.flop_parameters


def attention_flops(shape: ModelShape, sequence_lengths: Sequence[int]) -> float:
    """Training FLOPs of causal attention scores and values over the real tokens of each sequence.

    Per layer and head, QK^T and AV each cost 2 x L x L x head_dim FLOPs over a full square;
    causal masking keeps half; backward costs twice forward: 3 x 2 x 2 x L^2 x d / 2 = 6 x L^2 x d.
    """
    per_square = 6.0 * shape.num_layers * shape.num_heads * shape.head_dim
    return per_square * float(sum(length * length for length in sequence_lengths))


def model_flops(shape: ModelShape, sequence_lengths: Sequence[int]) -> float:
    """Useful training FLOPs of one step over these sequences (padding does no useful work)."""
    real_tokens = sum(sequence_lengths)
    return matmul_flops_per_token(shape) * real_tokens + attention_flops(shape, sequence_lengths)


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization: useful FLOPs per second over the device's peak."""
    if step_time_s <= 0 or peak_flops_per_s <= 0:
        raise ValueError("step_time_s and peak_flops_per_s must be positive")
    return flops_per_step / step_time_s / peak_flops_per_s
