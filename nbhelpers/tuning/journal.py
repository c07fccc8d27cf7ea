"""The tuner's journal: one Decision per candidate and stage, and the result that shows them.

A decision says what was done with a candidate (kept, dropped, winner, not runnable, not tried) and why;
:class:`TuneResult` turns them into a pandas DataFrame, a plot and a one-paragraph summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.analysis.records import speedup, tokens_per_s
from nbhelpers.formatting import table_or_note
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord
from nbhelpers.planning.candidates import Candidate

KEPT, DROPPED, WINNER, BASELINE = "kept", "dropped", "winner", "baseline"
NOT_RUNNABLE, NOT_TRIED = "not runnable", "not tried"


@dataclass
class Decision:
    """One row of the journal: what the tuner did with one candidate at one stage, and why."""

    candidate: str
    stage: str  # "space", "baseline", "rung 0", "rung 1", ..., "final"
    decision: str  # kept, dropped, winner, baseline, not runnable, not tried
    reason: str = ""
    rung: int | None = None
    steps: int | None = None
    timing: str = ""
    real_tokens_per_s: float | None = None
    speedup: float | None = None  # over the baseline measured the same way (same rung, or the workload)
    parity: str = ""
    wall_s: float | None = None
    record_id: str = ""
    kernels: str = ""
    liger_kernels: str = ""
    padding: str = ""
    token_budget: int | None = None
    attn_implementation: str = ""

    @classmethod
    def of(cls, candidate: Candidate, stage: str, decision: str, reason: str = "", **values: Any) -> Decision:
        return cls(
            candidate=candidate.label, stage=stage, decision=decision, reason=reason, kernels=candidate.kernels,
            liger_kernels=",".join(candidate.liger_kernels), padding=candidate.padding,
            token_budget=candidate.token_budget, attn_implementation=candidate.attn_implementation, **values,
        )  # fmt: skip


def rung_measurements(decisions: Sequence[Decision]) -> int:
    """How many of the journal's decisions are measurements in a rung (neither not tried nor not runnable)."""
    return sum(1 for d in decisions if d.stage.startswith("rung") and d.decision not in (NOT_TRIED, NOT_RUNNABLE))


@dataclass
class TuneResult:
    """What the tuner tried, why it dropped each branch, and the winner (a record of the workload)."""

    workload: RunConfig
    decisions: list[Decision]
    baseline: RunRecord | None
    winner: RunRecord | None
    winner_label: str
    budget_s: float
    elapsed_s: float
    tuned_path: Path | None
    journal_path: Path
    records: list[RunRecord] = field(default_factory=list)

    @property
    def journal(self) -> Any:
        """Every decision as a pandas DataFrame, in the order it was taken."""
        import pandas as pd

        return pd.DataFrame([vars(d) for d in self.decisions])

    def journal_view(self) -> Any:
        """The journal, or a sentence when the search took no decision (no budget, nothing to try)."""
        return table_or_note(self.journal, f"No decision to show: {self.summary()}")

    @property
    def speedup(self) -> float | None:
        if self.winner is None or self.baseline is None:
            return None
        if self.winner.record_id == self.baseline.record_id:
            return 1.0
        return ratio(self.winner, self.baseline)

    @property
    def measured_candidates(self) -> int:
        """Measurements the search made in its rungs (the baseline's aside)."""
        return rung_measurements(self.decisions)

    def why_nothing_measured(self) -> str:
        """Why the search measured no candidate: the baseline failed, nothing can run here, or the budget ran out."""
        baseline = self.baseline
        if baseline is not None and not baseline.ok:
            return f"the baseline failed ({baseline.reason}), so no candidate was measured against it"
        failed = [d for d in self.decisions if d.stage == "baseline" and d.decision not in ("baseline", "kept")]
        if baseline is None and failed:
            why = failed[0].reason or failed[0].decision
            return f"the baseline could not be measured ({why}), so no candidate was measured against it"
        candidates = [d for d in self.decisions if d.stage == "space" or d.stage.startswith("rung")]
        if candidates and all(d.decision == NOT_RUNNABLE for d in candidates):
            reasons = sorted({d.reason for d in candidates if d.reason})
            return "no candidate can run here: " + "; ".join(reasons[:3])
        return f"the {self.budget_s:g} s budget ran out before any candidate was measured: raise --budget-s"

    def why_no_winner(self) -> str:
        """Why the search has no winner: what :meth:`why_nothing_measured` says when nothing was measured, else
        why the baseline failed or was dropped, else that every measured candidate failed or was dropped."""
        if self.measured_candidates == 0:
            return self.why_nothing_measured()
        if self.baseline is not None and not self.baseline.ok:
            return f"the baseline failed ({self.baseline.reason})"
        dropped = [d for d in self.decisions if d.stage == "baseline" and d.decision == DROPPED]
        if self.baseline is None and dropped:
            return f"the baseline was dropped ({dropped[0].reason or DROPPED})"
        return "no candidate was measured successfully at the workload's timing (the table says why)"

    def summary(self) -> str:
        if self.budget_s == 0:
            return "Not run: the budget is 0 s (set a budget in seconds to search)."
        tried = sum(1 for d in self.decisions if d.stage.startswith("rung") and d.decision != NOT_TRIED)
        untried = sum(1 for d in self.decisions if d.decision == NOT_TRIED)
        excluded = sum(1 for d in self.decisions if d.decision == NOT_RUNNABLE)
        text = f"{tried} measurement(s) in rungs, {excluded} combination(s) not runnable here, {untried} not tried"
        text += f"; {self.elapsed_s:,.0f} s of a {self.budget_s:,.0f} s budget. "
        if self.winner is None:
            return text + "No winner: nothing was measured successfully at the workload's timing."
        rate = tokens_per_s(self.winner)
        ratio = self.speedup
        return text + (
            f"Winner: {self.winner_label}, {rate:,.0f} real tok/s"
            + (f", {ratio:.2f}x the baseline" if ratio is not None else "")
            + f", parity {parity_of(self.winner)} (record {self.winner.record_id}"
            + (f", {self.tuned_path}" if self.tuned_path else "")
            + ")."
        )

    def _repr_markdown_(self) -> str:
        return f"**Tuner:** {self.summary()}"


def parity_of(record: RunRecord) -> str:
    parity = record.metrics.get("parity")
    return str(parity.get("status", "not checked")) if isinstance(parity, dict) else "not checked"


def ratio(record: RunRecord, base: RunRecord) -> float | None:
    """Real tok/s over the baseline's, when both were measured the same way (else None)."""
    if record.kind == "step" and base.kind == "step":
        try:
            return speedup(record, base)
        except ValueError:
            return None
    rate, base_rate = tokens_per_s(record), tokens_per_s(base)
    if not record.ok or not base.ok or rate is None or not base_rate:
        return None
    return rate / base_rate
