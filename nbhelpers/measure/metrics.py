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

    Per full-attention layer and head, QK^T and AV each cost 2 x L x L x head_dim FLOPs over a full
    square; causal masking keeps half; backward costs twice forward: 3 x 2 x 2 x L^2 x d / 2 = 6 x L^2 x d.
    A hybrid's linear-attention layers are not counted here (see ``linear_attention_flops``).
    """
    per_square = 6.0 * shape.full_attention_layers * shape.num_heads * shape.head_dim
    return per_square * float(sum(length * length for length in sequence_lengths))


# Chunk length of the chunked gated delta rule (flash-linear-attention's chunk_gated_delta_rule and
# transformers' torch_chunk_gated_delta_rule both use 64).
GATED_DELTA_CHUNK = 64


def gated_delta_chunk_flops(chunk: int, key_dim: int, value_dim: int) -> float:
    """Forward FLOPs of one head over one chunk of ``chunk`` tokens in the chunked gated delta rule.

    With C = chunk, dk, dv the head dimensions and S the dk x dv state carried between chunks
    (Yang et al., "Gated Delta Networks", ICLR 2025, sec. 3.3; the WY/UT form of DeltaNet's chunkwise
    algorithm, Yang et al. 2024), as flash-linear-attention's ``chunk_gated_delta_rule`` computes it:
      (beta K) K^T and Q K^T, C x C each:                   2 x 2 C^2 dk
      inverse of the unit lower-triangular C x C system:      C^3 / 3
      W = A (beta K) and U = A (beta V):                      2 C^2 dk + 2 C^2 dv
      V_new = U - W S and the inter-chunk read Q S:           2 x 2 C dk dv
      intra-chunk output (Q K^T masked) V_new:                2 C^2 dv
      state update S += K^T V_new:                            2 C dk dv
    = 6 C^2 dk + 4 C^2 dv + 6 C dk dv + C^3 / 3. Elementwise work (decays, gates, l2norm) is not counted.
    """
    c = float(chunk)
    return 6 * c * c * key_dim + 4 * c * c * value_dim + 6 * c * key_dim * value_dim + c**3 / 3


def linear_attention_flops(shape: ModelShape, sequence_lengths: Sequence[int]) -> float:
    """Training FLOPs of a hybrid's Gated DeltaNet layers (the chunked delta rule, not their projections,
    which ``matmul_flops_per_token`` counts) over the real tokens of each sequence.

    Each sequence is cut into chunks of ``GATED_DELTA_CHUNK`` tokens (the last one shorter); each value head
    runs ``gated_delta_chunk_flops`` per chunk (query/key heads are shared across value heads); backward
    costs twice forward, as for attention. Zero for a dense decoder.
    """
    if not shape.linear_attention_layers:
        return 0.0
    dk, dv = shape.linear_key_head_dim, shape.linear_value_head_dim
    full = gated_delta_chunk_flops(GATED_DELTA_CHUNK, dk, dv)
    forward = 0.0
    for length in sequence_lengths:
        chunks, rest = divmod(int(length), GATED_DELTA_CHUNK)
        forward += chunks * full + (gated_delta_chunk_flops(rest, dk, dv) if rest else 0.0)
    return 3.0 * shape.linear_attention_layers * shape.linear_num_value_heads * forward


def model_flops(
    shape: ModelShape, sequence_lengths: Sequence[int], frozen_parameters: int = 0, adapter_parameters: int = 0
) -> float:
    """Useful training FLOPs of one step over these sequences (padding does no useful work): weight matmuls,
    softmax attention of the full-attention layers, and the delta rule of the linear-attention layers.

    Per real token and matmul weight: 2 FLOPs forward, 2 for the input's gradient, 2 for the weight's gradient
    where the weight trains. ``frozen_parameters``: matmul weights that train frozen (a LoRA base model, the lm
    head included): no weight gradient, 2 FLOPs fewer (the inputs' gradients still flow through them, also where
    no layer before them trains, which a step could skip: counted, so MFU stays an upper bound there).
    ``adapter_parameters``: matmul weights an adapter adds (LoRA's A and B), trained: 6 FLOPs each. Recomputation
    under activation checkpointing is not counted (the same useful FLOPs, more time)."""
    real_tokens = sum(sequence_lengths)
    frozen = min(float(frozen_parameters), float(shape.flop_parameters))
    return (
        (matmul_flops_per_token(shape) + 6.0 * adapter_parameters - 2.0 * frozen) * real_tokens
        + attention_flops(shape, sequence_lengths)
        + linear_attention_flops(shape, sequence_lengths)
    )


def mfu(flops_per_step: float, step_time_s: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilization: useful FLOPs per second over the device's peak."""
    if step_time_s <= 0 or peak_flops_per_s <= 0:
        raise ValueError("step_time_s and peak_flops_per_s must be positive")
    return flops_per_step / step_time_s / peak_flops_per_s
