"""A tuner's winner is recommended over a faster point estimate that its interval reaches.

The tuner (``nbhelpers.tuning``) compares candidates in rungs of more and more timed steps before it measures the
last ones at the workload's own timing, and writes its winner's record id to ``tuned.json`` in the run folder.
Where the workload's timing is a few steps (the CPU default times 2), the fastest record there can be a candidate
the rungs showed slower: when the winner's interval of real tok/s reaches that record's, the measurements at the
workload's timing cannot tell the two apart, and the tuner's winner is recommended, saying why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from nbhelpers.measure.store import RunRecord

from .records import fastest, rates_overlap, record_label
from .start_cost import span_text

TUNED_FILE = "tuned.json"  # the tuner's winner in a run folder (nbhelpers.tuning.tuner writes it)
TUNER_WINNER = "tuner_winner"  # set in memory on the record a loaded run folder's tuned.json names


def mark_tuner_winner(records: Iterable[RunRecord], folder: Path) -> None:
    """Mark the record that ``folder``'s tuned.json names as its tuner's winner (in memory; nothing is written)."""
    try:
        record_id = json.loads((folder / TUNED_FILE).read_text(encoding="utf-8")).get("record_id")
    except (OSError, ValueError, AttributeError):
        return
    for record in records:
        if record.record_id == record_id:
            record.metrics[TUNER_WINNER] = True


def prefer_tuner_winner(best: RunRecord, candidates: Sequence[RunRecord]) -> tuple[RunRecord, str]:
    """``best``, or the fastest tuner's winner among ``candidates`` whose interval reaches ``best``'s; with a
    sentence saying why ('' when ``best`` stands)."""
    winner = fastest([r for r in candidates if r.metrics.get(TUNER_WINNER)])
    if winner is None or winner is best:
        return best, ""
    if not rates_overlap(winner, best):
        return best, ""
    return winner, (
        f"{record_label(winner)} is the tuner's winner ({span_text(winner)}), not measurably slower than "
        f"{record_label(best)} ({span_text(best)}) at the workload's timing, and faster in the tuner's rungs, which "
        f"timed more steps: {record_label(winner)} is recommended"
    )


__all__ = ["TUNED_FILE", "TUNER_WINNER", "mark_tuner_winner", "prefer_tuner_winner"]
