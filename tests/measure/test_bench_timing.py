"""Timing windows: steps (warm-up then timed steps) and epoch (one untimed pass, one timed pass)."""

import pytest

from nbhelpers.analysis.records import speedup, workload_of
from nbhelpers.data.strategies import PaddingSettings, plan_batches
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_config
from nbhelpers.measure.step import step_schedule
from nbhelpers.validation import ConfigError


def test_steps_schedule_is_warmup_then_timed_steps():
    config = RunConfig(steps=3, warmup=2)
    assert step_schedule(config, num_batches=100) == ([1, 2], [3, 4, 5])


def test_epoch_schedule_sees_every_batch_untimed_then_times_every_batch():
    config = RunConfig(timing="epoch", steps=1, warmup=0)
    untimed, timed = step_schedule(config, num_batches=4)
    assert untimed == [1, 2, 3] and timed == [0, 1, 2, 3]


def test_timing_is_validated():
    with pytest.raises(ConfigError, match="timing"):
        RunConfig(timing="epochs")
    RunConfig(timing="epoch", profile=True, steps=1, profile_steps=2)  # epoch timing ignores steps


@pytest.mark.slow
def test_epoch_timing_times_the_same_samples_whatever_the_plan(kernel_env):
    """Static and token-budget plans differ in steps, but an epoch holds the same real tokens."""
    base = RunConfig(run_name="t", num_samples=12, batch_size=4, max_length=64, timing="epoch", steps=1, warmup=0)
    static = run_config(base.replace(padding="static"), isolate=False)
    budget = run_config(base.replace(padding="token_budget", token_budget=128), isolate=False)
    assert static.ok and budget.ok, (static.reason, budget.reason)
    s, b = static.metrics, budget.metrics
    # 3 steps an epoch: whole epochs are timed again until at least min_timed_steps (10) steps, so 4 passes
    assert s["timed_passes"] == 4 and s["timed_batches"] == s["timed_steps"] == 12 and not s["thin"]
    assert len(s["untimed_step_times_s"]) == 2
    assert [shape[1] for shape in s["timed_batch_shapes"]] == [64] * 12
    assert b["timed_batches"] == len(b["timed_batch_shapes"]) >= 10 and b["timed_batches"] % b["timed_passes"] == 0
    real = s["real_tokens_per_step"] * s["timed_batches"] / s["timed_passes"]  # one epoch's real tokens
    assert real == pytest.approx(b["real_tokens_per_step"] * b["timed_batches"] / b["timed_passes"])
    low, high = s["real_tokens_per_s_interval"]
    assert low <= s["real_tokens_per_s"] <= high and s["interval_method"].startswith("bootstrap 95%")
    assert workload_of(static).endswith("whole epochs timed after one untimed")
    assert speedup(budget, static) > 0  # one workload: the same samples, timed whole


def test_epoch_and_steps_records_are_different_workloads(make_record):
    steps = make_record("steps", 1000.0)
    epoch = make_record("epoch", 1200.0, timing="epoch")
    with pytest.raises(ValueError, match="one workload"):
        speedup(epoch, steps)


def test_plan_for_epoch_covers_each_sample_once():
    lengths = [5, 60, 33, 12, 64, 7, 40, 20, 9, 50]
    for strategy in ("static", "bucketed", "packed", "token_budget"):
        plan = plan_batches(lengths, PaddingSettings(strategy, 4, 64, num_buckets=2, token_budget=128, seed=0))
        assert sorted(i for batch in plan for i in batch) == list(range(len(lengths)))
