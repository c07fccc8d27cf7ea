"""Repeated measurements of one configuration in one group (machine, run, workload): which baseline a record
divides by, and which measurements disagree beyond their spread.

A run measures its baseline's configuration more than once (notebook 01's baseline, notebook 02's eager row,
notebook 03's eager static row, the tuner's): a record divides by the measurement of the baseline's
configuration nearest to it in time, since a machine's speed drifts over a run (a busy CPU read one
configuration 436 and 162 tok/s in one run). Two measurements of one computation whose intervals do not overlap
are a disagreement: the report shows them instead of dividing by either in silence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nbhelpers.formatting import fmt_num
from nbhelpers.measure.spread import overlaps
from nbhelpers.measure.store import RunRecord

from .identity import computation_key
from .records import group_records, is_measured, is_workbook, rate_interval_of, record_label, tokens_per_s

DISAGREEMENT_COLUMNS = ("machine", "run", "workload", "configuration", "measurements", "records")


def _time(record: RunRecord) -> float | None:
    try:
        return datetime.fromisoformat(str(record.created_at)).timestamp()
    except ValueError:
        return None


def same_computation(records: Iterable[RunRecord], reference: RunRecord) -> list[RunRecord]:
    """The measured workbook records of ``records`` that ran ``reference``'s computation, in their order."""
    key = computation_key(reference.config)
    return [r for r in records if is_measured(r) and is_workbook(r) and computation_key(r.config) == key]


def nearest_baseline(record: RunRecord, baseline: RunRecord, members: Sequence[RunRecord]) -> RunRecord:
    """The measurement of ``baseline``'s configuration among ``members`` (one group) nearest in time to ``record``
    (the earlier one on a tie); ``baseline`` itself when times are missing or it is the only one."""
    return nearest_in_time(record, same_computation(members, baseline), baseline)


def nearest_in_time(record: RunRecord, repeats: Sequence[RunRecord], fallback: RunRecord) -> RunRecord:
    """Of ``repeats`` (measurements of one configuration), the one nearest in time to ``record`` (the earlier on a
    tie); ``fallback`` when times are missing."""
    when = _time(record)
    if when is None:
        return fallback
    timed = [(abs(t - when), i, r) for i, r in enumerate(repeats) if (t := _time(r)) is not None]
    return min(timed, key=lambda item: item[:2])[2] if timed else fallback


@dataclass(frozen=True)
class Disagreement:
    """Measurements of one computation in one group whose intervals do not all overlap."""

    group: tuple[str, str, str]
    records: tuple[RunRecord, ...]  # every measurement of the computation with an interval, in store order

    @property
    def configuration(self) -> str:
        return record_label(self.records[0])

    def measurements(self) -> str:
        """'436 [420-450] (01_baseline_profile), 162 [150-170] (03_dynamic_padding)'."""
        parts = []
        for record in self.records:
            low, high = rate_interval_of(record) or (None, None)
            where = record.notebook or record_label(record)
            parts.append(f"{fmt_num(tokens_per_s(record), 0)} [{fmt_num(low, 0)}-{fmt_num(high, 0)}] ({where})")
        return ", ".join(parts)


def disagreements(records: Iterable[RunRecord]) -> list[Disagreement]:
    """Per group and computation, the measurements of which two have intervals that do not overlap."""
    found = []
    for key, members in group_records(records).items():
        by_computation: dict[Any, list[RunRecord]] = {}
        for record in members:
            if is_measured(record) and is_workbook(record) and rate_interval_of(record) is not None:
                by_computation.setdefault(computation_key(record.config), []).append(record)
        for repeats in by_computation.values():
            intervals = [rate_interval_of(r) for r in repeats]
            if any(not overlaps(a, b) for i, a in enumerate(intervals) for b in intervals[i + 1 :]):
                found.append(Disagreement(key, tuple(repeats)))
    return found


def disagreeing_with(record: RunRecord, found: Iterable[Disagreement]) -> str:
    """What the table says beside a record whose computation was measured apart: '' when none disagree."""
    for disagreement in found:
        if any(r is record for r in disagreement.records):
            return "measured apart beyond the spread: " + disagreement.measurements()
    return ""


def disagreement_table(records: Iterable[RunRecord]) -> Any:
    """One row per configuration measured more than once in a group with intervals that do not overlap."""
    import pandas as pd

    rows = [
        {
            "machine": d.group[0], "run": d.group[1], "workload": d.group[2], "configuration": d.configuration,
            "measurements": d.measurements(), "records": ", ".join(r.record_id for r in d.records),
        }  # fmt: skip
        for d in disagreements(records)
    ]
    return pd.DataFrame(rows, columns=list(DISAGREEMENT_COLUMNS))


__all__ = [
    "DISAGREEMENT_COLUMNS",
    "Disagreement",
    "disagreement_table",
    "disagreeing_with",
    "disagreements",
    "nearest_baseline",
    "nearest_in_time",
    "same_computation",
]
