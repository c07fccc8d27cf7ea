"""Token counting on a hand-made batch and MFU arithmetic on a hand-computed case."""

import dataclasses

import pytest
import torch

from nbhelpers.data.collate import count_tokens, sequence_lengths
from nbhelpers.measure.metrics import (
    GATED_DELTA_CHUNK,
    attention_flops,
    gated_delta_chunk_flops,
    linear_attention_flops,
    mfu,
    model_flops,
    step_time_stats,
)
from nbhelpers.models.shape import ModelShape

SHAPE = ModelShape(
    vocab_size=100,
    hidden_size=8,
    intermediate_size=16,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=4,
    tie_word_embeddings=True,
)


def test_counts_on_hand_made_padded_batch():
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8], [9, 10, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
        "labels": torch.tensor([[-100, -100, 7, 8], [-100, 10, -100, -100]]),
    }
    counts = count_tokens(batch)
    assert (counts.positions, counts.real, counts.loss) == (8, 6, 3)
    assert counts.padding_fraction == pytest.approx(0.25)
    assert sequence_lengths(batch) == [4, 2]


def test_counts_on_hand_made_packed_row():
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 9, 10]]),
        "position_ids": torch.tensor([[0, 1, 2, 0, 1]]),
        "labels": torch.tensor([[-100, 6, 7, -100, 10]]),
    }
    counts = count_tokens(batch)
    assert (counts.positions, counts.real, counts.loss) == (5, 5, 3)
    assert sequence_lengths(batch) == [3, 2]


def test_parameter_arithmetic_by_hand():
    # layer: q 8*2*4=64, k,v 2*8*1*4=64, o 2*4*8=64, qk-norm 8, mlp 3*8*16=384, two norms 16 -> 600
    assert SHAPE.layer_parameters == 600
    assert SHAPE.embedding_parameters == 800
    assert SHAPE.total_parameters == 800 + 2 * 600 + 8
    assert SHAPE.flop_parameters == 2 * 600 + 8 + 800  # tied lm head does matmul work


def test_mfu_by_hand():
    lengths = [3, 1]
    matmul = 6 * 2008 * 4  # 6 x flop parameters x real tokens
    attention = 6 * 2 * 2 * 4 * (9 + 1)  # 6 x layers x heads x head_dim x sum L^2
    assert attention_flops(SHAPE, lengths) == attention
    assert model_flops(SHAPE, lengths) == matmul + attention
    assert mfu(model_flops(SHAPE, lengths), step_time_s=0.5, peak_flops_per_s=1e6) == pytest.approx(
        (matmul + attention) / 0.5 / 1e6
    )
    with pytest.raises(ValueError):
        mfu(1.0, 0.0, 1.0)


def test_step_time_stats():
    stats = step_time_stats([4.0, 1.0, 3.0, 2.0, 5.0])
    assert stats["step_time_median_s"] == 3.0
    assert stats["step_time_iqr_s"] == pytest.approx(2.0)
    assert (stats["step_time_min_s"], stats["step_time_max_s"]) == (1.0, 5.0)
    with pytest.raises(ValueError, match="empty"):
        step_time_stats([])


HYBRID = ModelShape(
    vocab_size=100, hidden_size=8, intermediate_size=16, num_layers=4, num_heads=2, num_kv_heads=1, head_dim=4,
    tie_word_embeddings=True, num_attention_layers=1, attention_output_gate=True, linear_num_key_heads=1,
    linear_num_value_heads=2, linear_key_head_dim=4, linear_value_head_dim=4, linear_conv_kernel=4,
)  # fmt: skip


def test_hybrid_parameters_by_layer_kind():
    mlp_and_norms = 3 * 8 * 16 + 2 * 8
    # q with its gate (8 x 2*4*2), k and v (8 x 4 each), o (8 x 8), q/k norms (4 each)
    assert HYBRID.attention_layer_parameters == 128 + 64 + 64 + 8 + mlp_and_norms
    # qkv (8 x 16), z (8 x 8), b and a (8 x 2 each), conv (16 channels x 4 taps), dt_bias and A_log (2 each),
    # gated norm (4), out (8 x 8)
    assert HYBRID.linear_attention_layer_parameters == 128 + 64 + 32 + 64 + 4 + 4 + 64 + mlp_and_norms
    assert HYBRID.decoder_parameters == HYBRID.attention_layer_parameters + 3 * HYBRID.linear_attention_layer_parameters
    assert HYBRID.flop_parameters == HYBRID.decoder_parameters + 8 + 800  # lm head in, embedding lookup out


def test_gated_delta_chunk_flops_formula():
    # C=64, dk=dv=128: 6*64^2*128 + 4*64^2*128 + 6*64*128^2 + 64^3/3
    assert gated_delta_chunk_flops(64, 128, 128) == pytest.approx(3_145_728 + 2_097_152 + 6_291_456 + 87_381.33)
    assert gated_delta_chunk_flops(1, 4, 4) == pytest.approx(6 * 4 + 4 * 4 + 6 * 16 + 1 / 3)


def test_hybrid_attention_counts_only_its_full_attention_layers():
    lengths = [10, 100]
    dense = dataclasses.replace(HYBRID, num_attention_layers=None)
    assert attention_flops(HYBRID, lengths) == attention_flops(dense, lengths) / 4
    assert linear_attention_flops(dense, lengths) == 0.0


def test_linear_attention_flops_chunk_each_sequence():
    per_chunk = gated_delta_chunk_flops(GATED_DELTA_CHUNK, 4, 4)
    # 100 tokens = one full chunk + 36; 10 tokens = one short chunk; 3 layers x 2 value heads, backward 2x forward
    forward = per_chunk + gated_delta_chunk_flops(36, 4, 4) + gated_delta_chunk_flops(10, 4, 4)
    assert linear_attention_flops(HYBRID, [100, 10]) == pytest.approx(3 * 3 * 2 * forward)
    # linear in the number of full chunks, unlike softmax attention
    assert linear_attention_flops(HYBRID, [640]) == pytest.approx(10 * linear_attention_flops(HYBRID, [64]))
    lengths = [100, 10]
    assert model_flops(HYBRID, lengths) == pytest.approx(
        6 * HYBRID.flop_parameters * 110 + attention_flops(HYBRID, lengths) + linear_attention_flops(HYBRID, lengths)
    )
