"""The tuner: search space from the tables, successive halving, budget, journal, store and tuned.json."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nbhelpers.analysis.overview import load_report_records
from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.records import choose_baselines, group_key
from nbhelpers.analysis.speedup import waterfall_steps
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.planning.candidates import Candidate, parse_budgets, parse_switch_sets, with_unfused_twin
from nbhelpers.planning.lists import parse_list
from nbhelpers.tuning import Tuner, build_space, load_tuned, tune
from nbhelpers.tuning.halving import cut, keep_count, rung_steps
from nbhelpers.tuning.tuner import TUNER_KIND
from nbhelpers.validation import ConfigError
from nbhelpers.views.tuner_plots import journal_plot

WORKLOAD = RunConfig(run_name="tune", model="qwen3-tiny", batch_size=2, max_length=64, num_samples=8, timing="epoch")
ENV = {"device_name": "fake CPU", "hostname": "fake-host", "device_type": "cpu"}
OVERHEAD_S, TOKENS_PER_STEP, EPOCH_STEPS = 10.0, 100.0, 4


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeMeasure:
    """Records with the real tok/s of a table; advances the clock as a measurement of that speed would."""

    def __init__(self, clock: FakeClock, rates: dict[tuple[str, str, str], float], fail=(), off_parity=()) -> None:
        self.clock, self.rates, self.fail, self.off_parity = clock, rates, set(fail), set(off_parity)
        self.calls: list[RunConfig] = []

    def __call__(self, config: RunConfig) -> RunRecord:
        self.calls.append(config)
        key = (config.kernels, config.padding, config.attn_implementation)
        cfg = config.to_dict() | {"label": config.name}
        if key in self.fail:
            self.clock.now += OVERHEAD_S
            return RunRecord.failed(cfg, "out of memory: CUDA out of memory", environment=dict(ENV))
        rate = self.rates[key]
        step_s = TOKENS_PER_STEP / rate
        if config.timing == "epoch":
            untimed, timed = EPOCH_STEPS - 1, EPOCH_STEPS
        else:
            untimed, timed = config.warmup, config.steps
        wall = OVERHEAD_S + (1 + untimed + timed) * step_s
        if wall > config.timeout_s:  # as the runner does: the subprocess is stopped at its timeout
            self.clock.now += config.timeout_s
            return RunRecord.failed(cfg, f"timed out after {config.timeout_s} s", environment=dict(ENV))
        self.clock.now += wall
        loss = 12.0 * (1.1 if key in self.off_parity else 1.0)
        metrics = {
            "real_tokens_per_s": rate, "step_time_median_s": step_s, "first_step_s": step_s,
            "step_times_s": [step_s] * timed, "untimed_step_times_s": [step_s] * untimed,
            "real_tokens_per_step": TOKENS_PER_STEP, "timed_batches": timed, "loss_first": loss,
            "grad_norm_first": 3.0, "losses": [loss] * (timed + 1), "peak_memory_gib": 1.0,
            # the parity probe a real worker attaches: the same samples' summed losses under every strategy
            "parity_probe": {"total_loss": loss * 4, "grad_norm": 3.0, "samples": [0, 1, 2, 3],
                             "sequence_loss_sums": [loss] * 4, "sequence_loss_tokens": [10] * 4},
        }  # fmt: skip
        return RunRecord(config=cfg, kind="step", metrics=metrics, environment=dict(ENV))


RATES = {
    ("eager", "static", "sdpa"): 100.0,  # the baseline
    ("eager", "static", "eager"): 90.0,
    ("eager", "packed", "sdpa"): 300.0,
    ("eager", "packed", "eager"): 280.0,
    ("compile", "static", "sdpa"): 150.0,
    ("compile", "static", "eager"): 20.0,  # made slow
    ("compile", "packed", "sdpa"): 500.0,  # the known best
    ("compile", "packed", "eager"): 900.0,  # fastest, but fails parity
}
FAILS = {("eager", "static", "eager")}
OFF_PARITY = {("compile", "packed", "eager")}


def run_fake(tmp_path: Path, budget_s: float, **options):
    clock = FakeClock()
    measure = FakeMeasure(clock, RATES, fail=FAILS, off_parity=OFF_PARITY)
    store = RunStore(tmp_path / "tune")
    candidates, dropped = build_space(
        WORKLOAD, ["eager", "compile"], ["static", "packed"], ["sdpa", "eager", "flash_attention_2"], device="cpu"
    )
    tuner = Tuner(WORKLOAD, candidates, not_runnable=dropped, budget_s=budget_s, measure=measure, clock=clock,
                  store=store, progress=False, reuse_baseline=False, **options)  # fmt: skip
    return tuner.run(), measure, store, clock


def rows(result, candidate: str) -> list[dict]:
    return [vars(d) for d in result.decisions if d.candidate == candidate]


def label(kernels: str, padding: str, attention: str) -> str:
    return Candidate(kernels, (), padding, 0, attention).label


# -- the search space -----------------------------------------------------------------------------------


def test_space_comes_from_the_tables_and_says_why_a_combination_cannot_run():
    candidates, dropped = build_space(
        WORKLOAD, ["eager", "liger"], ["static", "token_budget"], ["sdpa", "torch_varlen"],
        token_budgets=[0, 32, 256], device="cpu",
    )  # fmt: skip
    reasons = {c.label: why for c, why in dropped}
    assert all(c.attn_implementation == "sdpa" for c in candidates)
    assert any("torch_varlen" in label and "CUDA" in why for label, why in reasons.items())
    too_small = [why for c, why in dropped if c.token_budget == 32 and c.attn_implementation == "sdpa"]
    assert too_small and all("token_budget" in why and "max_length" in why for why in too_small)
    # Liger's default switches use plain cross-entropy: one set, without the fused linear cross-entropy.
    liger_sets = {c.liger_kernels for c in candidates if c.kernels == "liger"}
    assert liger_sets == {WORKLOAD.liger_kernels} and "fused_linear_cross_entropy" not in WORKLOAD.liger_kernels
    # A workload whose switches include the fused linear cross-entropy also runs its plain cross-entropy twin.
    fused = WORKLOAD.replace(liger_kernels=("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"))
    twins = {c.liger_kernels for c in build_space(fused, ["liger"], ["static"], ["sdpa"], device="cpu")[0]}
    assert len(twins) == 2
    assert any("cross_entropy" in s and "fused_linear_cross_entropy" not in s for s in twins)
    assert all(c.liger_kernels == () for c in candidates if c.kernels == "eager")
    budgets = {c.token_budget for c in candidates if c.padding == "token_budget"}
    assert budgets == {0, 256}
    config = next(c for c in candidates if c.padding == "token_budget" and c.token_budget == 256).config(WORKLOAD)
    assert (config.padding, config.token_budget, config.profile) == ("token_budget", 256, False)


def test_bad_values_name_the_parameter_and_what_is_allowed():
    with pytest.raises(ConfigError, match="kernels.*eager"):
        parse_list("eager,turbo", ("eager", "liger"), "kernels")
    with pytest.raises(ConfigError, match="token_budgets"):
        parse_budgets("16k")
    with pytest.raises(ConfigError, match="liger_kernels"):
        parse_switch_sets("rope,warp")
    assert parse_switch_sets("rope,rms_norm;rope,cross_entropy") == [("rope", "rms_norm"), ("rope", "cross_entropy")]
    assert with_unfused_twin(("rope",)) == [("rope",)]
    with pytest.raises(ConfigError, match="budget_s"):
        Tuner(WORKLOAD, [], budget_s=0, progress=False)
    with pytest.raises(ConfigError, match="eta"):
        Tuner(WORKLOAD, [], budget_s=10, eta=1, progress=False)


def test_halving_keeps_the_fastest_third_per_rung():
    assert [rung_steps(r, 2, 3) for r in range(3)] == [2, 6, 18]
    assert [keep_count(n, 3) for n in (0, 1, 2, 3, 4, 7, 9)] == [0, 1, 1, 1, 2, 3, 3]
    assert keep_count(2, 3, final_count=2) == 2
    verdict = cut([("a", 5.0), ("b", 9.0), ("c", 1.0), ("d", 7.0)], eta=3)
    assert verdict.kept == ("b", "d") and verdict.dropped == ("a", "c") and verdict.threshold == 7.0


# -- the tuner with a fake measurement ------------------------------------------------------------------


def test_tuner_finds_the_known_best_and_says_why_each_other_branch_was_dropped(tmp_path):
    result, measure, store, _ = run_fake(tmp_path, budget_s=10_000)
    best = label("compile", "packed", "sdpa")
    assert result.winner is not None and result.winner_label == f"tuned: {best}"
    assert result.speedup == pytest.approx(5.0)
    # The baseline was measured first, at the workload's own timing.
    assert (measure.calls[0].kernels, measure.calls[0].padding, measure.calls[0].timing) == ("eager", "static", "epoch")
    why = {d.candidate: d.reason for d in result.decisions if d.stage == "rung 0"}
    assert why[label("eager", "static", "eager")].startswith("failed: out of memory")
    assert why[label("compile", "packed", "eager")].startswith("parity fail")
    assert why[label("compile", "static", "eager")].startswith("slower than the fastest")
    flash = [d for d in result.decisions if d.attn_implementation == "flash_attention_2"]
    assert len(flash) == 4 and all(d.decision == "not runnable" and d.reason for d in flash)
    # Every candidate that did not win has a reason; the winner went through every rung it entered.
    for d in result.decisions:
        assert d.decision in ("kept", "winner", "baseline") or d.reason, d
    stages = [d.stage for d in result.decisions if d.candidate == best]
    assert stages[0] == "rung 0" and stages[-1] == "final"
    frame = result.journal
    assert {"candidate", "stage", "steps", "real_tokens_per_s", "speedup", "decision", "reason"} <= set(frame.columns)
    assert len(frame) == len(result.decisions)
    # Rung steps grow by eta; the final is the workload's timing.
    rung_steps_seen = sorted({c.steps for c in measure.calls if c.timing == "steps"})
    assert rung_steps_seen == [2, 6][: len(rung_steps_seen)] and rung_steps_seen[0] == 2
    assert measure.calls[-1].timing == "epoch" and measure.calls[-1].kernels == "compile"


def test_tuner_records_land_in_the_store_and_notebook_04_recommends_the_winner(tmp_path):
    result, _, store, _ = run_fake(tmp_path, budget_s=10_000)
    records = store.load()
    assert len(records) == len(result.records) and all("tuner" in r.config["extra"] for r in records)
    rungs = [r for r in records if r.kind == TUNER_KIND]
    steps = [r for r in records if r.kind == "step"]
    assert rungs and {r.config["extra"]["tuner"]["stage"] for r in rungs} >= {"rung 0"}
    assert {r.config["timing"] for r in steps} == {"epoch"} and len(steps) == 2  # baseline and winner
    assert all(r.config["extra"]["tuner"]["decision"] for r in records)
    # The winner and the baseline are one workload: notebook 04's recommendation and waterfall pick it up.
    assert len({group_key(r) for r in steps}) == 1
    chosen = recommend(records)
    assert chosen.record_id == result.winner.record_id and chosen.speedup == pytest.approx(5.0)
    base = choose_baselines(records)[group_key(result.winner)]
    assert base.record_id == result.baseline.record_id
    waterfall = waterfall_steps(records)
    overall = waterfall[waterfall["stage"] == "kernels + padding"].iloc[0]  # compile + packed
    assert overall["record_id"] == result.winner.record_id
    tuned = json.loads((tmp_path / "tune" / "tuned.json").read_text())
    assert tuned["record_id"] == result.winner.record_id and tuned["speedup"] == pytest.approx(5.0)
    config = load_tuned("tune", root=tmp_path)
    assert (config.kernels, config.padding, config.attn_implementation) == ("compile", "packed", "sdpa")
    journal = [json.loads(line) for line in (tmp_path / "tune" / "tuner.jsonl").read_text().splitlines()]
    assert len(journal) == len(result.decisions)


def test_budget_exhaustion_lists_untried_candidates_and_keeps_to_the_budget(tmp_path):
    result, measure, _, clock = run_fake(tmp_path, budget_s=100)
    assert clock.now - 1000.0 <= 100
    untried = [d for d in result.decisions if d.decision == "not tried"]
    assert untried and all(d.reason == "not tried: budget" for d in untried)
    rung0 = [d for d in result.decisions if d.stage == "rung 0"]
    measured = {d.candidate for d in rung0 if d.decision != "not tried"}
    assert measured and {d.candidate for d in rung0 if d.decision == "not tried"}
    assert len(measured) + len([d for d in rung0 if d.decision == "not tried"]) == len(RATES)
    # The baseline at the workload's timing first; then the candidates that change the most settings.
    assert (measure.calls[0].kernels, measure.calls[0].padding, measure.calls[0].timing) == ("eager", "static", "epoch")
    first = measure.calls[1]
    assert (first.kernels, first.padding, first.attn_implementation) == ("compile", "packed", "eager")
    # Time was kept back for the final: the fastest survivor was measured at the workload's timing.
    final = [d for d in result.decisions if d.stage == "final"]
    assert [d.decision for d in final] == ["winner"]
    assert result.winner_label.startswith("tuned: ") and result.speedup > 1
    # Each measurement's subprocess timeout was cut to what the budget had left.
    assert all(c.timeout_s <= 100 for c in measure.calls[1:])


def test_a_stored_baseline_of_this_machine_is_reused(tmp_path):
    clock = FakeClock()
    measure = FakeMeasure(clock, RATES)
    store = RunStore(tmp_path / "tune")
    stored = measure(Candidate("eager", (), "static", 0, "sdpa").config(WORKLOAD))
    store.append(stored)
    measure.calls.clear()
    candidates = [Candidate("eager", (), "packed", 0, "sdpa")]
    result = Tuner(WORKLOAD, candidates, budget_s=10_000, measure=measure, clock=clock, store=store, progress=False,
                   machine=stored.machine).run()  # fmt: skip
    assert result.baseline.record_id == stored.record_id
    assert "reused" in result.decisions[0].reason
    assert all(c.padding == "packed" for c in measure.calls)
    assert result.winner_label == "tuned: " + candidates[0].label and result.speedup == pytest.approx(3.0)


def test_a_winner_that_fails_at_the_workload_timing_leaves_the_baseline(tmp_path):
    clock = FakeClock()
    rates = {("eager", "static", "sdpa"): 100.0, ("eager", "packed", "sdpa"): 300.0}

    class FailsOnEpoch(FakeMeasure):
        def __call__(self, config):
            if config.padding == "packed" and config.timing == "epoch":
                self.calls.append(config)
                return RunRecord.failed(config.to_dict(), "out of memory: an epoch batch", environment=dict(ENV))
            return super().__call__(config)

    measure = FailsOnEpoch(clock, rates)
    candidates, _ = build_space(WORKLOAD, ["eager"], ["static", "packed"], ["sdpa"], device="cpu")
    result = Tuner(WORKLOAD, candidates, budget_s=10_000, measure=measure, clock=clock,
                   store=RunStore(tmp_path / "t"), progress=False, reuse_baseline=False).run()  # fmt: skip
    final = [d for d in result.decisions if d.stage == "final"]
    assert final and final[0].decision == "dropped" and "an epoch batch" in final[0].reason
    assert result.winner.record_id == result.baseline.record_id and result.speedup == 1.0
    assert math.isfinite(result.elapsed_s) and "Winner" in result.summary()


def test_tune_builds_the_space_from_strings(tmp_path):
    clock = FakeClock()
    measure = FakeMeasure(clock, RATES)
    result = tune(WORKLOAD, "eager", "static,packed", "sdpa,torch_varlen", budget_s=10_000, device="cpu",
                  measure=measure, clock=clock, store=RunStore(tmp_path / "t"), progress=False,
                  reuse_baseline=False)  # fmt: skip
    assert result.winner_label == "tuned: " + label("eager", "packed", "sdpa")
    assert {d.decision for d in result.decisions if d.attn_implementation == "torch_varlen"} == {"not runnable"}
    assert journal_plot(result.journal) is not None
    with pytest.raises(ConfigError, match="strategies"):
        tune(WORKLOAD, "eager", "static,zigzag", "sdpa", budget_s=0, device="cpu", progress=False)
    skipped = tune(WORKLOAD, "eager", "static", "sdpa", budget_s=0, device="cpu", measure=measure, progress=False)
    assert skipped.winner is None and skipped.decisions == [] and "Not run" in skipped.summary()


# -- one real run ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_tuner_on_the_tiny_preset_stores_a_winner_and_tuned_json(runs_root):
    workload = RunConfig(run_name="tiny-tune", model="qwen3-tiny", batch_size=2, max_length=64, num_samples=4,
                         timing="epoch", device="cpu")  # fmt: skip
    result = tune(workload, "eager", "dynamic,packed", "sdpa", budget_s=600, first_steps=1, progress=False)
    print(result.journal[["candidate", "stage", "steps", "real_tokens_per_s", "speedup", "decision", "reason"]])
    records = RunStore.for_run("tiny-tune").load()
    stages = [r.config["extra"]["tuner"]["stage"] for r in records]
    assert stages == ["baseline", "rung 0", "rung 0", "final"]
    final = records[-1]
    assert final.ok and final.kind == "step" and final.config["timing"] == "epoch"
    assert result.baseline is not None and result.winner is not None
    assert result.winner.record_id in {final.record_id, result.baseline.record_id}
    tuned = json.loads((runs_root / "tiny-tune" / "tuned.json").read_text())
    assert tuned["record_id"] == result.winner.record_id
    assert load_tuned("tiny-tune").padding == result.winner.config["padding"]
    # the report's loader marks the record tuned.json names: the recommendation is the tuner's winner
    assert recommend(load_report_records("tiny-tune")).record_id == result.winner.record_id


def test_a_budget_that_measures_only_the_baseline_counts_no_candidate(tmp_path):
    result, measure, _, clock = run_fake(tmp_path, budget_s=1)
    assert result.measured_candidates == 0
    assert all(d.decision in ("not tried", "not runnable") for d in result.decisions if d.stage.startswith("rung"))
    assert result.tuned_path is None  # the untouched baseline is no tuned result: no tuned.json
    enough, *_ = run_fake(tmp_path / "more", budget_s=10_000)
    assert enough.measured_candidates >= len(RATES)
    assert enough.tuned_path is not None and enough.tuned_path.is_file()


def test_tune_command_exits_non_zero_when_its_budget_measured_no_candidate(tmp_path, monkeypatch, capsys):
    import nbhelpers.tuning
    from nbhelpers import cli

    short, *_ = run_fake(tmp_path, budget_s=1)
    monkeypatch.setattr(nbhelpers.tuning, "tune", lambda *a, **k: short)
    assert cli.main(["tune", "--out", str(tmp_path / "runs"), "--budget-s", "3", "--no-progress"]) == 1
    assert "ran out before any candidate was measured" in capsys.readouterr().err


def test_why_nothing_was_measured_names_a_failed_baseline_or_candidates_that_cannot_run(tmp_path):
    from nbhelpers.tuning.journal import Decision, TuneResult

    def result(baseline, decisions):
        return TuneResult(workload=RunConfig(), decisions=decisions, baseline=baseline, winner=None, winner_label="",
                          budget_s=60.0, elapsed_s=12.0, tuned_path=None, journal_path=tmp_path / "j")  # fmt: skip

    failed = RunRecord.failed({"label": "baseline"}, "non-finite loss: first step nan")
    assert result(failed, []).why_nothing_measured().startswith(
        "the baseline failed (non-finite loss: first step nan)"
    )
    fla = Decision("fla / packed / sdpa", "space", "not runnable", "missing package: fla")
    ok = RunRecord(config={"label": "baseline"}, metrics={"real_tokens_per_s": 1.0})
    assert result(ok, [fla]).why_nothing_measured() == "no candidate can run here: missing package: fla"
    untried = Decision("liger / packed / sdpa", "rung 0", "not tried", "budget")
    assert "60 s budget ran out" in result(ok, [fla, untried]).why_nothing_measured()


def test_why_no_winner_names_a_failed_baseline_after_candidates_were_measured(tmp_path):
    from nbhelpers.tuning.journal import Decision, TuneResult

    def result(baseline, decisions):
        return TuneResult(workload=RunConfig(), decisions=decisions, baseline=baseline, winner=None, winner_label="",
                          budget_s=60.0, elapsed_s=12.0, tuned_path=None, journal_path=tmp_path / "j")  # fmt: skip

    measured = Decision("eager / static / sdpa", "rung 0", "dropped", "failed: no loss tokens")
    failed = RunRecord.failed({"label": "baseline"}, "no loss tokens at max_length=32")
    assert result(failed, [measured]).why_no_winner() == "the baseline failed (no loss tokens at max_length=32)"
    ok = RunRecord(config={"label": "baseline"}, metrics={"real_tokens_per_s": 1.0})
    assert "measured successfully" in result(ok, [measured]).why_no_winner()
    assert "budget ran out" in result(ok, []).why_no_winner()
    dropped = Decision("eager / static / sdpa", "baseline", "dropped", "failed: no loss tokens")
    assert result(None, [dropped, measured]).why_no_winner() == "the baseline was dropped (failed: no loss tokens)"


def test_a_baseline_that_failed_is_not_measured_again_in_the_first_rung(tmp_path):
    clock = FakeClock()
    rates = {("eager", "packed", "sdpa"): 300.0}
    measure = FakeMeasure(clock, rates, fail={("eager", "static", "sdpa")})
    candidates, _ = build_space(WORKLOAD, ["eager"], ["static", "packed"], ["sdpa"], device="cpu")
    result = Tuner(WORKLOAD, candidates, budget_s=10_000, measure=measure, clock=clock,
                   store=RunStore(tmp_path / "t"), progress=False, reuse_baseline=False).run()  # fmt: skip
    baseline_runs = [c for c in measure.calls if c.padding == "static"]
    assert len(baseline_runs) == 1 and baseline_runs[0].timing == WORKLOAD.timing  # its own measurement, once
    assert result.baseline is None and "the baseline was dropped" in result.why_no_winner()
    assert any(c.padding == "packed" for c in measure.calls)  # the other candidates are still measured
