"""What a warm compiled-kernel cache saves: the startup records (kind "startup", from
:func:`nbhelpers.measure.startup.cold_vs_warm`, or a grid row that was the cold start) as a table of first step
against timed step."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.formatting import table_or_note
from nbhelpers.kernels.registry import COMPILED_CACHES
from nbhelpers.measure.store import RunRecord

STARTUP_COLUMNS = ["label", "machine", "cache", "status", "first step s", "step median s", "startup overhead s",
                   "cache files", "reason"]  # fmt: skip


def startup_table(records: Iterable[RunRecord]) -> Any:
    """First step against a timed step, per record: the startup cost and what a warm cache saves
    ("cold / this": the cold first step of the same configuration over this one's)."""
    import pandas as pd

    rows = []
    for record in records:
        m = record.metrics
        first, median = m.get("first_step_s"), m.get("step_time_median_s")
        cache = m.get("cache", "")
        suffix = f" ({cache} cache)" if cache else ""  # a grid row that was the cold start says so here
        rows.append(
            {
                "label": record.label if record.label.endswith(suffix) else record.label + suffix,
                "machine": record.machine,
                "cache": cache,
                "status": record.status,
                "first step s": first,
                "step median s": median,
                "startup overhead s": first - median if record.ok and first is not None and median else None,
                "cache files": sum(m.get(f"{name}_files") or 0 for name in COMPILED_CACHES) if record.ok else None,
                "reason": record.reason,
            }
        )
    frame = pd.DataFrame(rows, columns=STARTUP_COLUMNS)
    configuration = frame["label"].str.replace(r" \((cold|warm) cache\)$", "", regex=True)
    cold_first = {
        name: first for name, cache, first in zip(configuration, frame["cache"], frame["first step s"])
        if cache == "cold" and first
    }  # fmt: skip
    frame["cold / this"] = [
        cold_first[name] / first if name in cold_first and first else None
        for name, first in zip(configuration, frame["first step s"])
    ]
    return frame


def startup_view(records: Iterable[RunRecord], enabled: bool) -> Any:
    """:func:`startup_table`, or a sentence saying why nothing was measured (MEASURE_STARTUP off, or no kernel entry
    of the grid fills a compiled-kernel cache, so there is no cold start to compare)."""
    why = (
        "Not measured: MEASURE_STARTUP is off."
        if not enabled
        else "Not measured: no kernel entry here compiles kernels into a cache (eager only), so a cold and a warm "
        "start are the same."
    )
    return table_or_note(startup_table(records), why)
