"""The spread of a measured rate: the bootstrap interval on fixed samples, the floor that marks a record thin,
and warm-up that covers every batch shape the timed steps will see."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.records import is_thin, rate_interval_of, speedup_interval
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.spread import MIN_TIMED_STEPS, overlaps, rate_interval, ratio_interval, spread_metrics
from nbhelpers.measure.store import RunRecord


def test_equal_steps_have_no_spread_and_an_interval_holds_the_point():
    assert rate_interval([100.0] * 6, [0.5] * 6) == (200.0, 200.0)
    tokens, seconds = [100.0] * 5, [1.0, 1.0, 1.0, 1.0, 2.0]
    low, high = rate_interval(tokens, seconds)
    point = sum(tokens) / sum(seconds)  # 83.3: the ratio of sums a record reports
    assert 50.0 <= low < point < high <= 100.0  # between "every step the slow one" and "none of them"
    assert rate_interval(tokens, seconds) == (low, high)  # a fixed seed: one record, one interval
    assert rate_interval([7.0], [2.0]) == (3.5, 3.5)  # one step: the point, and a thin record
    with pytest.raises(ValueError, match="one token count per timed step"):
        rate_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive time"):
        rate_interval([1.0], [0.0])


def test_a_wider_spread_of_steps_gives_a_wider_interval():
    steady = rate_interval([100.0] * 12, [1.0, 1.1] * 6)
    noisy = rate_interval([100.0] * 12, [0.5, 2.0] * 6)
    assert noisy[1] - noisy[0] > steady[1] - steady[0] > 0


def test_the_floor_marks_a_record_thin_and_says_why():
    thin = spread_metrics([10.0] * 3, [1.0] * 3)
    assert thin["thin"] and thin["thin_reason"] == f"3 timed step(s), fewer than {MIN_TIMED_STEPS}"
    assert thin["timed_steps"] == 3 and thin["timed_real_tokens_total"] == 30
    assert thin["interval_method"].startswith("bootstrap 95% percentile interval")
    enough = spread_metrics([10.0] * MIN_TIMED_STEPS, [1.0] * MIN_TIMED_STEPS)
    assert not enough["thin"] and enough["thin_reason"] == ""


def test_records_read_their_interval_and_thinness_also_when_written_before_them():
    new = RunRecord(config={}, metrics={"real_tokens_per_s": 90.0, "real_tokens_per_s_interval": [80.0, 99.0],
                                        "thin": False, "timed_steps": 12})  # fmt: skip
    assert rate_interval_of(new) == (80.0, 99.0) and not is_thin(new)
    old = RunRecord(config={}, metrics={"real_tokens_per_s": 50.0, "timed_real_tokens": [50.0, 50.0],
                                        "step_times_s": [1.0, 1.0], "timed_batches": 2})  # fmt: skip
    assert rate_interval_of(old) == (50.0, 50.0) and is_thin(old)  # recomputed from its steps; 2 < the floor
    assert rate_interval_of(RunRecord(config={}, metrics={"real_tokens_per_s": 1.0})) is None
    assert is_thin(RunRecord(config={}, metrics={"timed_batches": 40})) is False
    assert is_thin(RunRecord(config={}, metrics={})) is True  # nothing says what it rests on


def test_a_speedup_interval_divides_the_ends_conservatively():
    assert ratio_interval((10.0, 20.0), (2.0, 4.0)) == (2.5, 10.0)
    with pytest.raises(ValueError, match="positive"):
        ratio_interval((1.0, 2.0), (0.0, 1.0))
    fast = RunRecord(config={}, metrics={"real_tokens_per_s_interval": [300.0, 330.0]})
    base = RunRecord(config={}, metrics={"real_tokens_per_s_interval": [95.0, 105.0]})
    low, high = speedup_interval(fast, base)
    assert low == pytest.approx(300 / 105) and high == pytest.approx(330 / 95)
    assert speedup_interval(fast, RunRecord(config={}, metrics={})) is None
    assert overlaps((1, 3), (2, 5)) and overlaps((2, 5), (1, 3)) and not overlaps((1, 2), (3, 4))


# -- warm-up covers every shape ---------------------------------------------------------------------------


def test_warm_up_sees_every_shape_the_timed_steps_will_see(monkeypatch):
    """A fake step pays a first-call cost per shape (as a compile, an autotuner or a cuDNN plan would): after the
    schedule's untimed steps, no timed step pays it, and the timed seconds are the steady ones."""
    import nbhelpers.measure.step as step_module

    shapes = ["a", "a", "b", "c", "a", "b"]  # one per batch of the plan
    config = RunConfig(steps=5, warmup=1, timing="steps")
    untimed, timed = step_module.step_schedule(config, len(shapes), shapes)
    assert untimed[: config.warmup] == [1] and len(timed) == config.steps
    assert step_module.unseen_shapes(shapes, untimed, timed) == set()
    assert step_module.unseen_shapes(shapes, [1], timed) == {"b", "c"}  # what plain warm-up would have left

    clock = {"now": 0.0}
    seen: set[str] = set()

    def fake_step(batch: dict) -> tuple[float, float]:
        clock["now"] += 0.1 + (5.0 if batch["shape"] not in seen else 0.0)  # first call of a shape: +5 s
        seen.add(batch["shape"])
        return 1.0, 1.0

    monkeypatch.setattr(step_module.time, "perf_counter", lambda: clock["now"])
    batch_at = lambda i: {"shape": shapes[i % len(shapes)]}  # noqa: E731
    fake_step(batch_at(0))  # the first step
    step_module.timed_steps(fake_step, batch_at, untimed, "cpu")
    times, _ = step_module.timed_steps(fake_step, batch_at, timed, "cpu")
    # a fake clock: float64 differences of sums of 0.1 (pytest's default 1e-6 relative is far above their rounding)
    assert times == pytest.approx([0.1] * config.steps)  # no first-call cost inside the timed window


def test_epoch_timing_repeats_whole_passes_up_to_the_floor_within_the_cap(monkeypatch):
    import nbhelpers.measure.step as step_module

    clock = {"now": 0.0}

    def fake_step(batch: dict) -> tuple[float, float]:
        clock["now"] += 1.0
        return 1.0, 1.0

    monkeypatch.setattr(step_module.time, "perf_counter", lambda: clock["now"])
    epoch = [0, 1, 2]
    config = RunConfig(timing="epoch", min_timed_steps=10, timing_cap_s=600)
    times, losses, indices = step_module.timed_passes(fake_step, lambda i: {}, epoch, "cpu", config)
    assert len(times) == len(losses) == 12 and indices == epoch * 4  # whole passes: the same samples each time
    capped = config.replace(timing_cap_s=7)  # a third pass would end at 9 s > 7 s
    assert len(step_module.timed_passes(fake_step, lambda i: {}, epoch, "cpu", capped)[0]) == 6
    once = config.replace(timing="steps")
    assert len(step_module.timed_passes(fake_step, lambda i: {}, epoch, "cpu", once)[0]) == 3
