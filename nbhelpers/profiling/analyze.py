"""Analyses of one :class:`Trace` (in the spirit of Holistic Trace Analysis).

Every analysis runs over ``trace.ops``: device events (kernels, memcpys, memsets) on a GPU trace,
top-level aten operators on a CPU-only trace; frames carry ``attrs["unit"]`` saying which. Per-step
numbers divide by ``trace.num_steps``, the number of ProfilerStep spans (at least 1). A "launch" is
one such row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from .classify import MEMCPY
from .parse import Trace

SHORT_US = 10.0  # a launch shorter than this (microseconds) counts as short: launch overhead dominates it
KERNEL_NAME_CHARS = 160  # a record keeps this much of a kernel's name (templated GEMM names run to thousands)


def _labelled(frame: pd.DataFrame, trace: Trace) -> pd.DataFrame:
    frame.attrs["unit"] = trace.unit
    return frame


def launches_per_step(trace: Trace) -> float:
    """Device events (or top-level aten ops) per profiled step."""
    return len(trace.ops) / trace.num_steps


def category_summary(trace: Trace) -> pd.DataFrame:
    """Per category: launches, per step, time, time per step, shares and mean duration (by time, desc)."""
    ops = trace.ops
    steps = trace.num_steps
    grouped = ops.groupby("category", sort=False)["dur_us"].agg(["size", "sum"])
    frame = pd.DataFrame(
        {
            "category": grouped.index.astype(str),
            "launches": grouped["size"].to_numpy(dtype=np.int64),
            "time_us": grouped["sum"].to_numpy(dtype=np.float64),
        }
    )
    total_time = frame["time_us"].sum()
    total_launches = frame["launches"].sum()
    frame["launches_per_step"] = frame["launches"] / steps
    frame["time_per_step_us"] = frame["time_us"] / steps
    frame["share_of_time"] = frame["time_us"] / total_time if total_time else 0.0
    frame["share_of_launches"] = frame["launches"] / total_launches if total_launches else 0.0
    frame["mean_us"] = frame["time_us"] / frame["launches"]
    frame = frame.sort_values(["time_us", "category"], ascending=[False, True]).reset_index(drop=True)
    columns = [
        "category",
        "launches",
        "launches_per_step",
        "time_us",
        "time_per_step_us",
        "share_of_time",
        "share_of_launches",
        "mean_us",
    ]
    return _labelled(frame[columns], trace)


def short_kernels(trace: Trace, threshold_us: float = SHORT_US) -> pd.DataFrame:
    """Rows "short" (< threshold) and "long": launches, time, and their shares of the totals."""
    ops = trace.ops
    short = ops["dur_us"].to_numpy() < threshold_us
    durations = ops["dur_us"].to_numpy()
    total_time = float(durations.sum())
    rows = []
    for label, mask in ((f"< {threshold_us:g} us", short), (f">= {threshold_us:g} us", ~short)):
        launches = int(mask.sum())
        time = float(durations[mask].sum())
        rows.append(
            {
                "duration": label,
                "launches": launches,
                "launches_per_step": launches / trace.num_steps,
                "time_us": time,
                "time_per_step_us": time / trace.num_steps,
                "share_of_launches": launches / len(ops) if len(ops) else 0.0,
                "share_of_time": time / total_time if total_time else 0.0,
            }
        )
    return _labelled(pd.DataFrame(rows), trace)


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals as sorted, disjoint (starts, ends)."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    if not len(starts):
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > reach[:-1]
    last = np.empty(len(s), dtype=bool)
    last[-1] = True
    last[:-1] = new[1:]
    return s[new], reach[last]


def _as_arrays(
    intervals: pd.DataFrame | np.ndarray | Iterable[tuple[float, float]],
) -> tuple[np.ndarray, ...]:
    if isinstance(intervals, pd.DataFrame):
        return intervals["ts_us"].to_numpy(np.float64), intervals["end_us"].to_numpy(np.float64)
    array = np.asarray(list(intervals) if not isinstance(intervals, np.ndarray) else intervals, np.float64)
    if not array.size:
        return np.empty(0), np.empty(0)
    return array[:, 0], array[:, 1]


def busy_time_us(intervals: pd.DataFrame | np.ndarray | Iterable[tuple[float, float]]) -> float:
    """Length of the union of intervals: (start, end) pairs, or a frame with ts_us and end_us.

    Kernels overlapping on two streams count once: busy time is time with anything running.
    """
    starts, ends = merge_intervals(*_as_arrays(intervals))
    return float((ends - starts).sum())


def _busy_in_window(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    start, end = trace.window
    ops = trace.ops
    s, e = merge_intervals(ops["ts_us"].to_numpy(), ops["end_us"].to_numpy())
    s, e = np.clip(s, start, end), np.clip(e, start, end)
    keep = e > s
    return s[keep], e[keep]


@dataclass(frozen=True)
class Utilization:
    """Nominal utilization (busy / wall, what nvidia-smi reports) beside SM efficiency and MFU."""

    unit: str
    steps: int
    wall_us: float  # first step start to the end of the last step or op
    busy_us: float  # union of op intervals inside the wall window
    nominal_utilization: float  # busy / wall
    sm_efficiency_estimate: float | None  # time-weighted mean of min(1, blocks / SMs); None without SMs
    num_sms: int | None
    step_time_us: float  # wall / steps
    mfu: float | None  # model FLOPs per step / step time / peak; None unless both are given

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sm_efficiency_estimate(trace: Trace, num_sms: int | None = None) -> float | None:
    """Time-weighted mean over kernels with a grid of min(1, blocks / SMs), blocks = product of grid.

    A kernel of 66 blocks on a 132-SM GPU keeps at most half the SMs busy while it runs. Needs the
    SM count (``num_sms`` or the trace's deviceProperties); None on a CPU trace or without it.
    """
    num_sms = num_sms or trace.num_sms
    if not trace.is_gpu or not num_sms:
        return None
    ops = trace.ops
    blocks = ops["blocks"].to_numpy(np.float64)
    durations = ops["dur_us"].to_numpy(np.float64)
    known = ~np.isnan(blocks) & (durations > 0)
    if not known.any():
        return None
    share = np.minimum(1.0, blocks[known] / num_sms)
    return float((share * durations[known]).sum() / durations[known].sum())


def utilization(
    trace: Trace,
    *,
    model_flops_per_step: float | None = None,
    peak_flops: float | None = None,
    num_sms: int | None = None,
) -> Utilization:
    """Nominal utilization, SM-efficiency estimate and (given FLOPs and peak) MFU of the profiled steps."""
    start, end = trace.window
    wall = end - start
    s, e = _busy_in_window(trace)
    busy = float((e - s).sum())
    step_time = wall / trace.num_steps
    mfu = None
    if model_flops_per_step is not None and peak_flops and step_time > 0:
        mfu = model_flops_per_step / (step_time * 1e-6) / peak_flops
    return Utilization(
        unit=trace.unit,
        steps=trace.num_steps,
        wall_us=wall,
        busy_us=busy,
        nominal_utilization=busy / wall if wall > 0 else 0.0,
        sm_efficiency_estimate=sm_efficiency_estimate(trace, num_sms),
        num_sms=num_sms or trace.num_sms,
        step_time_us=step_time,
        mfu=mfu,
    )


@dataclass(frozen=True)
class IdleGaps:
    """Idle time between merged busy intervals inside the profiled window."""

    min_gap_us: float
    count: int  # gaps of at least min_gap_us
    total_us: float  # their total
    largest_us: float
    share_of_wall: float  # total_us / wall
    idle_us: float  # all idle time (wall - busy), gaps of any length
    gaps: pd.DataFrame  # start_us, end_us, dur_us of each counted gap, longest first


def idle_gaps(trace: Trace, min_gap_us: float = 1.0) -> IdleGaps:
    """Gaps with nothing running, from the window start to its end (edges included)."""
    start, end = trace.window
    wall = end - start
    s, e = _busy_in_window(trace)
    gap_starts = np.concatenate([[start], e])
    gap_ends = np.concatenate([s, [end]])
    lengths = gap_ends - gap_starts
    idle = float(lengths[lengths > 0].sum())
    keep = (lengths >= min_gap_us) & (lengths > 0)
    gaps = pd.DataFrame({"start_us": gap_starts[keep], "end_us": gap_ends[keep], "dur_us": lengths[keep]})
    gaps = gaps.sort_values("dur_us", ascending=False, kind="stable").reset_index(drop=True)
    total = float(gaps["dur_us"].sum())
    return IdleGaps(
        min_gap_us=min_gap_us,
        count=len(gaps),
        total_us=total,
        largest_us=float(gaps["dur_us"].max()) if len(gaps) else 0.0,
        share_of_wall=total / wall if wall > 0 else 0.0,
        idle_us=idle,
        gaps=_labelled(gaps, trace),
    )


def top_kernels(trace: Trace, n: int = 15) -> pd.DataFrame:
    """The n names with the most total time: calls, per step, time, mean, share, category."""
    ops = trace.ops
    grouped = ops.groupby("name", sort=False).agg(
        category=("category", "first"), calls=("dur_us", "size"), total_us=("dur_us", "sum")
    )
    total = grouped["total_us"].sum()
    grouped["calls_per_step"] = grouped["calls"] / trace.num_steps
    grouped["time_per_step_us"] = grouped["total_us"] / trace.num_steps
    grouped["mean_us"] = grouped["total_us"] / grouped["calls"]
    grouped["share_of_time"] = grouped["total_us"] / total if total else 0.0
    grouped = grouped.reset_index().sort_values(["total_us", "name"], ascending=[False, True]).head(n)
    columns = [
        "name",
        "category",
        "calls",
        "calls_per_step",
        "total_us",
        "time_per_step_us",
        "mean_us",
        "share_of_time",
    ]
    return _labelled(grouped[columns].reset_index(drop=True), trace)


def kernel_duration_histogram(trace: Trace, bins: int = 30) -> pd.DataFrame:
    """Launches and time per log-spaced duration bin: bin_left_us, bin_right_us, launches, time_us."""
    durations = trace.ops["dur_us"].to_numpy(np.float64)
    durations = durations[durations > 0]
    if not len(durations):
        return _labelled(pd.DataFrame(columns=["bin_left_us", "bin_right_us", "launches", "time_us"]), trace)
    low, high = np.log10(durations.min()), np.log10(durations.max())
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    edges = np.logspace(low, high, bins + 1)
    edges[0], edges[-1] = min(edges[0], durations.min()), max(edges[-1], durations.max())
    counts, _ = np.histogram(durations, bins=edges)
    time, _ = np.histogram(durations, bins=edges, weights=durations)
    columns = {"bin_left_us": edges[:-1], "bin_right_us": edges[1:], "launches": counts, "time_us": time}
    frame = pd.DataFrame(columns)
    return _labelled(frame, trace)


def step_timeline(trace: Trace, step_index: int = 0) -> pd.DataFrame:
    """Rows of one step with start/end offsets (us) from the step's start, for a timeline plot."""
    if not 0 <= step_index < trace.num_steps:
        raise IndexError(f"step_index={step_index} is outside 0..{trace.num_steps - 1}")
    ops = trace.ops[trace.ops["step"] == step_index]
    if len(trace.step_spans):
        origin = float(trace.step_spans["start_us"].iloc[step_index])
    else:
        origin = float(ops["ts_us"].min()) if len(ops) else 0.0
    frame = pd.DataFrame(
        {
            "name": ops["name"].to_numpy(),
            "category": ops["category"].to_numpy(),
            "stream": ops["stream"].to_numpy(),
            "start_offset_us": ops["ts_us"].to_numpy() - origin,
            "end_offset_us": ops["end_us"].to_numpy() - origin,
            "dur_us": ops["dur_us"].to_numpy(),
        }
    )
    return _labelled(frame, trace)


def summarize(
    trace: Trace,
    *,
    model_flops_per_step: float | None = None,
    peak_flops: float | None = None,
    num_sms: int | None = None,
    short_threshold_us: float = SHORT_US,
    min_gap_us: float = 1.0,
    top_n: int = 5,
    top_kernel_n: int = 10,
) -> dict[str, Any]:
    """Headline numbers as plain JSON-ready values, for a run record: the ``top_n`` categories and the
    ``top_kernel_n`` kernels with the most time (names cut to :data:`KERNEL_NAME_CHARS` characters)."""
    flops = {"model_flops_per_step": model_flops_per_step, "peak_flops": peak_flops}
    util = utilization(trace, num_sms=num_sms, **flops)
    categories = category_summary(trace)
    short = short_kernels(trace, short_threshold_us).iloc[0]
    gaps = idle_gaps(trace, min_gap_us)
    ops = trace.ops
    device_time = float(ops["dur_us"].sum())
    return {
        "unit": trace.unit,
        "steps": trace.num_steps,
        "launches_per_step": launches_per_step(trace),
        "kernel_time_per_step_us": device_time / trace.num_steps,
        "memcpy_launches_per_step": float((ops["category"] == MEMCPY).sum()) / trace.num_steps,
        "step_time_us": util.step_time_us,
        "wall_us": util.wall_us,
        "busy_us": util.busy_us,
        "nominal_utilization": util.nominal_utilization,
        "sm_efficiency_estimate": util.sm_efficiency_estimate,
        "num_sms": util.num_sms,
        "mfu": util.mfu,
        "short_threshold_us": short_threshold_us,
        "short_share_of_launches": float(short["share_of_launches"]),
        "short_share_of_time": float(short["share_of_time"]),
        "idle_share": gaps.idle_us / util.wall_us if util.wall_us > 0 else 0.0,
        "idle_gaps": {
            "min_gap_us": min_gap_us,
            "count": gaps.count,
            "total_us": gaps.total_us,
            "largest_us": gaps.largest_us,
            "share_of_wall": gaps.share_of_wall,
        },
        "top_categories": [
            {
                "category": str(row.category),
                "time_per_step_us": float(row.time_per_step_us),
                "share_of_time": float(row.share_of_time),
                "launches_per_step": float(row.launches_per_step),
            }
            for row in categories.head(top_n).itertuples()
        ],
        "top_kernels": [
            {
                "name": str(row.name)[:KERNEL_NAME_CHARS],
                "category": str(row.category),
                "time_per_step_us": float(row.time_per_step_us),
                "share_of_time": float(row.share_of_time),
                "launches_per_step": float(row.calls_per_step),
            }
            for row in top_kernels(trace, top_kernel_n).itertuples()
        ],
        "device": _device_name(trace),
    }


def _device_name(trace: Trace) -> str:
    for props in trace.device_properties:
        if props.get("name"):
            return str(props["name"])
    return "cpu" if not trace.is_gpu else "unknown GPU"
