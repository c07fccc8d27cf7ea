"""Every trace plot returns a HoloViews object that renders to a Bokeh figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbhelpers.profiling import CATEGORIES, category_summary, diff_categories, load_trace

hv = pytest.importorskip("holoviews")
from nbhelpers.profiling.plots import (  # noqa: E402
    CATEGORY_COLORS,
    category_bars,
    category_diff_bars,
    duration_histogram,
    step_timeline_plot,
)

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


@pytest.fixture(scope="module")
def before():
    return load_trace(TRACES / "gpu_before.json")


def _render(obj):
    from bokeh.model import Model

    figure = hv.render(obj, backend="bokeh")
    assert isinstance(figure, Model)
    return figure


def test_category_bars(before) -> None:
    plot = category_bars(category_summary(before))
    assert isinstance(plot, hv.Bars)
    assert list(plot.data["category"])[:2] == ["GEMM", "optimizer"]
    assert plot.data["time_per_step_us"].iloc[0] == 40.0
    figure = _render(plot)
    assert list(figure.x_range.factors)[:2] == ["GEMM", "optimizer"]


def test_duration_histogram_has_log_axis(before) -> None:
    plot = duration_histogram(before, bins=4)
    assert isinstance(plot, hv.Histogram)
    assert plot.dimension_values(1).sum() == 9  # launches in the steps
    figure = _render(plot)
    assert type(figure.x_scale).__name__ == "LogScale"


def test_step_timeline_plot(before) -> None:
    plot = step_timeline_plot(before, step_index=0)
    assert isinstance(plot, hv.Rectangles)
    assert len(plot) == 4  # GEMM, NCCL, add, memcpy of ProfilerStep#3
    assert sorted(set(plot.data["category"])) == ["GEMM", "communication", "elementwise", "memcpy/memset"]
    assert sorted(plot.data["y0"].unique()) == [-0.4, 0.6]  # two streams, two lanes
    _render(plot)


def test_category_diff_bars() -> None:
    pair = load_trace(TRACES / "gpu_before.json"), load_trace(TRACES / "gpu_after.json")
    plot = category_diff_bars(diff_categories(*pair))
    assert isinstance(plot, hv.Bars)
    assert len(plot) == 14  # 7 categories x before/after
    _render(plot)


def test_category_colors_cover_every_category() -> None:
    assert len(CATEGORY_COLORS) == len(CATEGORIES) and len(set(CATEGORY_COLORS.values())) == len(CATEGORIES)
