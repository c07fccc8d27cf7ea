"""The monitor's records as a table over steps: one row per logging interval, for notebook 04's plot."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.measure.store import RunRecord

from .core import MONITOR_KIND

SERIES_COLUMNS = (
    "step", "real_tokens_per_s", "positions_per_s", "padding_fraction", "loss_tokens", "mfu", "peak_memory_gib",
    "launches_per_step", "nominal_utilization", "window_mfu", "window_cost_s", "label", "session", "machine",
    "mfu_note", "warnings",
)  # fmt: skip


def monitor_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The records the monitor wrote (kind ``monitor``) that hold a step."""
    return [r for r in records if r.kind == MONITOR_KIND and r.ok and r.metrics.get("step") is not None]


def monitor_frame(records: Iterable[RunRecord]) -> Any:
    """One row per monitor record, by machine, session (one training run) and step (:data:`SERIES_COLUMNS`);
    ``warnings`` holds the codes of the interval's alerts, joined by commas."""
    import pandas as pd

    rows = []
    for record in monitor_records(records):
        m = record.metrics
        row = {key: m.get(key) for key in SERIES_COLUMNS}
        row.update(label=record.label, session=record.config.get("session", ""), machine=record.machine)
        row["warnings"] = ", ".join(w.get("code", "") for w in m.get("warnings") or [])
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    return frame.sort_values(["machine", "session", "step"], kind="stable").reset_index(drop=True)
