"""The tuner drops a candidate only when its interval lies below the leader's, and reuses the store's records of
the same computation on this machine instead of measuring them again (and does not store them twice)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_tuner import ENV, WORKLOAD, FakeClock, FakeMeasure, label

from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.planning.candidates import Candidate
from nbhelpers.tuning import Tuner
from nbhelpers.tuning.halving import cut
from nbhelpers.tuning.reuse import computation_key

MACHINE = RunRecord(config={}, environment=dict(ENV)).machine
RATES = {
    ("eager", "static", "sdpa"): 100.0,  # the baseline
    ("compile", "packed", "sdpa"): 500.0,  # the leader
    ("eager", "packed", "sdpa"): 450.0,  # within the leader's interval
    ("compile", "static", "sdpa"): 150.0,  # shown slower
}
SPACE = [Candidate(k, (), p, 0, "sdpa") for k, p in (("compile", "packed"), ("eager", "packed"), ("compile", "static"))]


class SpreadMeasure(FakeMeasure):
    """Each record with an interval of +-20% around its rate, as a few noisy steps would give."""

    def __call__(self, config):
        record = super().__call__(config)
        if record.ok:
            rate = record.metrics["real_tokens_per_s"]
            record.metrics["real_tokens_per_s_interval"] = [0.8 * rate, 1.2 * rate]
        return record


def tuner(store: RunStore, measure: FakeMeasure, clock: FakeClock, **options) -> Tuner:
    options = {"reuse_baseline": False} | options
    return Tuner(WORKLOAD, SPACE, budget_s=10_000, measure=measure, clock=clock, store=store, progress=False,
                 machine=MACHINE, **options)  # fmt: skip


def test_cut_keeps_every_candidate_whose_interval_reaches_the_leaders():
    scores = [("a", 100.0), ("b", 95.0), ("c", 70.0)]
    verdict = cut(scores, eta=3, intervals={"a": (90.0, 110.0), "b": (85.0, 105.0), "c": (60.0, 80.0)})
    assert verdict.kept == ("a", "b") and verdict.dropped == ("c",) and verdict.threshold == 90.0
    assert cut(scores, eta=3).kept == ("a",)  # without intervals: the fastest 1/eta
    assert cut(scores, eta=3, intervals={}).kept == ("a",)  # points: only an equal rate reaches the leader


def test_a_candidate_within_the_leaders_interval_goes_on_and_one_below_it_is_dropped(tmp_path):
    clock = FakeClock()
    result = tuner(RunStore(tmp_path / "t"), SpreadMeasure(clock, RATES), clock).run()
    rung0 = {d.candidate: d for d in result.decisions if d.stage == "rung 0"}
    close, slow = rung0[label("eager", "packed", "sdpa")], rung0[label("compile", "static", "sdpa")]
    assert close.decision == "kept" and close.reason.startswith("not shown slower than the fastest")
    assert slow.decision == "dropped" and "lies below the leader's lower end, 400 real tok/s" in slow.reason
    assert any(d.stage == "rung 1" and d.candidate == close.candidate for d in result.decisions)
    assert result.winner_label == "tuned: " + label("compile", "packed", "sdpa")


def test_records_already_in_the_store_are_reused_not_measured_nor_stored_again(tmp_path):
    store = RunStore(tmp_path / "t")
    clock = FakeClock()
    grid = FakeMeasure(clock, RATES)
    for kernels, padding in (("eager", "static"), ("compile", "packed"), ("eager", "packed")):
        config = Candidate(kernels, (), padding, 0, "sdpa").config(WORKLOAD, label=f"grid {kernels} {padding}")
        store.append(grid(config))  # the notebook's grid: the workload's own timing, this machine
    stored = store.load()
    measure = FakeMeasure(clock, RATES)
    result = tuner(store, measure, clock).run()
    measured = {(c.kernels, c.padding) for c in measure.calls}
    assert ("compile", "packed") not in measured and ("eager", "packed") not in measured
    assert ("compile", "static") in measured  # not in the store: measured
    reused = [d for d in result.decisions if "reused from the store" in d.reason]
    assert {d.record_id for d in reused} <= {r.record_id for r in stored} and reused
    winner = result.winner
    assert winner.record_id == stored[1].record_id  # the grid's record at the workload's timing wins the final
    ids = [r.record_id for r in store.load()]
    assert len(ids) == len(set(ids))  # nothing stored twice


def test_the_stored_baseline_stands_in_for_the_baseline_in_rung_0_too(tmp_path):
    store = RunStore(tmp_path / "t")
    clock = FakeClock()
    grid = FakeMeasure(clock, RATES)
    baseline = grid(Candidate("eager", (), "static", 0, "sdpa").config(WORKLOAD, label="grid eager static"))
    store.append(baseline)
    measure = FakeMeasure(clock, RATES)
    space = [Candidate("eager", (), "static", 0, "sdpa"), *SPACE]  # the baseline is a candidate too, as in a grid
    result = Tuner(WORKLOAD, space, budget_s=10_000, measure=measure, clock=clock, store=store, progress=False,
                   machine=MACHINE, reuse_baseline=True).run()  # fmt: skip
    assert result.baseline.record_id == baseline.record_id
    assert ("eager", "static") not in {(c.kernels, c.padding) for c in measure.calls}  # not measured again
    rung0 = [d for d in result.decisions if d.stage == "rung 0" and d.record_id == baseline.record_id]
    assert len(rung0) == 1 and "reused from the store" in rung0[0].reason
    ids = [r.record_id for r in store.load()]
    assert len(ids) == len(set(ids))


def test_another_machine_or_another_computation_is_not_reused(tmp_path):
    store = RunStore(tmp_path / "t")
    clock = FakeClock()
    grid = FakeMeasure(clock, RATES)
    elsewhere = grid(Candidate("compile", (), "packed", 0, "sdpa").config(WORKLOAD))
    elsewhere.environment["hostname"] = "another-host"
    store.append(elsewhere)
    store.append(grid(Candidate("compile", (), "packed", 0, "sdpa").config(WORKLOAD.replace(seed=7))))
    measure = FakeMeasure(clock, RATES)
    tuner(store, measure, clock).run()
    assert ("compile", "packed") in {(c.kernels, c.padding) for c in measure.calls}


def test_the_computation_key_ignores_timing_and_names_but_not_what_a_step_computes():
    base = Candidate("liger", ("rms_norm",), "token_budget", 0, "sdpa").config(WORKLOAD).to_dict()
    same = base | {"steps": 99, "warmup": 7, "timing": "steps", "label": "x", "run_name": "other", "profile": True}
    assert computation_key(same) == computation_key(base)
    explicit = base | {"token_budget": WORKLOAD.batch_size * WORKLOAD.max_length}  # 0 means batch x max length
    assert computation_key(explicit) == computation_key(base)
    for change in ({"liger_kernels": ["swiglu"]}, {"seed": 1}, {"activation_checkpointing": "full"},
                   {"adapter": "lora"}, {"max_length": 128}):  # fmt: skip
        assert computation_key(base | change) != computation_key(base), change
    eager = Candidate("eager", (), "static", 0, "sdpa").config(WORKLOAD).to_dict()
    assert computation_key(eager | {"liger_kernels": ["swiglu"]}) == computation_key(eager)  # eager reads none


KILLED_TUNE = """
import os, signal, sys
sys.path[:0] = {paths!r}
from test_tuner_reuse import RATES, SPACE, MACHINE, tuner
from test_tuner import FakeClock, FakeMeasure
from nbhelpers.measure.store import RunStore

