"""Notebook 01's account of where the profiled step made the host wait, read from a record."""

from __future__ import annotations

from nbhelpers.analysis import host_waits
from nbhelpers.measure.store import RunRecord


def record(metrics: dict, device: str = "cuda") -> RunRecord:
    return RunRecord(config={"label": "row"}, kind="step", metrics=metrics, environment={"device_type": device})


def test_the_lines_that_made_the_host_wait_are_listed_with_their_counts():
    sites = [{"site": "fla/ops/utils/index.py:130", "syncs": 1192}, {"site": "liger_kernel/ops/x.py:7", "syncs": 1}]
    text = host_waits.describe(record({"host_syncs_per_step": 1196, "host_sync_sites": sites}))
    assert "**1,196 times**" in text
    assert text.splitlines()[-2:] == ["| `fla/ops/utils/index.py:130` | 1,192 |", "| `liger_kernel/ops/x.py:7` | 1 |"]


def test_a_step_without_a_count_says_why():
    assert host_waits.describe(record({}, device="cpu")).startswith("Not counted on a CPU")
    assert "not profiled" in host_waits.describe(record({}))
    assert "no record" in host_waits.describe(None)
    assert "never made the host wait" in host_waits.describe(record({"host_syncs_per_step": 0, "host_sync_sites": []}))
