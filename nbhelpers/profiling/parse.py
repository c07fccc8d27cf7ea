"""Load a torch.profiler Chrome trace (.json or .json.gz) into a :class:`Trace` of pandas frames.

Device events are ``cat`` "kernel", "gpu_memcpy" and "gpu_memset". Each is assigned to the ProfilerStep
whose CPU span holds its launch (found through the ``correlation`` id of the cudaLaunchKernel /
cuLaunchKernel event), or, without a launch event, the span that holds its own start.
On a trace without device events the analyses run over top-level aten operators instead
(``aten::`` ops not nested in another ``aten::`` op of the same thread); those inside an
``Optimizer.step#`` annotation are category "optimizer", whatever the operator.
"""

from __future__ import annotations

import gc
import gzip
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .classify import MEMCPY, OPTIMIZER, classify_cpu_op, classify_kernel

try:  # orjson, when installed, takes about a quarter off loading a 200 MB trace; same objects
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

GPU_UNIT = "GPU kernels"
CPU_UNIT = "aten operators (CPU)"
STEP_PREFIX = "ProfilerStep#"
OPTIMIZER_PREFIX = "Optimizer.step#"
OPS_COLUMNS = (
    "name",
    "category",
    "ts_us",
    "dur_us",
    "end_us",
    "stream",
    "device",
    "grid",
    "block",
    "registers_per_thread",
    "blocks",
    "step",
)


@dataclass
class Trace:
    """One profiler trace: device kernels, CPU operators, ProfilerStep spans and metadata."""

    kernels: pd.DataFrame  # device events, one row each (see OPS_COLUMNS; kind: kernel/memcpy/memset)
    cpu_ops: pd.DataFrame  # cpu_op events: name, ts_us, dur_us, end_us, tid, pid, top_level, category, step
    step_spans: pd.DataFrame  # ProfilerStep spans in time order: name, start_us, end_us
    device_properties: list[dict[str, Any]] = field(default_factory=list)
    distributed_info: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # every top-level key except traceEvents
    source: str = ""

    @property
    def is_gpu(self) -> bool:
        """Whether the trace has device kernels (else the analyses use aten operators)."""
        return len(self.kernels) > 0

    @property
    def unit(self) -> str:
        """What one analysed row is: "GPU kernels" or "aten operators (CPU)"."""
        return GPU_UNIT if self.is_gpu else CPU_UNIT

    @property
    def num_steps(self) -> int:
        """Number of ProfilerStep spans (at least 1)."""
        return max(1, len(self.step_spans))

    @cached_property
    def ops(self) -> pd.DataFrame:
        """The analysed rows, inside a step: device events on a GPU trace, top-level aten ops on a CPU one."""
        if self.is_gpu:
            frame = self.kernels
        else:
            top = self.cpu_ops[self.cpu_ops["top_level"]]
            frame = pd.DataFrame(
                {
                    "name": top["name"],
                    "category": top["category"],
                    "ts_us": top["ts_us"],
                    "dur_us": top["dur_us"],
                    "end_us": top["end_us"],
                    "stream": top["tid"],
                    "device": top["pid"],
                    "grid": None,
                    "block": None,
                    "registers_per_thread": np.nan,
                    "blocks": np.nan,
                    "step": top["step"],
                }
            )
        frame = frame[frame["step"] >= 0].reset_index(drop=True)
        frame.attrs["unit"] = self.unit
        return frame

    @cached_property
    def window(self) -> tuple[float, float]:
        """(start, end) in us of the profiled steps: first step start to the last step or op end."""
        ops = self.ops
        if len(self.step_spans):
            start = float(self.step_spans["start_us"].iloc[0])
            end = float(self.step_spans["end_us"].max())
            if len(ops):
                end = max(end, float(ops["end_us"].max()))
            return start, end
        if not len(ops):
            return 0.0, 0.0
        return float(ops["ts_us"].min()), float(ops["end_us"].max())

    @property
    def wall_us(self) -> float:
        start, end = self.window
        return end - start

    @property
    def num_sms(self) -> int | None:
        """Streaming multiprocessors of the first device in deviceProperties, if known."""
        for props in self.device_properties:
            if props.get("numSms"):
                return int(props["numSms"])
        return None


def _loads(data: bytes) -> Any:
    if _orjson is not None:
        return _orjson.loads(data)
    return json.loads(data)


