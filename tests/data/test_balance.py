"""Token balancing across ranks: one global plan, each step's samples dealt to ranks by tokens."""

import pytest

from nbhelpers.data.balance import balance_by_tokens, imbalance, rank_plan, split_plan, world_settings
from nbhelpers.data.strategies import PaddingSettings, plan_batches


def test_longest_first_to_the_lightest_rank():
    lengths = [100, 10, 60, 50, 40, 30]
    shares = balance_by_tokens(range(6), lengths, 2)
    # 100 -> r0; 60 -> r1; 50 -> r1 (110); 40 -> r0 (140); 30 -> r1 (140); 10 -> r0 (150)
    assert shares == [[0, 1, 4], [2, 3, 5]]
    assert [sum(lengths[i] for i in s) for s in shares] == [150, 140]
    assert imbalance(shares, lengths) == pytest.approx(150 / 145 - 1)


def test_a_cap_keeps_padded_ranks_at_an_even_share_of_samples():
    lengths = [100, 1, 1, 1]
    assert balance_by_tokens(range(4), lengths, 2) == [[0], [1, 2, 3]]
    assert balance_by_tokens(range(4), lengths, 2, max_per_rank=2) == [[0, 3], [1, 2]]
    with pytest.raises(ValueError, match="do not fit"):
        balance_by_tokens(range(5), [1] * 5, 2, max_per_rank=2)


def test_steps_with_fewer_samples_than_ranks_are_dropped():
    assert split_plan([[0, 1, 2], [3]], [5, 5, 5, 5], 2, padded=False) == [[[0, 2], [1]]]


@pytest.mark.parametrize("strategy", ["packed", "token_budget", "static", "dynamic"])
def test_rank_plans_cover_the_global_plan(strategy):
    lengths = [(i * 37) % 120 + 8 for i in range(40)]
    settings = PaddingSettings(strategy=strategy, batch_size=4, max_length=96, token_budget=256)
    world = 2
    global_plan = plan_batches(lengths, world_settings(settings, world))
    ranks = [rank_plan(lengths, settings, r, world) for r in range(world)]
    assert len(ranks[0]) == len(ranks[1]) == len([b for b in global_plan if len(b) >= world])
    for step, batch in enumerate(b for b in global_plan if len(b) >= world):
        assert sorted(ranks[0][step] + ranks[1][step]) == sorted(batch)
        clipped = [min(n, 96) for n in lengths]
        loads = [sum(clipped[i] for i in r[step]) for r in ranks]
        assert abs(loads[0] - loads[1]) <= max(clipped[i] for i in batch)  # within one sample's tokens


def test_world_settings_scale_batch_and_budget():
    settings = PaddingSettings(strategy="token_budget", batch_size=4, max_length=128, token_budget=1024)
    scaled = world_settings(settings, 4)
    assert (scaled.batch_size, scaled.effective_token_budget) == (16, 4096)
    assert world_settings(PaddingSettings(batch_size=2, max_length=64), 2).effective_token_budget == 256
