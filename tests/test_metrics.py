"""Token counting on a hand-made batch and MFU arithmetic on a hand-computed case."""

import pytest
import torch

from nbhelpers.data.collate import count_tokens, sequence_lengths
from nbhelpers.measure.metrics import attention_flops, mfu, model_flops, step_time_stats
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
