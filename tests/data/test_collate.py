"""Collators and batch samplers of every padding strategy on hand-made batches."""

import pytest
import torch

from nbhelpers.data.collate import collate, count_tokens, sequence_lengths
from nbhelpers.data.samplers import StrategyBatchSampler, StrategyCollator, strategy_dataloader
from nbhelpers.data.strategies import PADDING_STRATEGIES, PaddingSettings, plan_batches, row_width
from nbhelpers.validation import ConfigError

PAD = 0
# Three sequences of 3, 5 and 2 tokens; the prompt (label -100) is the first token of each.
EXAMPLES = [
    {"input_ids": [11, 12, 13], "labels": [-100, 12, 13]},
    {"input_ids": [21, 22, 23, 24, 25], "labels": [-100, 22, 23, 24, 25]},
    {"input_ids": [31, 32], "labels": [-100, 32]},
]


def test_static_pads_every_row_to_max_length():
    batch = StrategyCollator("static", PAD, max_length=8)(EXAMPLES)
    assert set(batch) == {"input_ids", "labels", "attention_mask"}
    assert batch["input_ids"].shape == (3, 8)
    assert batch["input_ids"][2].tolist() == [31, 32, 0, 0, 0, 0, 0, 0]
    assert batch["labels"][2].tolist() == [-100, 32] + [-100] * 6
    assert batch["attention_mask"].sum(dim=1).tolist() == [3, 5, 2]
    counts = count_tokens(batch)
    assert (counts.positions, counts.real, counts.loss) == (24, 10, 7)


def test_dynamic_and_bucketed_pad_to_the_longest_row():
    for strategy in ("dynamic", "bucketed"):
        batch = StrategyCollator(strategy, PAD, max_length=8)(EXAMPLES)
        assert batch["input_ids"].shape == (3, 5)
        assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]]
        assert batch["labels"][0].tolist() == [-100, 12, 13, -100, -100]


def test_multiple_rounds_the_width_up_but_not_past_max_length():
    assert StrategyCollator("multiple", PAD, 16, pad_to_multiple_of=4)(EXAMPLES)["input_ids"].shape == (3, 8)
    assert StrategyCollator("multiple", PAD, 16, pad_to_multiple_of=3)(EXAMPLES)["input_ids"].shape == (3, 6)
    assert StrategyCollator("multiple", PAD, 6, pad_to_multiple_of=4)(EXAMPLES)["input_ids"].shape == (3, 6)


@pytest.mark.parametrize("strategy", ["packed", "token_budget"])
def test_packed_is_one_row_with_restarting_positions_and_no_cross_boundary_labels(strategy):
    batch = StrategyCollator(strategy, PAD, max_length=8)(EXAMPLES)
    assert "attention_mask" not in batch
    assert batch["input_ids"].tolist() == [[11, 12, 13, 21, 22, 23, 24, 25, 31, 32]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 0, 1]]
    labels = batch["labels"][0].tolist()
    assert labels == [-100, 12, 13, -100, 22, 23, 24, 25, -100, 32]
    starts = [i for i, p in enumerate(batch["position_ids"][0].tolist()) if p == 0]
    assert [labels[i] for i in starts] == [-100, -100, -100]  # the first label of each sequence
    assert sequence_lengths(batch) == [3, 5, 2]
    counts = count_tokens(batch)
    assert (counts.positions, counts.real, counts.loss) == (10, 10, 7)


@pytest.mark.parametrize("boundaries", [False, True])
def test_rows_pad_their_end_to_the_kernels_multiple_without_a_token_counted(boundaries):
    """float8 matmuls need the token count a multiple of 16: the pads are one-token sequences with no loss."""
    settings = PaddingSettings("token_budget", batch_size=3, max_length=8, token_multiple=16)
    batch = collate([dict(e) for e in EXAMPLES], settings, PAD, boundaries)
    assert batch["input_ids"].tolist() == [[11, 12, 13, 21, 22, 23, 24, 25, 31, 32] + [PAD] * 6]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 0, 1] + [0] * 6]
    assert batch["labels"][0, 10:].tolist() == [-100] * 6
    assert sequence_lengths(batch) == [3, 5, 2]
    counts = count_tokens(batch)
    assert (counts.positions, counts.real, counts.loss) == (16, 10, 7)
    if boundaries:
        assert batch["cu_seq_lens_q"].tolist() == [0, 3, 8, 10, 11, 12, 13, 14, 15, 16]
        assert batch["seq_idx"].tolist() == [[0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8]]
    exact = settings.replace(token_multiple=5)  # 10 positions already a multiple: nothing added
    assert collate([dict(e) for e in EXAMPLES], exact, PAD)["input_ids"].shape == (1, 10)
    padded_rows = settings.replace(strategy="dynamic", token_multiple=4)  # a padded batch: its width rounded up
    batch = collate([dict(e) for e in EXAMPLES], padded_rows, PAD)
    assert batch["input_ids"].shape == (3, 8) and batch["attention_mask"].sum(dim=1).tolist() == [3, 5, 2]
    assert count_tokens(batch).loss == 7


def test_padding_a_packed_row_leaves_the_models_loss_as_it_was():
    from nbhelpers.models.loading import build_model

    torch.manual_seed(0)
    model = build_model("qwen3-tiny").eval()
    rows = [dict(e) for e in EXAMPLES]
    settings = PaddingSettings("token_budget", batch_size=3, max_length=8)
    losses = []
    for multiple in (1, 16):
        batch = collate(rows, settings.replace(token_multiple=multiple), PAD)
        with torch.no_grad():
            losses.append(float(model(**batch).loss))
    # fp32, the same kernels on longer rows (the pads are masked): only the blocking of the sums may change, about
    # log2(151,936 logits) = 17 roundings of 2^-24 in the loss's log-sum-exp: 1e-6 relative
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)


