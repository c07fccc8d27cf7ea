"""HoloViews (Bokeh) plots of trace analyses: category bars, duration histogram, step timeline, diff bars.

Each function takes a frame of :mod:`nbhelpers.profiling` (or a Trace) and returns a HoloViews object.
HoloViews is imported lazily; the bokeh backend is loaded only when no backend is loaded yet.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from nbhelpers.plotting import holoviews

from .analyze import category_summary, kernel_duration_histogram, step_timeline
from .classify import CATEGORIES
from .parse import Trace
from .tables import needs_trace

# One fixed color per category, so a category looks the same in every plot of the workbook.
CATEGORY_COLORS: dict[str, str] = dict(
    zip(
        CATEGORIES,
        (
            "#1f77b4",  # GEMM
            "#d62728",  # attention
            "#ff9896",  # linear attention
            "#9467bd",  # normalization
            "#ff7f0e",  # elementwise
            "#8c564b",  # reduction
            "#e377c2",  # softmax/loss
            "#bcbd22",  # optimizer
            "#7f7f7f",  # memcpy/memset
            "#17becf",  # communication
            "#2ca02c",  # Triton/Liger
            "#c7c7c7",  # other
        ),
        strict=True,
    )
)
BEFORE_COLOR = "#9a9a9a"
AFTER_COLOR = "#2e9d57"


def _unit(frame: pd.DataFrame, default: str = "kernels") -> str:
    return str(frame.attrs.get("unit", default))


def category_bars(summary_df: pd.DataFrame, value: str = "time_per_step_us") -> Any:
    """Bars per category of ``category_summary`` (time per step by default), colored by category."""
    hv = holoviews()
    frame = summary_df[["category", value, "launches_per_step", "share_of_time"]].copy()
    frame["category"] = frame["category"].astype(str)
    labels = {"time_per_step_us": "time per step (us)", "launches_per_step": "launches per step"}
    label = labels.get(value, value)
    bars = hv.Bars(frame, kdims=["category"], vdims=[value, "launches_per_step", "share_of_time"])
    return bars.opts(
        color="category",
        cmap=CATEGORY_COLORS,
        tools=["hover"],
        xrotation=35,
        ylabel=label,
        title=f"{label} by category ({_unit(summary_df)})",
        width=720,
        height=340,
        show_legend=False,
    )


def duration_histogram(trace: Trace, bins: int = 30, weight: str = "launches") -> Any:
    """Histogram of durations on a log x axis; ``weight`` "launches" counts, "time_us" sums time."""
    hv = holoviews()
    hist = kernel_duration_histogram(trace, bins=bins)
    edges = list(hist["bin_left_us"]) + list(hist["bin_right_us"].iloc[-1:])
    ylabel = "launches" if weight == "launches" else "time (us)"
    plot = hv.Histogram((edges, hist[weight].to_numpy()), kdims=["duration_us"], vdims=[ylabel])
    return plot.opts(
        logx=True,
        xlabel="duration (us, log scale)",
        ylabel=ylabel,
        title=f"Duration of {trace.unit} ({trace.num_steps} step(s))",
        tools=["hover"],
        color="#3b7dd8",
        width=720,
        height=300,
    )


def step_timeline_plot(trace: Trace, step_index: int = 0) -> Any:
    """One step as rectangles: x = time from the step start, one lane per stream, colored by category."""
    hv = holoviews()
    timeline = step_timeline(trace, step_index)
    lanes = {stream: i for i, stream in enumerate(sorted(timeline["stream"].unique()))}
    lane = timeline["stream"].map(lanes).astype(float)
    frame = pd.DataFrame(
        {
            "x0": timeline["start_offset_us"],
            "y0": lane - 0.4,
            "x1": timeline["end_offset_us"],
            "y1": lane + 0.4,
            "category": timeline["category"].astype(str),
            "name": timeline["name"].str.slice(0, 120),
            "dur_us": timeline["dur_us"],
        }
    )
    lane_name = "stream" if trace.is_gpu else "thread"
    rects = hv.Rectangles(frame, kdims=["x0", "y0", "x1", "y1"], vdims=["category", "name", "dur_us"])
    return rects.opts(
        color="category",
        cmap=CATEGORY_COLORS,
        line_alpha=0,
        tools=["hover"],
        yticks=[(i, f"{lane_name} {s}") for s, i in lanes.items()],
        xlabel="time from step start (us)",
        ylabel="",
        title=f"Step {step_index}: {len(frame)} {trace.unit}",
        width=900,
        height=120 + 40 * len(lanes),
        show_legend=True,
        legend_position="right",
    )


def category_diff_bars(diff_categories_df: pd.DataFrame) -> Any:
    """Grouped bars of time per step per category, before and after (from ``diff_categories``)."""
    hv = holoviews()
    frame = diff_categories_df
    long = pd.concat(
        [
            pd.DataFrame(
                {
                    "category": frame["category"].astype(str),
                    "trace": which,
                    "time_per_step_us": frame[f"time_per_step_us_{which}"],
                    "launches_per_step": frame[f"launches_per_step_{which}"],
                }
            )
            for which in ("before", "after")
        ],
        ignore_index=True,
    )
    bars = hv.Bars(long, kdims=["category", "trace"], vdims=["time_per_step_us", "launches_per_step"])
    return bars.opts(
        color="trace",
        cmap={"before": BEFORE_COLOR, "after": AFTER_COLOR},
        multi_level=True,
        tools=["hover"],
        xrotation=35,
        ylabel="time per step (us)",
        title=f"Time per step by category, before and after ({_unit(frame)})",
        width=900,
        height=360,
    )


# ----------------------------------------------------------------------------------------------
# A trace's plots for a notebook: a "no trace" note instead of a plot when there is no trace


@needs_trace
def category_plot(trace: Any) -> Any:
    """Time per step by category (:func:`category_bars`)."""
    return category_bars(category_summary(trace))


@needs_trace
def duration_plots(trace: Any, bins: int = 30) -> Any:
    """Durations on a log axis, counted by launches and weighted by time (:func:`duration_histogram`)."""
    return (duration_histogram(trace, bins, "launches") + duration_histogram(trace, bins, "time_us")).cols(1)


@needs_trace
def timeline_plot(trace: Any, step_index: int = 0) -> Any:
    """One profiled step as a timeline, one lane per stream or thread (:func:`step_timeline_plot`)."""
    return step_timeline_plot(trace, step_index)
