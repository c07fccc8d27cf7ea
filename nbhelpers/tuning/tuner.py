"""The tuner: successive halving over the search space within a wall-clock budget, every decision journaled.

1. The baseline (eager, static padding, default attention) at the workload's own timing, first, always
   (or an equal record of this machine already in the run's store): the reference for speedups and parity.
2. Rung 0 measures every candidate for a few steps, each in its own subprocess; a rung drops a failed record,
   a loss not finite, a parity failure, and what its interval shows slower than the leader; later rungs give
   the survivors eta times more steps. 3. The last survivors are measured at the workload's own timing (kind
   "step"), against the baseline (:mod:`.final_choice`); the winner's RunConfig goes to ``tuned.json``.

No measurement starts when its estimated time (plus what the final measurement needs) would pass the
budget: the candidates left are journaled as "not tried: budget". Rung records are stored with kind
"tuner" (a few steps are another workload); every record carries ``config.extra["tuner"]``.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbhelpers.tuning.budget as budget
import nbhelpers.tuning.halving as halving
import nbhelpers.tuning.journal as journal
from nbhelpers.analysis.parity import check_parity
from nbhelpers.analysis.records import is_measured, rate_interval_of, tokens_per_s, workload_fields
from nbhelpers.analysis.tuner_choice import TUNED_FILE
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.jsonl import append_line
from nbhelpers.measure.progress import plain_bars, progress_bar
from nbhelpers.measure.store import RunRecord, RunStore, run_dir, runs_root
from nbhelpers.planning.candidates import Candidate, baseline_candidate

from .final_choice import final_choice
from .journal import BASELINE, DROPPED, KEPT, NOT_RUNNABLE, NOT_TRIED, WINNER, Decision, TuneResult, parity_of, ratio
from .measuring import Measure, default_measure
from .problems import problem_of
from .reuse import stored_measurement

MAX_RUNGS = 6  # rungs of growing steps; candidates whose intervals keep overlapping go to the final after the last
MEASURED = "measured"  # a stored record's tuner note: the decision itself is journaled
TUNER_KIND = "tuner"  # kind of the rung records: kept in the store, outside the step tables
JOURNAL_NAME = "tuner.jsonl"
TUNED_NAME = TUNED_FILE  # the winner of a run folder's tuner (the report's loader reads it)


@dataclass
class Measured:
    """A candidate's measurement at one stage."""

    candidate: Candidate
    record: RunRecord
    wall_s: float
    stage: str
    rung: int | None
    problem: str = ""  # why it cannot go on ('' when it can)
    reused: bool = False  # a record already in the store, not measured again (and not stored again)

    @property
    def rate(self) -> float:
        value = tokens_per_s(self.record) if self.record.ok else None
        return value if value is not None else 0.0


def this_machine(device: str) -> str:
    """The machine identity a record measured here would carry."""
    from nbhelpers.measure.env import safe_environment

    return RunRecord(config={}, environment=safe_environment(device)).machine


def stored_baseline(store: RunStore, workload: RunConfig, machine: str) -> RunRecord | None:
    """The latest ok step record of the baseline settings with the workload's fields, from this machine."""
    base = baseline_candidate(workload)
    wanted = workload.to_dict()
    for record in reversed(store.load()):
        cfg = record.config
        if (
            is_measured(record)
            and record.machine == machine
            and (cfg.get("kernels"), cfg.get("padding"), cfg.get("attn_implementation"))
            == (base.kernels, base.padding, base.attn_implementation)
            and workload_fields(cfg) == workload_fields(wanted)
            and not problem_of(record)
        ):
            return record
    return None


