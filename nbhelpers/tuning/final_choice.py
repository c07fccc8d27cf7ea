"""The final stage's choice among the finalists and the baseline, measured at the workload's own timing."""

from __future__ import annotations

from nbhelpers.analysis.records import rate_interval_of, rates_overlap, record_label, tokens_per_s
from nbhelpers.measure.store import RunRecord


def final_choice(contenders: list[RunRecord], rung_leader: RunRecord | None) -> tuple[RunRecord | None, str]:
    """The winner and, when it is not the fastest point estimate, why.

    The fastest record wins, unless the rungs' leader (``rung_leader``, its record at the workload's timing) is not
    shown slower than it there, its interval reaching the fastest one's lower end: then the rungs decide, as they
    measured every finalist against the others with the same steps (a workload timing of a few steps, as on a CPU,
    can put the baseline ahead on noise alone)."""
    fastest = max(contenders, key=lambda r: tokens_per_s(r) or 0.0, default=None)
    if rung_leader is None or fastest is None or fastest is rung_leader:
        return fastest, ""
    if not rates_overlap(rung_leader, fastest):
        return fastest, ""
    lead, top = rate_interval_of(rung_leader), rate_interval_of(fastest)
    assert lead is not None and top is not None  # both known: they overlap
    return rung_leader, (
        f"the rungs' fastest, and at the workload's timing not shown slower than {record_label(fastest)}: its "
        f"interval [{lead[0]:,.0f}, {lead[1]:,.0f}] real tok/s reaches [{top[0]:,.0f}, {top[1]:,.0f}]"
    )
