"""Trace tables for a notebook: what the rows are, the headline, categories, short and top kernels, utilization.

Each takes a parsed :class:`~nbhelpers.profiling.parse.Trace` (or a summary) and gives display strings; with
no trace (a failed run and no shipped trace) each shows a "no trace" note instead of failing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nbhelpers.formatting import fmt_num, fmt_per_step, fmt_percent, fmt_us
from nbhelpers.profiling.analyze import SHORT_US, category_summary, launches_per_step, short_kernels, top_kernels
from nbhelpers.profiling.verdict import plain_summary


def _no_trace() -> Any:
    from IPython.display import Markdown

    return Markdown(
        "**No trace to analyse**: the baseline run failed (its reason and what to change are in section 1) and "
        'no shipped trace was used; `TRACE_SOURCE = "shipped"` studies the recorded H200 trace instead.'
    )


def needs_trace(function: Callable[..., Any]) -> Callable[..., Any]:
    """A display helper that shows a "no trace" note instead of failing when the trace is None."""

    @functools.wraps(function)
    def wrapper(trace: Any, *args: Any, **kwargs: Any) -> Any:
        return _no_trace() if trace is None else function(trace, *args, **kwargs)

    return wrapper


def describe_trace(trace: Any) -> str:
    """Markdown: what the analysed rows are (GPU kernels or aten operators), how many steps, from where."""
    if trace is None:
        return _no_trace().data
    where = f" from `{Path(trace.source).name}`" if trace.source else ""
    text = (
        f"Analysing **{trace.num_steps} profiled step(s)** of **{trace.unit}**{where}: "
        f"{fmt_per_step(launches_per_step(trace))} per step."
    )
    if not trace.is_gpu:
        text += (
            " This machine has no GPU, so the profiler recorded no kernels: each row below is a **top-level aten "
            "operator** (an operator not called from inside another one), the CPU counterpart of a kernel "
            "launch. The method is the same as on a GPU; the counts and durations are the CPU's."
        )
    return text


@needs_trace
def trace_headline(trace: Any, short_us: float = SHORT_US) -> Any:
    """One row: unit, steps, launches per step, short-launch shares of launches and time, time per step."""
    import pandas as pd

    short = short_kernels(trace, short_us).iloc[0]
    busy = float(trace.ops["dur_us"].sum()) / trace.num_steps
    row = {
        "unit": trace.unit,
        "device": _trace_device(trace),
        "profiled steps": trace.num_steps,
        "launches / step": fmt_per_step(launches_per_step(trace)),
        f"< {short_us:g} us: share of launches": fmt_percent(short["share_of_launches"]),
        f"< {short_us:g} us: share of time": fmt_percent(short["share_of_time"]),
        "op time / step": fmt_us(busy),
        "wall time / step": fmt_us(trace.wall_us / trace.num_steps),
    }
    return pd.DataFrame([row])


def _trace_device(trace: Any) -> str:
    for props in trace.device_properties:
        if props.get("name"):
            return str(props["name"])
    return "CPU" if not trace.is_gpu else "unknown GPU"


def _shorten(name: Any, limit: int = 90) -> str:
    text = str(name)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@needs_trace
def category_table(trace: Any) -> Any:
    """``analyze.category_summary`` for display: per category launches and time per step and their shares."""
    frame = category_summary(trace)
    shown = frame.assign(
        launches_per_step=frame["launches_per_step"].map(fmt_per_step),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_percent),
        share_of_launches=frame["share_of_launches"].map(fmt_percent),
        mean_duration=frame["mean_us"].map(fmt_us),
    )[["category", "launches_per_step", "share_of_launches", "time_per_step", "share_of_time", "mean_duration"]]
    shown.attrs["unit"] = frame.attrs.get("unit")
    return shown


@needs_trace
def short_table(trace: Any, short_us: float = SHORT_US) -> Any:
    """``analyze.short_kernels`` for display: short vs long launches, their shares of launches and time."""
    frame = short_kernels(trace, short_us)
    return frame.assign(
        launches_per_step=frame["launches_per_step"].map(fmt_per_step),
        share_of_launches=frame["share_of_launches"].map(fmt_percent),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_percent),
    )[["duration", "launches_per_step", "share_of_launches", "time_per_step", "share_of_time"]]


@needs_trace
def top_table(trace: Any, n: int = 15) -> Any:
    """``analyze.top_kernels`` for display: the names with the most time, with calls per step and mean."""
    frame = top_kernels(trace, n)
    return frame.assign(
        name=frame["name"].map(_shorten),
        calls_per_step=frame["calls_per_step"].map(fmt_per_step),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        mean_duration=frame["mean_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_percent),
    )[["name", "category", "calls_per_step", "time_per_step", "mean_duration", "share_of_time"]]


def utilization_table(summary: Mapping[str, Any] | None) -> Any:
    """Nominal utilization, SM-efficiency estimate, MFU, idle share and step time, with what each measures."""
    import pandas as pd

    if summary is None:
        return _no_trace()
    s = plain_summary(summary)
    gpu = s.get("sm_efficiency_estimate") is not None or "GPU" in str(s.get("unit", ""))
    what = "kernel" if gpu else "aten operator"
    peak = s.get("peak_flops")
    rows = [
        ("nominal utilization", fmt_percent(s.get("nominal_utilization")),
         f"share of wall time with any {what} running (what nvidia-smi calls GPU utilization)"),
        ("SM-efficiency estimate", fmt_percent(s.get("sm_efficiency_estimate")),
         "time-weighted share of SMs each kernel's grid can occupy" if gpu else "no SMs on a CPU: not defined"),
        ("MFU (profiled step)", fmt_percent(s.get("mfu")),
         "useful model FLOPs per second over the peak"
         + (f" ({fmt_num(peak / 1e12, 3)} TFLOP/s, {s.get('peak_flops_source')})" if peak else "")),
        ("idle share", fmt_percent(s.get("idle_share")), f"share of wall time with no {what} running"),
        ("step time (profiled)", fmt_us(s.get("step_time_us")), "wall time of one profiled step"),
        (f"{what}s / step", fmt_per_step(s.get("launches_per_step")), "launches (GPU) or top-level operators (CPU)"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["measure", "value", "what it measures"])