class Tuner:
    """Successive halving of ``candidates`` on ``workload`` within ``budget_s`` (see the module docstring)."""

    def __init__(
        self,
        workload: RunConfig,
        candidates: Sequence[Candidate],
        *,
        budget_s: float,
        not_runnable: Sequence[tuple[Candidate, str]] = (),
        eta: int = 3,
        first_steps: int = 2,
        first_warmup: int = 1,
        final_count: int = 1,
        measure: Measure | None = None,
        clock: Callable[[], float] = time.monotonic,
        store: RunStore | None = None,
        notebook: str = "",
        progress: bool = True,
        reuse_baseline: bool = True,
        reuse_records: bool = True,
        machine: str | None = None,
    ) -> None:
        halving.check_schedule(eta, first_steps, final_count)
        if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not budget_s > 0:
            from nbhelpers.validation import ConfigError

            raise ConfigError("budget_s", budget_s, "a number of seconds > 0")
        self.workload = workload.replace(profile=False)
        self.baseline_candidate = baseline_candidate(workload)
        # The candidates that change the most settings first (tried first if time runs short); the baseline's
        # settings last: measured at the workload's timing already, a rung measures them only to compare.
        ordered = sorted(dict.fromkeys(candidates), key=lambda c: (c.is_baseline, -c.changes()))
        self.candidates = ordered
        self.not_runnable = list(not_runnable)
        self.budget_s, self.eta, self.final_count = float(budget_s), eta, final_count
        self.first_steps, self.first_warmup = first_steps, first_warmup
        self.measure = measure or default_measure(notebook, progress)
        self.clock = clock
        self.store = store if store is not None else RunStore.for_run(workload.run_name)
        self.reuse_baseline, self.reuse_records, self.machine = reuse_baseline, reuse_records, machine
        self.progress = progress
        self.session = uuid.uuid4().hex[:8]
        self.folder = run_dir(workload.run_name) if store is None else self.store.path.parent
        self.journal_path = self.folder / JOURNAL_NAME
        self.decisions: list[Decision] = []
        self.records: list[RunRecord] = []
        self.walls: list[float] = []
        self.baseline: RunRecord | None = None
        self.baseline_wall_s: float | None = None
        self._start = 0.0
        self._bar: Any = None

    # -- bookkeeping -------------------------------------------------------------------------------

    def elapsed(self) -> float:
        return self.clock() - self._start

    def within_budget(self, config: RunConfig, reserve_s: float = 0.0) -> RunConfig:
        """The config with its subprocess timeout cut to the seconds left (less ``reserve_s``)."""
        left = math.floor(self.budget_s - self.elapsed() - reserve_s)
        return config.replace(timeout_s=max(1, min(config.timeout_s, left)))

    def affordable(self, estimate_s: float, reserve_s: float = 0.0) -> bool:
        return self.elapsed() + estimate_s + reserve_s <= self.budget_s

    def decide(self, decision: Decision) -> None:
        self.decisions.append(decision)
        append_line(self.journal_path, {"session": self.session, **vars(decision)})

    def keep(self, record: RunRecord, stage: str, rung: int | None) -> None:
        """Append a record to the store the moment it is measured (a tuner killed mid-rung loses nothing), with
        the tuner's note in ``config.extra``; the decision taken on it goes to the journal when its stage ends."""
        extra = record.config.setdefault("extra", {})
        extra["tuner"] = {"session": self.session, "stage": stage, "rung": rung, "decision": MEASURED,
                          "reason": f"measured; the decision is in {JOURNAL_NAME}"}  # fmt: skip
        self.store.append(record)
        self.records.append(record)

    def run_one(self, candidate: Candidate, config: RunConfig, stage: str, rung: int | None) -> Measured:
        if self._bar is not None:
            self._bar.set_postfix_str(f"{stage}: {candidate.label}")
        config = config.replace(extra=dict(config.extra) | {"tuner": {"session": self.session, "stage": stage}})
        started = self.clock()
        record = self.measure(config)
        wall = self.clock() - started
        self.walls.append(wall)
        if self._bar is not None:
            self._bar.update(1)
        if rung is not None:
            record.kind = TUNER_KIND
        reference = self.baseline
        if reference is not None and record.ok and record.record_id != reference.record_id:
            record.metrics["parity"] = check_parity(record, reference)
        elif stage == "baseline" and record.ok and not problem_of(record):
            record.metrics["parity"] = check_parity(record, record)
        self.keep(record, stage, rung)
        return Measured(candidate, record, wall, stage, rung, problem_of(record))

    def reused(
        self, stored: Sequence[RunRecord], candidate: Candidate, config: RunConfig, stage: str, rung: int | None
    ) -> Measured | None:
        """The store's record that stands in for measuring ``config`` (:mod:`nbhelpers.tuning.reuse`), with its
        parity against the baseline where it has none; None when there is none or reuse is off."""
        if not self.reuse_records:
            return None
        machine = self.machine or this_machine(self.workload.device)
        final = rung is None
        steps = config.steps if config.timing == "steps" else 1
        record = stored_measurement(stored, config, machine, steps, same_timing=final)
        if record is None:
            return None
        is_baseline = self.baseline is not None and record.record_id == self.baseline.record_id
        if self.baseline is not None and not is_baseline and not isinstance(record.metrics.get("parity"), dict):
            record.metrics["parity"] = check_parity(record, self.baseline)
        times = budget.step_times(record)
        wall = (times[0] + times[1]) if times else budget.typical_s(self.walls)
        return Measured(candidate, record, wall, stage, rung, problem_of(record), reused=True)

    def _grow_bar(self, count: int) -> None:
        if self._bar is not None:
            self._bar.total += count
            self._bar.refresh()

    # -- stages ------------------------------------------------------------------------------------

    def measure_baseline(self) -> None:
        """The baseline at the workload's timing: from the store when this machine has one, else measured."""
        base = self.baseline_candidate
        stored = None
        if self.reuse_baseline:
            machine = self.machine or this_machine(self.workload.device)
            stored = stored_baseline(self.store, self.workload, machine)
        if stored is not None:
            self.baseline = stored
            self._grow_bar(-1)
            self.decide(Decision.of(base, "baseline", BASELINE, f"reused from the store (record {stored.record_id})",
                                    timing=self.workload.timing, steps=self.workload_steps,
                                    real_tokens_per_s=tokens_per_s(stored), speedup=1.0, parity=BASELINE,
                                    record_id=stored.record_id))  # fmt: skip
            return
        measured = self.run_one(base, base.config(self.workload, label=self.workload_label(base)), "baseline", None)
        record = measured.record
        self.baseline_wall_s = measured.wall_s
        ok = record.ok and not measured.problem
        if ok:
            self.baseline = record
        reason = "reference for speedups and parity" if ok else measured.problem
        self.decide(Decision.of(base, "baseline", BASELINE if ok else DROPPED, reason, timing=self.workload.timing,
                                steps=self.workload_steps, real_tokens_per_s=tokens_per_s(record) if ok else None,
                                speedup=1.0 if ok else None, parity=BASELINE if ok else "", wall_s=measured.wall_s,
                                record_id=record.record_id))  # fmt: skip

    @property
    def workload_steps(self) -> int | None:
        """Timed steps of the workload's own timing (None for an epoch: its length is the plan's)."""
        return self.workload.steps if self.workload.timing == "steps" else None

    def workload_label(self, candidate: Candidate) -> str:
        return ("baseline: " if candidate.is_baseline else "tuned: ") + candidate.label

    def run_rung(self, rung: int, entrants: list[Candidate], history: dict[Candidate, Measured]) -> list[Candidate]:
        """Measure ``entrants`` at this rung's steps; return the kept ones, fastest first."""
        steps = halving.rung_steps(rung, self.first_steps, self.eta)
        stage = f"rung {rung}"
        results: list[Measured] = []
        untried: list[Candidate] = []
        in_store = self.store.load() if self.reuse_records else []  # once a rung: what it may reuse
        for candidate in entrants:
            config = candidate.config(self.workload, steps=steps, warmup=self.first_warmup, timing="steps")
            if (stored := self.reused(in_store, candidate, config, stage, rung)) is not None:
                results.append(stored)
                history[candidate] = stored
                self._grow_bar(-1)
                continue
            before = history.get(candidate)
            if before is not None:
                estimate = budget.steps_estimate(before.record, before.wall_s, self.first_warmup + steps)
            else:
                estimate = budget.typical_s(self.walls)
            reserve = self.final_reserve(history)
            if not self.affordable(estimate, reserve):
                untried.append(candidate)
                continue
            config = self.within_budget(config, reserve)  # a measurement that overruns is stopped there
            results.append(self.run_one(candidate, config, stage, rung))
            history[candidate] = results[-1]
        reference = next((m for m in results if m.candidate.is_baseline and not m.problem), None)
        alive = [m for m in results if not m.problem]
        spans = {m.candidate: rate_interval_of(m.record) for m in alive}
        verdict = halving.cut([(m.candidate, m.rate) for m in alive], self.eta, self.final_count, spans)
        kept = set(verdict.kept)
        leader = verdict.kept[0] if verdict.kept else None
        for m in results:
            if m.problem:
                decision, reason = DROPPED, m.problem
            elif m.candidate == leader:
                decision, reason = KEPT, f"the fastest of {len(alive)}" + _interval_text(spans.get(m.candidate))
            elif m.candidate in kept:
                decision = KEPT
                reason = "not shown slower than the fastest: its interval reaches the leader's" + _interval_text(
                    spans.get(m.candidate)
                )
            else:
                decision = DROPPED
                reason = (
                    f"slower than the fastest: its interval{_interval_text(spans.get(m.candidate))} lies below the "
                    f"leader's lower end, {verdict.threshold:,.0f} real tok/s"
                )
            if m.reused:
                reason += f" (reused from the store, record {m.record.record_id})"
            gain = ratio(m.record, reference.record) if reference is not None else None
            self.decide(Decision.of(m.candidate, stage, decision, reason, rung=rung, steps=steps, timing="steps",
                                    real_tokens_per_s=tokens_per_s(m.record) if m.record.ok else None,
                                    speedup=gain, parity=parity_of(m.record) if m.record.ok else "",
                                    wall_s=m.wall_s, record_id=m.record.record_id))  # fmt: skip
        for candidate in untried:
            self.decide(Decision.of(candidate, stage, NOT_TRIED, "not tried: budget", rung=rung, steps=steps,
                                    timing="steps"))  # fmt: skip
        return list(verdict.kept)

    def final_estimate(self, measured: Measured) -> float:
        epoch_tokens = budget.epoch_real_tokens(self.baseline) if self.baseline is not None else None
        if self.workload.timing == "epoch":
            return budget.epoch_estimate(measured.record, measured.wall_s, epoch_tokens, self.workload.timing_cap_s)
        return budget.steps_estimate(measured.record, measured.wall_s, self.workload.warmup + self.workload.steps)

    def final_reserve(self, history: dict[Candidate, Measured]) -> float:
        """Seconds kept back for the final measurement of the fastest candidate measured so far."""
        alive = [m for m in history.values() if not m.problem and not m.candidate.is_baseline]
        if not alive:  # nothing to scale yet: what the baseline's own measurement took
            return self.baseline_wall_s if self.baseline_wall_s is not None else budget.typical_s(self.walls)
        return self.final_estimate(max(alive, key=lambda m: m.rate))

    def run_final(self, finalists: list[Candidate], history: dict[Candidate, Measured]) -> RunRecord | None:
        """The finalists at the workload's own timing; the fastest ok one (or the baseline) wins."""
        measured: list[Measured] = []
        in_store = self.store.load() if self.reuse_records else []
        for candidate in finalists:
            if candidate.is_baseline and self.baseline is not None:
                continue  # already measured at the workload's timing
            config = candidate.config(self.workload, label=self.workload_label(candidate))
            if (stored := self.reused(in_store, candidate, config, "final", None)) is not None:
                measured.append(stored)
                continue
            estimate = self.final_estimate(history[candidate])
            if not self.affordable(estimate):
                self.decide(Decision.of(candidate, "final", NOT_TRIED, "not tried: budget", timing=self.workload.timing,
                                        steps=self.workload_steps))  # fmt: skip
                continue
            measured.append(self.run_one(candidate, self.within_budget(config), "final", None))
        contenders = [m.record for m in measured if not m.problem]
        if self.baseline is not None:
            contenders.append(self.baseline)
        lead = next((m.record for m in measured if m.candidate == finalists[0] and not m.problem), None)
        winner, why = final_choice(contenders, lead)
        for m in measured:
            if m.problem:
                decision, reason = DROPPED, m.problem
            elif m.record is winner:
                decision, reason = WINNER, why or "fastest at the workload's timing"
            else:
                name = winner.label if winner is not None else "the winner"
                decision, reason = DROPPED, f"slower than {name} at the workload's timing"
            if m.reused:
                reason += f" (reused from the store, record {m.record.record_id})"
            gain = ratio(m.record, self.baseline) if self.baseline is not None else None
            rate = tokens_per_s(m.record) if m.record.ok else None
            self.decide(Decision.of(m.candidate, "final", decision, reason, timing=self.workload.timing,
                                    steps=self.workload_steps, real_tokens_per_s=rate,
                                    speedup=gain, parity=parity_of(m.record) if m.record.ok else "", wall_s=m.wall_s,
                                    record_id=m.record.record_id))  # fmt: skip
        return winner

    # -- driver ------------------------------------------------------------------------------------

    def run(self) -> TuneResult:
        """Baseline, rungs, final; the journal in ``runs/<RUN_NAME>/tuner.jsonl``, the winner in tuned.json."""
        self._start = self.clock()
        for candidate, reason in self.not_runnable:
            self.decide(Decision.of(candidate, "space", NOT_RUNNABLE, reason))
        if self.progress:
            self._bar = progress_bar(total=1 + len(self.candidates), desc="tuner", unit="measurement",
                                     disable=plain_bars())  # plain text (a batch run): each measurement's bar is enough
        try:
            self.measure_baseline()
            history: dict[Candidate, Measured] = {}
            entrants, rung = list(self.candidates), 0
            if self.baseline is None:  # it failed at the workload's timing: at fewer steps it would fail again
                entrants = [c for c in entrants if not c.is_baseline]
                self._grow_bar(len(entrants) - len(self.candidates))
            while entrants:
                kept = self.run_rung(rung, entrants, history)
                tried = {d.candidate for d in self.decisions if d.stage == f"rung {rung}" and d.decision != NOT_TRIED}
                out_of_time = len(tried) < len(entrants)
                if halving.is_last_rung(len(kept), self.final_count) or out_of_time or rung + 1 >= MAX_RUNGS:
                    break
                entrants, rung = kept, rung + 1
                self._grow_bar(len(entrants))
            finalists = self.rank_finalists(history)
            self._grow_bar(len(finalists))
            winner = self.run_final(finalists, history)
        finally:
            if self._bar is not None:
                self._bar.close()
        return self.result(winner)

    def rank_finalists(self, history: dict[Candidate, Measured]) -> list[Candidate]:
        """The best ``final_count`` survivors: furthest rung first, then real tok/s."""
        alive = [m for m in history.values() if not m.problem]
        dropped = {(d.candidate, d.stage) for d in self.decisions if d.decision == DROPPED}
        alive = [m for m in alive if (m.candidate.label, m.stage) not in dropped] or alive
        ranked = sorted(alive, key=lambda m: (-(m.rung or 0), -m.rate))
        return [m.candidate for m in ranked[: self.final_count]]

    def speedup_of(self, record: RunRecord) -> float | None:
        return None if self.baseline is None else 1.0 if record is self.baseline else ratio(record, self.baseline)

    def result(self, winner: RunRecord | None) -> TuneResult:
        tuned_path = None
        label = winner.label if winner is not None else ""
        searched = journal.rung_measurements(self.decisions) > 0
        if winner is not None and searched:  # the untouched baseline, nothing measured beside it, is no tuned result
            tuned_path = self.folder / TUNED_NAME
            config = {k: v for k, v in winner.config.items() if k in RunConfig.__dataclass_fields__ and k != "extra"}
            payload = {
                "run_name": self.workload.run_name, "session": self.session, "label": label,
                "record_id": winner.record_id, "machine": winner.machine,
                "real_tokens_per_s": tokens_per_s(winner), "parity": parity_of(winner),
                "baseline_record_id": self.baseline.record_id if self.baseline else "",
                "speedup": self.speedup_of(winner),
                "budget_s": self.budget_s, "elapsed_s": round(self.elapsed(), 3),
                "journal": str(self.journal_path), "config": config,
            }  # fmt: skip
            tmp = tuned_path.with_name(TUNED_NAME + ".tmp")
            tmp.write_text(json.dumps(payload, indent=2, default=str))
            tmp.replace(tuned_path)
        return TuneResult(
            workload=self.workload, decisions=list(self.decisions), baseline=self.baseline, winner=winner,
            winner_label=label, budget_s=self.budget_s, elapsed_s=self.elapsed(), tuned_path=tuned_path,
            journal_path=self.journal_path, records=list(self.records),
        )  # fmt: skip


