"""A peer trainer's steps under the workload's timing: which are untimed, which timed, and what its callbacks saw
sliced to match (a prefetched batch left out, a run of other steps refused)."""

from __future__ import annotations

import dataclasses

import pytest

from nbhelpers.analysis.peers import PEER_MIN_TIMED_STEPS, peer_configs
from nbhelpers.analysis.recommend import Recommendation
from nbhelpers.measure.config import ConfigError, RunConfig
from nbhelpers.measure.trl_loop import PeerSchedule, peer_schedule, timed_steps_of


def test_step_timing_runs_the_workbooks_untimed_steps_then_the_workloads_steps():
    config = RunConfig(timing="steps", steps=10, warmup=1)
    assert peer_schedule(config, steps_per_epoch=4) == PeerSchedule(untimed=2, timed=10, epochs=0)
    assert peer_schedule(config, 4).max_steps == 12  # where one untimed epoch and three timed ones take 16
    epoch = config.replace(timing="epoch", min_timed_steps=10)
    assert peer_schedule(epoch, steps_per_epoch=4) == PeerSchedule(untimed=4, timed=12, epochs=4)


@dataclasses.dataclass
class _Count:
    real: int


class _Timer:
    """What epoch_timer keeps: per-epoch step seconds, each step's start and end, each epoch's seconds."""

    def __init__(self, spans: list[tuple[float, float]], per_epoch: int) -> None:
        self.spans = spans
        seconds = [end - begin for begin, end in spans]
        self.steps = [seconds[i : i + per_epoch] for i in range(0, len(seconds), per_epoch)]
        self.epochs = [sum(e) + 0.5 for e in self.steps]


def _batches(n: int) -> list:
    return [(_Count(real=10 * (i + 1)), [10 * (i + 1)], [1, 10 * (i + 1)]) for i in range(n)]


def test_step_timing_slices_the_timed_steps_and_leaves_a_prefetched_batch_out():
    schedule = PeerSchedule(untimed=2, timed=3, epochs=0)
    spans = [(float(i), i + 0.75) for i in range(5)]  # a step each second, 0.75 s of it in the step
    steps = timed_steps_of(schedule, _Timer(spans, per_epoch=2), _batches(6), accumulation=1, profiled_epochs=0)
    assert [c.real for c, _, _ in steps.batches] == [30, 40, 50]  # the sixth batch was fetched ahead, never run
    assert steps.seconds == [0.75] * 3 and steps.measured_steps == 5 and steps.passes == 1
    assert steps.wall["timed_wall_s"] == pytest.approx(2.75)  # from step 3's start to step 5's end
    assert steps.wall["time_outside_steps_s"] == pytest.approx(0.5)
    assert steps.wall["real_tokens_per_s_wall"] == pytest.approx(120 / 2.75)
    assert steps.wall["first_steps_s"] == pytest.approx(2.0)


def test_step_timing_refuses_a_run_of_other_steps():
    schedule = PeerSchedule(untimed=2, timed=3, epochs=0)
    with pytest.raises(RuntimeError, match="expected 5 steps of 1 batch"):
        timed_steps_of(schedule, _Timer([(0.0, 1.0)] * 4, 2), _batches(6), accumulation=1, profiled_epochs=0)
    with pytest.raises(RuntimeError, match="on 8 batch"):  # two micro-batches a step need ten
        timed_steps_of(schedule, _Timer([(0.0, 1.0)] * 5, 2), _batches(8), accumulation=2, profiled_epochs=0)


def test_epoch_timing_slices_whole_epochs_after_the_untimed_one():
    schedule = PeerSchedule(untimed=2, timed=4, epochs=3)
    spans = [(float(i), i + 0.5) for i in range(6)]
    steps = timed_steps_of(schedule, _Timer(spans, per_epoch=2), _batches(6), accumulation=1, profiled_epochs=0)
    assert [c.real for c, _, _ in steps.batches] == [30, 40, 50, 60] and steps.passes == 2
    assert steps.wall["timed_epoch_s"] == pytest.approx(3.0)
    assert steps.wall["time_outside_steps_s"] == pytest.approx(1.0)


def test_a_profiled_peer_row_needs_epoch_timing_and_says_so_before_any_work():
    with pytest.raises(ConfigError, match="'epoch' for a profiled row of engine='trl_defaults'") as caught:
        RunConfig(engine="trl_defaults", profile=True, timing="steps")
    assert caught.value.parameter == "timing"
    assert RunConfig(engine="trl_defaults", profile=True, timing="epoch").profile


def test_on_a_gpu_the_export_row_times_at_least_16_steps_under_step_timing_too():
    workload = RunConfig(run_name="r", label="pick", kernels="eager", padding="token_budget", timing="steps", steps=10)
    rec = Recommendation(
        label="pick", machine="m", run_name="r", record_id="x", config=workload.to_dict(), device_type="cuda",
        real_tokens_per_s=1.0, peak_memory_gib=None, mfu=None, speedup=1.0, baseline_label="b", parity="pass",
        candidates=1,
    )  # fmt: skip
    assert [c.steps for c in peer_configs(rec, "trl,trl_defaults")] == [PEER_MIN_TIMED_STEPS, 10]
    on_cpu = peer_configs(dataclasses.replace(rec, device_type="cpu"), "trl,trl_defaults")
    assert [c.steps for c in on_cpu] == [10, 10]  # the workload's own steps: the goal is judged on a GPU
