"""How long the trace analysis takes on one trace file: loading it, the headline numbers, every other frame the
notebooks show and a diff, each timed once (the requirement: a 200 MB trace loaded and analysed in under 30 s on a
2-core machine). This times the analysis code, not a training step."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .analyze import (
    category_summary,
    idle_gaps,
    kernel_duration_histogram,
    short_kernels,
    step_timeline,
    summarize,
    top_kernels,
    utilization,
)
from .diff import diff_traces
from .parse import load_trace


def _every_other_frame(trace: Any) -> None:
    category_summary(trace)
    short_kernels(trace)
    utilization(trace)
    idle_gaps(trace)
    top_kernels(trace, 15)
    kernel_duration_histogram(trace)
    step_timeline(trace, 0)


def analysis_seconds(trace_path: str | Path) -> tuple[dict[str, float], dict[str, int]]:
    """Seconds of each part of the analysis of ``trace_path``, and what the trace held (kernels, cpu ops, steps)."""
    seconds: dict[str, float] = {}

    def timed(label: str, work: Callable[[], Any]) -> Any:
        start = time.perf_counter()
        value = work()
        seconds[label] = time.perf_counter() - start
        return value

    trace = timed("load_trace", lambda: load_trace(trace_path))
    timed("summarize", lambda: summarize(trace, model_flops_per_step=1e15, peak_flops=989e12))
    timed("every other frame", lambda: _every_other_frame(trace))
    timed("diff_traces (with itself)", lambda: diff_traces(trace, trace))
    seconds["load + summarize"] = seconds["load_trace"] + seconds["summarize"]
    seconds["everything"] = sum(v for k, v in seconds.items() if k != "load + summarize")
    held = {"kernels": len(trace.kernels), "cpu_ops": len(trace.cpu_ops), "steps": trace.num_steps}
    return seconds, held