def load_tuned(run_name: str, root: str | Path | None = None) -> RunConfig:
    """The winner's RunConfig from ``runs/<run_name>/tuned.json``."""
    path = run_dir(run_name, root) / TUNED_NAME
    if not path.exists():
        raise FileNotFoundError(f"no {TUNED_NAME} in {path.parent}: run the tuner first")
    return RunConfig.from_dict(json.loads(path.read_text())["config"])


def tune(
    workload: RunConfig,
    kernels: str | Sequence[str] = "eager",
    strategies: str | Sequence[str] = "static",
    attentions: str | Sequence[str] = "sdpa",
    *,
    budget_s: float,
    liger_kernels: str | Sequence[Sequence[str]] | None = None,
    unfused_twin: bool = True,
    token_budgets: str | int | Sequence[int] = (0,),
    device: str | None = None,
    broken: Mapping[str, str] | None = None,
    **options: Any,
) -> TuneResult:
    """Search kernels x strategies x attentions on ``workload`` within ``budget_s`` seconds.

    Lists are comma-separated strings or sequences; ``liger_kernels`` holds switch sets ("a,b;c,d"),
    by default the workload's, each with its plain cross-entropy twin (``unfused_twin``). ``options`` go to
    :class:`Tuner` (eta, first_steps, final_count, measure, clock, store, notebook, progress, ...).
    ``budget_s=0`` checks the arguments and measures nothing (a notebook's way to skip the tuner). ``broken``: the
    paths a kernel-doctor verdict marks broken (``kernels.doctor.broken_paths``), left out with the reason.
    """
    from nbhelpers.data.strategies import PADDING_STRATEGIES
    from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
    from nbhelpers.kernels.registry import KERNEL_BACKENDS
    from nbhelpers.planning.candidates import build_space, parse_budgets, parse_switch_sets, with_unfused_twin
    from nbhelpers.planning.device import TUNER_CPU_KERNELS, auto_kernels
    from nbhelpers.planning.lists import parse_list

    sets = parse_switch_sets(liger_kernels) if liger_kernels else [workload.liger_kernels]
    if unfused_twin:
        sets = list(dict.fromkeys(twin for s in sets for twin in with_unfused_twin(s)))
    if device is None:
        from nbhelpers.measure.env import resolve_device

        device = resolve_device(workload.device)
    kernels = auto_kernels(kernels, device, cpu=TUNER_CPU_KERNELS)[0] if isinstance(kernels, str) else kernels
    names = (
        parse_list(kernels, KERNEL_BACKENDS, "kernels"),
        parse_list(strategies, PADDING_STRATEGIES, "strategies"),
        parse_list(attentions, ATTENTION_IMPLEMENTATIONS, "attention"),
    )
    budgets = parse_budgets(token_budgets)
    candidates, dropped = build_space(
        workload, *names, liger_sets=sets, token_budgets=budgets, device=device, broken=broken
    )
    if budget_s == 0 and not isinstance(budget_s, bool):
        journal = runs_root() / workload.run_name / JOURNAL_NAME  # nothing is written
        return TuneResult(workload=workload, decisions=[], baseline=None, winner=None, winner_label="",
                          budget_s=0.0, elapsed_s=0.0, tuned_path=None, journal_path=journal)  # fmt: skip
    return Tuner(workload, candidates, budget_s=budget_s, not_runnable=dropped, **options).run()


def _interval_text(span: tuple[float, float] | None) -> str:
    return f" [{span[0]:,.0f}, {span[1]:,.0f}] real tok/s" if span is not None else ""