def load_trace(path: str | Path) -> Trace:
    """Read a Chrome trace written by torch.profiler (``.json`` or gzip-compressed ``.json.gz``)."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived event dicts: the cyclic collector would rescan them many times
    try:
        return trace_from_json(_loads(raw), source=str(path))
    finally:
        if was_enabled:
            gc.enable()


def trace_from_json(document: dict[str, Any] | list[dict[str, Any]], source: str = "") -> Trace:
    """Build a Trace from an already parsed Chrome trace (a dict with traceEvents, or a bare list)."""
    if isinstance(document, list):
        events, metadata = document, {}
    else:
        events = document.get("traceEvents") or []
        metadata = {k: v for k, v in document.items() if k != "traceEvents"}
    device, cpu, steps, optimizer, launches = _split_events(events)
    step_spans = _step_spans(steps)
    kernels = _device_frame(device, launches, step_spans)
    cpu_ops = _cpu_frame(cpu, step_spans, optimizer)
    props = metadata.get("deviceProperties") or []
    return Trace(
        kernels=kernels,
        cpu_ops=cpu_ops,
        step_spans=step_spans,
        device_properties=list(props) if isinstance(props, list) else [],
        distributed_info=dict(metadata.get("distributedInfo") or {}),
        metadata=metadata,
        source=source,
    )


def _split_events(
    events: list[dict[str, Any]],
) -> tuple[list[tuple], list[tuple], list[dict], list[dict], dict[str, list]]:
    """One pass: device rows, cpu-op rows, step spans, optimizer spans and launches (correlation, ts).

    Rows are tuples of the fields the frames need (one pass, no second walk over the events).
    """
    device: list[tuple] = []
    cpu: list[tuple] = []
    steps: list[dict] = []
    optimizer: list[dict] = []
    launch_corr: list[int] = []
    launch_ts: list[float] = []
    empty: dict[str, Any] = {}
    for event in events:
        cat = event.get("cat")
        if cat == "cpu_op":
            if event.get("ph") == "X":
                name = event["name"]
                cpu.append((name, event["ts"], event.get("dur", 0.0), event.get("tid"), event.get("pid")))
                if name.startswith(STEP_PREFIX):
                    steps.append(event)
        elif cat == "kernel" or cat == "gpu_memcpy" or cat == "gpu_memset":
            if event.get("ph") == "X":
                args = event.get("args") or empty
                device.append(
                    (
                        event["name"],
                        event["ts"],
                        event.get("dur", 0.0),
                        args.get("stream", event.get("tid")),
                        args.get("device", event.get("pid")),
                        args.get("correlation", -1),
                        args.get("registers per thread"),
                        args.get("grid"),
                        args.get("block"),
                        cat,
                    )
                )
        elif cat == "cuda_runtime" or cat == "cuda_driver":
            args = event.get("args")
            if args and "correlation" in args:
                launch_corr.append(args["correlation"])
                launch_ts.append(event["ts"])
        elif cat == "user_annotation" and event.get("ph") == "X":
            name = event["name"]
            if name.startswith(STEP_PREFIX):
                steps.append(event)
            elif name.startswith(OPTIMIZER_PREFIX):
                optimizer.append(event)
    return device, cpu, steps, optimizer, {"correlation": launch_corr, "ts": launch_ts}


def _step_spans(steps: list[dict]) -> pd.DataFrame:
    rows = {}
    for event in steps:  # one span per step name: cpu_op and user_annotation copies collapse
        start = float(event["ts"])
        end = start + float(event.get("dur", 0.0))
        old = rows.get(event["name"])
        rows[event["name"]] = (start, end) if old is None else (min(old[0], start), max(old[1], end))
    frame = pd.DataFrame(
        [(name, start, end) for name, (start, end) in rows.items()], columns=["name", "start_us", "end_us"]
    )
    return frame.sort_values("start_us", kind="stable").reset_index(drop=True)


def assign_steps(times: np.ndarray, step_spans: pd.DataFrame) -> np.ndarray:
    """Index of the step span that holds each time, -1 outside every span (0 for all when none)."""
    if not len(step_spans):
        return np.zeros(len(times), dtype=np.int64)
    starts = step_spans["start_us"].to_numpy()
    ends = step_spans["end_us"].to_numpy()
    index = np.searchsorted(starts, times, side="right") - 1
    inside = (index >= 0) & (times <= ends[np.clip(index, 0, None)])
    return np.where(inside, index, -1).astype(np.int64)


def _ints(values: tuple | list) -> np.ndarray:
    """Integer column (stream, device, tid, pid); a missing or non-numeric value becomes -1."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").fillna(-1).to_numpy(np.int64)


def _floats(values: tuple | list) -> np.ndarray:
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value) if value else None


def _blocks(grid: tuple[int, ...] | None) -> float:
    if not grid:
        return np.nan
    product = 1
    for size in grid:
        product *= size
    return float(product)


