"""What a run found, in three lines: the report's first screen.

Line one: the recommendation, its throughput and its speedup over both references (the reference path and "without
the workbook"). Line two: the reference path's step at kernel level (launches per step, nominal GPU utilization
beside MFU), where notebook 01 profiled it. Line three: what the evidence rests on (configurations measured, failed
and thin, the recommendation's parity). Every number comes from a record; a missing one says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.formatting import fmt_count, fmt_percent, fmt_rate, fmt_speedup
from nbhelpers.measure.store import RunRecord

from .job_projection import BASELINE, job_rows
from .recommend import Recommendation, recommend
from .records import is_thin, machines_of, record_label, step_records


def main_machine(records: Iterable[RunRecord]) -> str | None:
    """The machine with the most step records (the one the report's first screen speaks of); None without any."""
    steps = step_records(records)
    machines = machines_of(steps)
    if not machines:
        return None
    return max(machines, key=lambda m: sum(1 for r in steps if r.machine == m))


def recommendation_line(rec: Recommendation | None, why_none: str = "") -> str:
    """The recommendation with its speedups over both references, or why there is none."""
    if rec is None:
        return f"No configuration is recommended: {why_none or 'no measured configuration passed parity'}."
    without = (
        f" and {fmt_speedup(rec.over_without)} without the workbook"
        if rec.over_without is not None
        else f"; without the workbook not measured ({rec.without_label or 'no record'})"
    )
    return (
        f"Recommended on {rec.machine}: {rec.label}, {fmt_rate(rec.real_tokens_per_s)} real tok/s = "
        f"{fmt_speedup(rec.speedup)} the reference path ({rec.baseline_label}){without}."
    )


def kernel_level_line(baseline: RunRecord | None) -> str:
    """The reference path's step at kernel level, from its profiled step (notebook 01), or why not."""
    if baseline is None:
        return "The reference path was not measured: notebook 01 measures it."
    metrics = baseline.metrics
    launches = metrics.get("trace_launches_per_step")
    if launches is None:
        return f"The reference path ({record_label(baseline)}) was not profiled: notebook 01's PROFILE profiles it."
    nominal, mfu = metrics.get("trace_nominal_utilization"), metrics.get("mfu")
    device = "GPU" if baseline.environment.get("device_type") == "cuda" else "device"
    return (
        f"The reference path's step ran {fmt_count(launches)} kernel launches at {fmt_percent(nominal)} nominal "
        f"{device} utilization and {fmt_percent(mfu)} MFU: busy is not the same as useful."
    )


def evidence_line(records: Iterable[RunRecord], machine: str, rec: Recommendation | None) -> str:
    """How many configurations the findings rest on, how many failed or are thin, and the pick's parity."""
    steps = [r for r in step_records(records) if r.machine == machine]
    failed = sum(1 for r in steps if not r.ok)
    thin = sum(1 for r in steps if r.ok and is_thin(r))
    parity = f"; the recommendation's parity: {rec.parity}" if rec is not None else ""
    return (
        f"{len(steps)} configuration(s) measured on {machine}: {failed} failed, {thin} thin (fewer timed steps "
        f"than the floor){parity}."
    )


def findings(records: Iterable[RunRecord], baseline_label: str | None = None, adapter: Any = None) -> list[str]:
    """The three lines of the report's first screen for its main machine; one line when nothing was measured."""
    records = list(records)
    machine = main_machine(records)
    if machine is None:
        return ["Nothing was measured: run notebooks 01-03 first."]
    mine = [r for r in records if r.machine == machine]
    try:
        rec: Recommendation | None = recommend(mine, baseline_label=baseline_label, adapter=adapter)
        why = ""
    except ValueError as error:
        rec, why = None, str(error)
    baseline = job_rows(mine, baseline_label)[BASELINE]  # the recommendation's own, as the job projection finds it
    baseline = baseline if isinstance(baseline, RunRecord) else None
    return [recommendation_line(rec, why), kernel_level_line(baseline), evidence_line(mine, machine, rec)]


__all__ = ["findings", "main_machine", "recommendation_line", "kernel_level_line", "evidence_line"]
