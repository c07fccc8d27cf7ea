"""Trace tables for a notebook (``profiling.tables``), and a "no trace" note instead of a table or plot."""

from __future__ import annotations

from pathlib import Path

from nbhelpers.analysis.baseline import trace_summary
from nbhelpers.profiling import load_trace, plots, tables
from nbhelpers.profiling.verdict import interpret_utilization

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def test_tables_on_a_gpu_trace_and_without_one(tmp_path) -> None:
    trace = load_trace(TRACES / "gpu_before.json")
    headline = tables.trace_headline(trace).iloc[0]
    assert headline["unit"] == "GPU kernels" and headline["device"] == "NVIDIA H200"
    assert headline["launches / step"] == "4.5"  # 9 events in 2 steps (the fill outside them is not counted)
    categories = tables.category_table(trace)
    assert {"GEMM", "communication", "optimizer"} <= set(categories["category"])
    assert list(categories.columns)[:3] == ["category", "launches_per_step", "share_of_launches"]
    assert len(tables.short_table(trace)) == 2 and len(tables.top_table(trace, 3)) == 3
    summary = trace_summary(trace, None)
    assert summary["mfu"] is None and summary["sm_efficiency_estimate"] is not None
    assert "MFU is unknown" in interpret_utilization(summary)
    table = tables.utilization_table(summary)
    assert table["measure"].tolist()[:3] == ["nominal utilization", "SM-efficiency estimate", "MFU (profiled step)"]
    assert "CPU counterpart" not in tables.describe_trace(trace)
    for helper in (tables.category_table, tables.trace_headline, plots.category_plot, plots.timeline_plot):
        assert "No trace to analyse" in helper(None).data
    assert trace_summary(None, None) is None
    assert "No trace to analyse" in tables.describe_trace(None)