class KilledAt(FakeMeasure):
    def __call__(self, config):
        if len(self.calls) == {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)  # as the machine or the user would: no clean-up runs
        return super().__call__(config)

clock = FakeClock()
tuner(RunStore({store!r}), KilledAt(clock, RATES), clock).run()
"""


@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_tuner_killed_mid_rung_keeps_what_it_measured_and_its_rerun_measures_only_the_rest(tmp_path, kill_at):
    import subprocess
    import sys

    tests = Path(__file__).resolve().parents[1]
    paths = [str(tests / "tuning")]
    store_dir = tmp_path / "t"
    code = KILLED_TUNE.format(paths=paths, kill_at=kill_at, store=str(store_dir))
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr
    stored = RunStore(store_dir).load()
    assert len(stored) == kill_at  # the baseline and every rung measurement that finished before the kill
    clock = FakeClock()
    measure = FakeMeasure(clock, RATES)
    result = tuner(RunStore(store_dir), measure, clock, reuse_baseline=True).run()
    ids = [r.record_id for r in RunStore(store_dir).load()]
    assert len(ids) == len(set(ids))  # nothing stored twice
    measured = {(c.kernels, c.padding, c.timing, c.steps) for c in measure.calls}
    for record in stored:  # what the killed attempt finished is not measured again
        cfg = record.config
        assert (cfg["kernels"], cfg["padding"], cfg["timing"], cfg["steps"]) not in measured
    assert result.winner is not None


@pytest.mark.parametrize(("device", "expected"), [("cpu", {"eager"}), ("cuda", {"eager", "liger"})])
def test_the_tuner_reads_auto_kernels_per_device(tmp_path, device, expected):
    from nbhelpers.tuning import tune

    clock = FakeClock()
    rates = {(k, p, "sdpa"): r for k in ("eager", "liger") for p, r in (("static", 100.0), ("packed", 300.0))}
    measure = FakeMeasure(clock, rates)
    tune(WORKLOAD, "auto", "static,packed", "sdpa", budget_s=10_000, device=device, measure=measure, clock=clock,
         store=RunStore(tmp_path / "t"), progress=False, machine=MACHINE, reuse_baseline=False)  # fmt: skip
    assert {c.kernels for c in measure.calls} == expected  # a CPU's auto list leaves Liger's interpreter out


class NoisyFinal(SpreadMeasure):
    """The rungs see packed rows 3x faster; at the workload's timing (one epoch) a noisy packed record reads below the
    baseline's point estimate, its interval ``final_span`` (a fraction of the baseline's rate) around it."""

    def __init__(self, clock, final_span):
        super().__init__(clock, {("eager", "static", "sdpa"): 100.0, ("eager", "packed", "sdpa"): 300.0})
        self.final_span = final_span

    def __call__(self, config):
        record = super().__call__(config)
        if config.padding == "packed" and config.timing == "epoch":
            low, high = self.final_span
            record.metrics["real_tokens_per_s"] = (low + high) / 2 * 100.0
            record.metrics["real_tokens_per_s_interval"] = [low * 100.0, high * 100.0]
        return record


@pytest.mark.parametrize(("final_span", "packed_wins"), [((0.85, 1.05), True), ((0.5, 0.7), False)])
def test_the_final_keeps_the_rungs_leader_unless_the_workload_timing_shows_it_slower(tmp_path, final_span, packed_wins):
    """A final that reads the rungs' leader below the baseline on noise (intervals overlapping: the baseline's is
    [80, 120]) keeps it and says why; one that shows it slower (its interval below the baseline's) does not."""
    clock = FakeClock()
    space = [Candidate("eager", (), "packed", 0, "sdpa")]
    measure = NoisyFinal(clock, final_span)
    result = Tuner(WORKLOAD, space, budget_s=10_000, measure=measure, clock=clock, store=RunStore(tmp_path / "t"),
                   progress=False, machine=MACHINE, reuse_baseline=False).run()  # fmt: skip
    final = next(d for d in result.decisions if d.stage == "final")
    if packed_wins:
        assert result.winner_label == "tuned: " + label("eager", "packed", "sdpa") and final.decision == "winner"
        assert final.reason.startswith("the rungs' fastest, and at the workload's timing not shown slower than")
        assert "[85, 105] real tok/s reaches [80, 120]" in final.reason
    else:
        assert result.winner.record_id == result.baseline.record_id and final.decision == "dropped"
        assert final.reason.startswith("slower than")
