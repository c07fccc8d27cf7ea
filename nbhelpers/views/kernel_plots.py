"""Displays of notebook 02: the kernel diff of the baseline and the fastest other backend."""

from __future__ import annotations

from typing import Any


def kernel_diff_plot(diff: dict[str, Any]) -> Any:
    """Time per step by category before and after (HoloViews), or a note when there is no diff."""
    if diff["categories"].empty:
        import holoviews as hv

        return hv.Div(f"<p>{diff['headline']}</p>")
    from nbhelpers.profiling.plots import category_diff_bars

    return category_diff_bars(diff["categories"])