def test_packed_first_label_is_ignored_even_when_the_sequence_has_no_prompt():
    rows = [{"input_ids": [1, 2], "labels": [1, 2]}, {"input_ids": [3, 4, 5], "labels": [3, 4, 5]}]
    batch = StrategyCollator("packed", PAD, 8)(rows)
    assert batch["labels"].tolist() == [[-100, 2, -100, 4, 5]]


def test_collator_truncates_and_takes_tensors_and_missing_labels():
    rows = [{"input_ids": torch.tensor([1, 2, 3, 4, 5, 6]), "attention_mask": [1] * 6}, {"input_ids": [7, 8]}]
    padded = StrategyCollator("dynamic", 99, max_length=4)(rows)
    assert padded["input_ids"].tolist() == [[1, 2, 3, 4], [7, 8, 99, 99]]
    assert padded["labels"].tolist() == [[1, 2, 3, 4], [7, 8, -100, -100]]
    packed = StrategyCollator("packed", 99, max_length=4)(rows)
    assert packed["input_ids"].tolist() == [[1, 2, 3, 4, 7, 8]]
    assert packed["labels"].tolist() == [[-100, 2, 3, 4, -100, 8]]


def test_collator_rejects_unknown_strategy_and_mismatched_labels():
    with pytest.raises(ConfigError, match="padding='ragged'"):
        StrategyCollator("ragged", PAD, 8)
    with pytest.raises(ValueError, match="differ in length"):
        StrategyCollator("dynamic", PAD, 8)([{"input_ids": [1, 2], "labels": [1]}])


LENGTHS = [5, 40, 7, 33, 12, 90, 3, 64, 18, 27, 51, 8, 200, 9]


@pytest.mark.parametrize("strategy", PADDING_STRATEGIES)
@pytest.mark.parametrize("shuffle", [False, True])
def test_sampler_covers_every_index_exactly_once(strategy, shuffle):
    settings = PaddingSettings(strategy, batch_size=3, max_length=64, num_buckets=3)
    sampler = StrategyBatchSampler(LENGTHS, settings, shuffle=shuffle)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        batches = list(sampler)
        assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))
        assert len(sampler) == len(batches)


def test_sampler_epoch_zero_is_the_measured_plan():
    for strategy in PADDING_STRATEGIES:
        settings = PaddingSettings(strategy, 3, 64, num_buckets=3, token_budget=100, seed=5)
        assert list(StrategyBatchSampler(LENGTHS, settings)) == plan_batches(LENGTHS, settings)
    assert list(StrategyBatchSampler(LENGTHS, PaddingSettings("dynamic", 5, 64))) == [
        [0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13]
    ]  # fmt: skip


def test_bucketed_and_token_budget_batches():
    buckets = list(StrategyBatchSampler(LENGTHS, PaddingSettings("bucketed", 2, 64, num_buckets=2)))
    short = {i for i, n in enumerate(LENGTHS) if n <= 18}  # the 7 shortest (clipped) lengths
    assert all(set(b) <= short or not set(b) & short for b in buckets)
    budget = list(StrategyBatchSampler(LENGTHS, PaddingSettings("token_budget", 1, 64, token_budget=100)))
    assert budget == [[0, 1, 2, 3, 4], [5, 6], [7, 8], [9, 10, 11], [12, 13]]
    assert all(sum(min(LENGTHS[i], 64) for i in b) <= 100 for b in budget)


def test_shuffled_epochs_differ_and_repeat_with_the_seed():
    a = StrategyBatchSampler(LENGTHS, PaddingSettings("dynamic", 4, 64, seed=1), shuffle=True)
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    a.set_epoch(0)
    again = StrategyBatchSampler(LENGTHS, PaddingSettings("dynamic", 4, 64, seed=1), shuffle=True)
    assert list(a) == first == list(again)


def test_dataloader_with_batch_sampler_and_collator():
    examples = [{"input_ids": list(range(1, n + 1)), "labels": list(range(1, n + 1))} for n in LENGTHS]
    settings = PaddingSettings("bucketed", batch_size=4, max_length=64, num_buckets=2)
    loader = strategy_dataloader(examples, settings, pad_token_id=0)
    batches = list(loader)
    assert len(batches) == 4
    assert sum(count_tokens(b).real for b in batches) == sum(min(n, 64) for n in LENGTHS) == 405
    packed = list(strategy_dataloader(examples, PaddingSettings("token_budget", 4, 64, token_budget=128), 0))
    assert [b["input_ids"].shape[0] for b in packed] == [1] * len(packed)
    assert max(b["input_ids"].shape[1] for b in packed) <= 128
    assert sum(count_tokens(b).positions for b in packed) == 405


@pytest.mark.parametrize(
    ("call", "parameter"),
    [
        (lambda: plan_batches([3, 5], PaddingSettings("dynamic", batch_size=0, max_length=8)), "batch_size"),
        (lambda: plan_batches([3, 5], PaddingSettings("dynamic", batch_size=2, max_length=0)), "max_length"),
        (
            lambda: plan_batches([3, 5], PaddingSettings("bucketed", batch_size=2, max_length=8, num_buckets=0)),
            "num_buckets",
        ),
        (
            lambda: row_width([3, 5], PaddingSettings("multiple", max_length=8, pad_to_multiple_of=0)),
            "pad_to_multiple_of",
        ),
    ],
)
def test_arithmetic_rejects_bad_values_by_name(call, parameter):
    from nbhelpers.validation import ConfigError

    with pytest.raises(ConfigError, match=f"^{parameter}=0 is not allowed"):
        call()
