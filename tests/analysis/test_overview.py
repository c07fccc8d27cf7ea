"""Which records a report covers (``analysis.overview``): runs by name or folder, the overview per machine."""

from __future__ import annotations

import pytest

from nbhelpers.analysis import overview
from nbhelpers.measure.store import RunStore


def test_load_report_records_dedupes_and_resolves_names(runs_root, make_record):
    a = RunStore.for_run("a")
    first = a.append(make_record("base", 100.0, run_name="a"))
    RunStore.for_run("b").append(make_record("base", 200.0, run_name="b"))
    loaded = overview.load_report_records("a", f"b, {runs_root / 'a'}")
    assert [r.record_id for r in loaded][0] == first.record_id and len(loaded) == 2
    with pytest.raises(FileNotFoundError, match="no run folder"):
        overview.load_report_records("a", "nope")
    table = overview.records_overview(loaded)
    assert table[["run", "steps ok"]].values.tolist() == [["a", 1], ["b", 1]]
