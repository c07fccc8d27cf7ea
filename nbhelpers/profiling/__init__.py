"""torch.profiler trace analysis: capture, parse, classify, analyze and diff (CPU and GPU traces).

For display: ``tables`` (trace tables), ``verdict`` (the utilization sentence) and ``plots``.
"""

from nbhelpers.profiling.analyze import (
    IdleGaps,
    Utilization,
    busy_time_us,
    category_summary,
    idle_gaps,
    kernel_duration_histogram,
    launches_per_step,
    merge_intervals,
    short_kernels,
    sm_efficiency_estimate,
    step_timeline,
    summarize,
    top_kernels,
    utilization,
)
from nbhelpers.profiling.capture import ProfilerWindow, profile_steps
from nbhelpers.profiling.classify import CATEGORIES, classify_cpu_op, classify_kernel
from nbhelpers.profiling.diff import diff_categories, diff_summary, diff_traces
from nbhelpers.profiling.parse import CPU_UNIT, GPU_UNIT, Trace, load_trace, trace_from_json

__all__ = [
    "CATEGORIES",
    "CPU_UNIT",
    "GPU_UNIT",
    "IdleGaps",
    "ProfilerWindow",
    "Trace",
    "Utilization",
    "busy_time_us",
    "category_summary",
    "classify_cpu_op",
    "classify_kernel",
    "diff_categories",
    "diff_summary",
    "diff_traces",
    "idle_gaps",
    "kernel_duration_histogram",
    "launches_per_step",
    "load_trace",
    "merge_intervals",
    "profile_steps",
    "short_kernels",
    "sm_efficiency_estimate",
    "step_timeline",
    "summarize",
    "top_kernels",
    "trace_from_json",
    "utilization",
]