_DEVICE_FIELDS = ("name", "ts", "dur", "stream", "device", "correlation", "regs", "grid", "block", "cat")
_KIND = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def _device_frame(rows: list[tuple], launches: dict[str, list], step_spans: pd.DataFrame) -> pd.DataFrame:
    columns = dict(zip(_DEVICE_FIELDS, zip(*rows))) if rows else {f: () for f in _DEVICE_FIELDS}
    ts = _floats(columns["ts"])
    dur = _floats(columns["dur"])
    corr = _ints(columns["correlation"])
    grid = [_shape(g) for g in columns["grid"]]
    regs = [np.nan if r is None else r for r in columns["regs"]]
    frame = pd.DataFrame(
        {
            "name": list(columns["name"]),
            "ts_us": ts,
            "dur_us": dur,
            "end_us": ts + dur,
            "stream": _ints(columns["stream"]),
            "device": _ints(columns["device"]),
            "correlation": corr,
            "grid": pd.Series(grid, dtype=object),
            "block": pd.Series([_shape(b) for b in columns["block"]], dtype=object),
            "registers_per_thread": _floats(regs),
            "blocks": np.array([_blocks(g) for g in grid], dtype=np.float64),
            "kind": [_KIND[c] for c in columns["cat"]],
        }
    )
    categories = {name: classify_kernel(name) for name in set(columns["name"])}
    frame["category"] = frame["name"].map(categories).astype(object)
    frame.loc[frame["kind"] != "kernel", "category"] = MEMCPY
    launch_ts = ts.copy()
    if launches["correlation"] and len(frame):
        table = pd.Series(_floats(launches["ts"]), index=_ints(launches["correlation"]))
        table = table[~table.index.duplicated()]
        position = table.index.get_indexer(corr)
        found = (position >= 0) & (corr >= 0)
        launch_ts[found] = table.to_numpy()[position[found]]
    frame["launch_ts_us"] = launch_ts
    frame["step"] = assign_steps(launch_ts, step_spans)
    return frame.sort_values("ts_us", kind="stable").reset_index(drop=True)


def _cpu_frame(rows: list[tuple], step_spans: pd.DataFrame, optimizer: list[dict]) -> pd.DataFrame:
    """cpu_op rows; top-level aten ops inside an ``Optimizer.step#`` span are category optimizer."""
    names, ts, dur, tid, pid = zip(*rows) if rows else ((), (), (), (), ())
    frame = pd.DataFrame(
        {
            "name": list(names),
            "ts_us": _floats(ts),
            "dur_us": _floats(dur),
            "tid": _ints(tid),
            "pid": _ints(pid),
        }
    )
    frame["end_us"] = frame["ts_us"] + frame["dur_us"]
    frame["top_level"] = _top_level_aten(frame)
    categories = {name: classify_cpu_op(name) for name in set(names)}
    frame["category"] = frame["name"].map(categories).astype(object)
    frame["step"] = assign_steps(frame["ts_us"].to_numpy(), step_spans)
    for span in optimizer:
        start, span_tid = float(span["ts"]), _ints([span.get("tid")])[0]
        inside = (frame["tid"] == span_tid) & (frame["ts_us"] >= start)
        inside &= frame["end_us"] <= start + float(span.get("dur", 0.0))
        frame.loc[inside & frame["top_level"], "category"] = OPTIMIZER
    return frame.sort_values("ts_us", kind="stable").reset_index(drop=True)


def _top_level_aten(frame: pd.DataFrame) -> np.ndarray:
    """True for aten:: ops not nested inside another aten:: op on the same thread."""
    is_aten = frame["name"].str.startswith("aten::").to_numpy(dtype=bool)
    result = np.zeros(len(frame), dtype=bool)
    if not is_aten.any():
        return result
    aten = frame.loc[is_aten, ["tid", "ts_us", "end_us"]]
    aten = aten.assign(neg_end=-aten["end_us"]).sort_values(["tid", "ts_us", "neg_end"], kind="stable")
    tid = aten["tid"].to_numpy()
    start = aten["ts_us"].to_numpy()
    end = aten["end_us"].to_numpy()
    # running max of the ends of earlier aten ops on the same thread: an op starting before it is nested
    reach = pd.Series(end).groupby(tid).cummax().to_numpy()
    previous = np.empty_like(reach)
    previous[0] = -np.inf
    previous[1:] = reach[:-1]
    first_of_thread = np.ones(len(tid), dtype=bool)
    first_of_thread[1:] = tid[1:] != tid[:-1]
    previous[first_of_thread] = -np.inf
    top = (start >= previous) | first_of_thread
    result[frame.index.get_indexer(aten.index)] = top
    return result
