"""Notebook 01 (baseline profile at kernel level): which trace to read, tables, the utilization sentence.

The notebook profiles the unoptimized step (``TRACE_SOURCE="run"``) or studies the H200 trace shipped in
``data/`` without running a model (``TRACE_SOURCE="shipped"``; when that file is absent it says so and
falls back to a local run plus the H200 numbers recorded in ``benchmarks/gpu``). Every number shown comes
from a record or a trace; nothing here is hard-coded.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.resources import DATA_DIR
from nbhelpers.validation import ConfigError
from nbhelpers.views.report import MISSING, _missing

NOTEBOOK = "01_baseline_profile.ipynb"
TRACE_SOURCES = ("run", "shipped")
SHIPPED_TRACE_NAME = "h200_qwen3-1.7b_baseline.trace.json.gz"
BASELINE_LABEL = "baseline"
SHORT_US = 10.0

# ----------------------------------------------------------------------------------------------
# Number formats


def fmt_pct(value: Any) -> str:
    """A fraction as a percentage: one decimal from 1%, two significant digits below (0.02%)."""
    if _missing(value):
        return MISSING
    percent = 100.0 * float(value)
    if percent == 0:
        return "0%"
    if abs(percent) >= 1:
        return f"{percent:.1f}%"
    return f"{percent:.2g}%"


def fmt_num(value: Any, decimals: int = 0) -> str:
    """A number with thousands separators (``decimals`` after the point)."""
    if _missing(value):
        return MISSING
    return f"{float(value):,.{decimals}f}"


def fmt_per_step(value: Any) -> str:
    """A count per step: whole numbers as such (6,633), fractions of a count with one decimal (4.5)."""
    if _missing(value):
        return MISSING
    value = float(value)
    return fmt_num(value, 0 if value.is_integer() else 1)


def fmt_us(value: Any) -> str:
    """A duration given in microseconds, in the unit that reads best (us, ms or s)."""
    if _missing(value):
        return MISSING
    value = float(value)
    if abs(value) >= 1e6:
        return f"{value / 1e6:,.2f} s"
    if abs(value) >= 1e3:
        return f"{value / 1e3:,.1f} ms"
    return f"{value:,.1f} us"


# ----------------------------------------------------------------------------------------------
# Parameters and the choice of trace


def check_trace_source(value: Any) -> str:
    """``value`` when it is one of TRACE_SOURCES, else ConfigError naming TRACE_SOURCE."""
    if value not in TRACE_SOURCES:
        raise ConfigError("TRACE_SOURCE", value, "one of " + ", ".join(repr(s) for s in TRACE_SOURCES))
    return value


def shipped_trace_path(data_dir: str | Path | None = None) -> Path | None:
    """``data/h200_qwen3-1.7b_baseline.trace.json.gz`` when this copy of the workbook has it, else None."""
    path = Path(data_dir if data_dir is not None else DATA_DIR) / SHIPPED_TRACE_NAME
    return path if path.is_file() else None


def baseline_config(
    run_name: str,
    model: str,
    dataset: str,
    batch_size: int,
    max_length: int,
    padding: str,
    steps: int,
    warmup: int,
    **overrides: Any,
) -> RunConfig:
    """The unoptimized step: eager kernels, SDPA, the given padding, profiled (one step in the trace)."""
    values = dict(
        run_name=run_name, label=BASELINE_LABEL, model=model, dataset=dataset, batch_size=batch_size,
        max_length=max_length, padding=padding, steps=steps, warmup=warmup, kernels="eager", profile=True,
    )  # fmt: skip
    return RunConfig(**(values | overrides))


@dataclass(frozen=True)
class TracePlan:
    """What the notebook will do: run the model here or not, and whose trace it analyses."""

    requested: str  # TRACE_SOURCE as given
    source: str  # "run" (this machine's trace) or "shipped" (the recorded H200 trace)
    shipped_path: Path | None  # the shipped trace, None when absent
    message: str  # one paragraph for the reader

    @property
    def run_model(self) -> bool:
        return self.source == "run"

    @property
    def fell_back(self) -> bool:
        return self.requested == "shipped" and self.source == "run"


def plan_trace(trace_source: str, config: RunConfig, shipped: str | Path | None = None) -> TracePlan:
    """Decide between profiling here and reading the shipped trace; the message says which and why."""
    from nbhelpers.measure.env import resolve_device

    check_trace_source(trace_source)
    path = Path(shipped) if shipped is not None else shipped_trace_path()
    path = path if path is not None and path.is_file() else None
    device = resolve_device(config.device)
    local = (
        f"the baseline `{config.name}` runs here on **{device}** in its own process: {config.warmup} warm-up "
        f"step(s), {config.steps} timed step(s), then one profiled step"
    )
    if trace_source == "run":
        return TracePlan(trace_source, "run", path, f"**Trace source: this run.** {local.capitalize()}.")
    if path is not None:
        return TracePlan(
            trace_source, "shipped", path,
            f"**Trace source: the shipped H200 trace** `{path.name}` (no model runs here). Section 1 shows the "
            "record it was captured with, from `benchmarks/gpu`.",
        )  # fmt: skip
    wanted = DATA_DIR / SHIPPED_TRACE_NAME if shipped is None else Path(shipped)
    return TracePlan(
        trace_source, "run", None,
        f"**The shipped H200 trace is absent:** `{wanted}` is not in this copy of the workbook, so there is no "
        f"GPU trace to analyse. Falling back: {local}, and section 5 shows the H200 summary numbers recorded "
        "in `benchmarks/gpu`.",
    )  # fmt: skip


def trace_for(source: str, record: RunRecord | None, shipped: str | Path | None = None) -> Path | None:
    """The trace to analyse: the shipped one when ``source == "shipped"`` and it exists, else the run's.

    ``shipped`` defaults to :func:`shipped_trace_path`. None when neither exists (a failed run, no trace).
    """
    check_trace_source(source)
    if source == "shipped":
        path = Path(shipped) if shipped is not None else shipped_trace_path()
        if path is not None and path.is_file():
            return path
    if record is not None and record.ok and record.artifacts.get("trace"):
        path = Path(record.artifacts["trace"])
        if path.is_file():
            return path
    return None


# ----------------------------------------------------------------------------------------------
# Section 1: the baseline record


def baseline_record(config: RunConfig, plan: TracePlan, notebook: str = NOTEBOOK) -> RunRecord | None:
    """Run the baseline in its own process (plan.run_model), else the H200 baseline record (or None)."""
    if plan.run_model:
        from nbhelpers.measure.runner import run_config

        return run_config(config, notebook=notebook)
    return gpu_baseline_record()


def _metric(record: RunRecord, key: str) -> Any:
    value = record.metrics.get(key)
    return None if isinstance(value, bool) else value


def _unit(text: str, unit: str) -> str:
    return text if text == MISSING else f"{text} {unit}"


def key_metrics(record: RunRecord | None) -> Any:
    """The record's headline numbers as a two-column table (measure, value), titled by its machine."""
    import pandas as pd

    if record is None:
        return pd.DataFrame({"measure": ["record"], "value": ["none: no run here and no H200 record found"]})
    rows: list[tuple[str, str]] = [("configuration", record.label), ("machine", record.machine)]
    if not record.ok:
        rows += [("status", record.status), ("reason", record.reason)]
        return pd.DataFrame(rows, columns=["measure", "value"])
    m = record.metrics
    cfg = record.config
    times = m.get("step_times_s") or []
    spread = (
        f"IQR {fmt_num(_metric(record, 'step_time_iqr_s'), 3)} s, min {fmt_num(_metric(record, 'step_time_min_s'), 3)}"
        f" s, max {fmt_num(_metric(record, 'step_time_max_s'), 3)} s over {len(times) or m.get('timed_batches', '?')}"
        " timed step(s)"
    )
    peak = _metric(record, "peak_flops")
    memory_source = m.get("peak_memory_source", "source not recorded")
    peak_source = m.get("peak_flops_source", "source not recorded")
    rows += [
        ("model / batch", f"{cfg.get('model')} · {cfg.get('batch_size')} x {cfg.get('max_length')} · "
                          f"padding {cfg.get('padding')} · {cfg.get('attn_implementation')} · "
                          f"{m.get('compute_dtype') or cfg.get('dtype')}"),
        ("real tokens / s", fmt_num(_metric(record, "real_tokens_per_s"), 1)),
        ("step time, median", _unit(fmt_num(_metric(record, "step_time_median_s"), 3), "s")),
        ("step time, spread", spread),
        ("first step (incl. start-up)", _unit(fmt_num(_metric(record, "first_step_s"), 2), "s")),
        ("positions / step (padded)", fmt_per_step(_metric(record, "positions_per_step"))),
        ("real tokens / step", fmt_per_step(_metric(record, "real_tokens_per_step"))),
        ("loss tokens / step", fmt_per_step(_metric(record, "loss_tokens_per_step"))),
        ("padding fraction", fmt_pct(_metric(record, "padding_fraction"))),
        ("peak memory", _unit(fmt_num(_metric(record, "peak_memory_gib"), 2), f"GiB ({memory_source})")),
        ("MFU", fmt_pct(_metric(record, "mfu"))),
        ("peak FLOP/s", _unit(fmt_num(peak / 1e12 if peak else None, 3), f"TFLOP/s ({peak_source})")),
        ("kernels / step (profiled)", fmt_per_step(_metric(record, "kernels_per_step"))),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["measure", "value"])


# ----------------------------------------------------------------------------------------------
# Section 2: the trace


def load_trace_for(source: str, record: RunRecord | None, shipped: str | Path | None = None) -> Any:
    """The :class:`~nbhelpers.profiling.parse.Trace` that :func:`trace_for` picks, or None without one."""
    from nbhelpers.profiling.parse import load_trace

    path = trace_for(source, record, shipped)
    return load_trace(path) if path is not None else None


def _no_trace() -> Any:
    from IPython.display import Markdown

    return Markdown(
        "**No trace to analyse**: the baseline run failed (its reason is in section 1) and no shipped trace "
        'was used. Lower `BATCH_SIZE` or `MAX_LENGTH`, or set `TRACE_SOURCE = "shipped"`.'
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
    from nbhelpers.profiling.analyze import launches_per_step

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

    from nbhelpers.profiling.analyze import launches_per_step, short_kernels

    short = short_kernels(trace, short_us).iloc[0]
    busy = float(trace.ops["dur_us"].sum()) / trace.num_steps
    row = {
        "unit": trace.unit,
        "device": _trace_device(trace),
        "profiled steps": trace.num_steps,
        "launches / step": fmt_per_step(launches_per_step(trace)),
        f"< {short_us:g} us: share of launches": fmt_pct(short["share_of_launches"]),
        f"< {short_us:g} us: share of time": fmt_pct(short["share_of_time"]),
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
    from nbhelpers.profiling.analyze import category_summary

    frame = category_summary(trace)
    shown = frame.assign(
        launches_per_step=frame["launches_per_step"].map(fmt_per_step),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_pct),
        share_of_launches=frame["share_of_launches"].map(fmt_pct),
        mean_duration=frame["mean_us"].map(fmt_us),
    )[["category", "launches_per_step", "share_of_launches", "time_per_step", "share_of_time", "mean_duration"]]
    shown.attrs["unit"] = frame.attrs.get("unit")
    return shown


@needs_trace
def short_table(trace: Any, short_us: float = SHORT_US) -> Any:
    """``analyze.short_kernels`` for display: short vs long launches, their shares of launches and time."""
    from nbhelpers.profiling.analyze import short_kernels

    frame = short_kernels(trace, short_us)
    return frame.assign(
        launches_per_step=frame["launches_per_step"].map(fmt_per_step),
        share_of_launches=frame["share_of_launches"].map(fmt_pct),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_pct),
    )[["duration", "launches_per_step", "share_of_launches", "time_per_step", "share_of_time"]]


@needs_trace
def top_table(trace: Any, n: int = 15) -> Any:
    """``analyze.top_kernels`` for display: the names with the most time, with calls per step and mean."""
    from nbhelpers.profiling.analyze import top_kernels

    frame = top_kernels(trace, n)
    return frame.assign(
        name=frame["name"].map(_shorten),
        calls_per_step=frame["calls_per_step"].map(fmt_per_step),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        mean_duration=frame["mean_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_pct),
    )[["name", "category", "calls_per_step", "time_per_step", "mean_duration", "share_of_time"]]


# ----------------------------------------------------------------------------------------------
# Section 3: utilization vs MFU


def profiled_flops(metrics: Mapping[str, Any]) -> float | None:
    """Model FLOPs of the profiled step: recorded as such, else recovered from the record's trace MFU (which
    the run computed with them), else the mean over the timed steps."""
    if metrics.get("trace_model_flops_per_step"):
        return float(metrics["trace_model_flops_per_step"])
    mfu, peak, step_us = (metrics.get(k) for k in ("trace_mfu", "peak_flops", "trace_step_time_us"))
    if mfu and peak and step_us:
        return float(mfu) * float(peak) * float(step_us) / 1e6
    value = metrics.get("model_flops_per_step")
    return float(value) if value else None


def trace_summary(trace: Any, record: RunRecord | None) -> dict[str, Any] | None:
    """``analyze.summarize`` of the trace with the record's model FLOPs per step and peak FLOP/s (for MFU)."""
    if trace is None:
        return None
    from nbhelpers.profiling.analyze import summarize

    metrics = record.metrics if record is not None and record.ok else {}
    peak = metrics.get("peak_flops")
    flops = profiled_flops(metrics)
    summary = summarize(trace, model_flops_per_step=flops, peak_flops=peak, short_threshold_us=SHORT_US)
    summary["peak_flops"] = peak
    summary["peak_flops_source"] = metrics.get("peak_flops_source")
    summary["trace_path"] = trace.source
    if record is not None:
        summary["machine"] = record.machine
    return summary


def _plain(summary: Any) -> dict[str, Any]:
    """A summary as a dict with ``trace_`` prefixes dropped (summarize dicts, record metrics, rows)."""
    if summary is None:
        return {}
    if dataclasses.is_dataclass(summary) and not isinstance(summary, type):
        data = dataclasses.asdict(summary)
    elif isinstance(summary, Mapping):
        data = dict(summary)
    elif hasattr(summary, "to_dict"):  # a pandas Series (one row of gpu_baseline_summary)
        data = dict(summary.to_dict())
    else:
        raise TypeError(f"cannot read a utilization summary from {type(summary).__name__}")
    plain = {}
    for key, value in data.items():
        key = str(key)
        plain.setdefault(key[len("trace_") :] if key.startswith("trace_") else key, value)
    return plain


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def interpret_utilization(summary: Any) -> str:
    """One sentence with the numbers: nominal utilization beside SM efficiency and MFU, and what the gap means.

    ``summary`` is a dict of ``analyze.summarize`` (or a record's metrics with ``trace_`` keys, a row of
    :func:`gpu_baseline_summary`, a ``Utilization``). Keys used: nominal_utilization, mfu,
    sm_efficiency_estimate, unit, device, launches_per_step, short_share_of_launches, short_share_of_time,
    short_threshold_us, peak_flops_source; missing ones are said to be missing, never guessed.
    """
    s = _plain(summary)
    nominal = _number(s.get("nominal_utilization"))
    mfu = _number(s.get("mfu"))
    sm = _number(s.get("sm_efficiency_estimate"))
    unit = str(s.get("unit") or "")
    gpu = "GPU" in unit or (sm is not None)
    device = s.get("device") or s.get("machine")
    lead = f"On {device}, " if device and str(device).lower() != "cpu" else ("On this CPU, " if not gpu else "")
    if nominal is None:
        return lead + "nominal utilization is unknown: the summary has no busy and wall time."
    if gpu:
        text = f"{lead}nominal GPU utilization was {fmt_pct(nominal)} (busy time over wall time, what nvidia-smi shows)"
        if sm is not None:
            text += f" and the SM-efficiency estimate {fmt_pct(sm)} (share of SMs the kernels' grids can occupy)"
        else:
            text += " with no SM-efficiency estimate (the trace has no SM count or grids)"
    else:
        text = (
            f"{lead}aten operators were running {fmt_pct(nominal)} of the step's wall time (the CPU stand-in for "
            "nominal GPU utilization; SM efficiency does not exist on a CPU)"
        )
    source = s.get("peak_flops_source")
    peak_note = f" (peak: {source})" if source else ""
    if mfu is None:
        text += (
            ", but MFU is unknown (no model FLOPs or peak FLOP/s for this trace), so busy time cannot be "
            "compared with useful work"
        )
    elif mfu > 1:
        text += (
            f", but MFU came out at {fmt_pct(mfu)}{peak_note}, above 100%: the model FLOPs or the peak given do "
            "not belong to this trace, so no conclusion about useful work can be drawn from it"
        )
    elif mfu > 0 and nominal >= 0.8 and mfu < 0.5 * nominal:
        text += (
            f", yet MFU was only {fmt_pct(mfu)}{peak_note}: the device was busy {nominal / mfu:,.0f}x as long as "
            "its useful model FLOPs would take at peak, so a high utilization figure here means busy, not productive"
        )
    elif nominal < 0.8:
        text += (
            f", and MFU was {fmt_pct(mfu)}{peak_note}: nothing ran for {fmt_pct(1 - nominal)} of the step, time "
            "lost on the host side (Python, kernel launches, data) before any kernel is even slow"
        )
    else:
        text += f", and MFU was {fmt_pct(mfu)}{peak_note}, close to what the utilization figure suggests"
    launches = _number(s.get("launches_per_step"))
    if launches is not None:
        noun = "kernel launches" if gpu else "aten operators"
        text += f"; the step ran {fmt_per_step(launches)} {noun}"
        short_launches = _number(s.get("short_share_of_launches"))
        short_time = _number(s.get("short_share_of_time"))
        if short_launches is not None and short_time is not None:
            threshold = _number(s.get("short_threshold_us")) or SHORT_US
            text += (
                f", {fmt_pct(short_launches)} of them shorter than {threshold:g} us, which together took "
                f"{fmt_pct(short_time)} of the {'kernel' if gpu else 'operator'} time"
            )
    top = _top_category(s)
    if top is not None:
        name, top_launches, top_share = top
        text += (
            f"; the largest category was {name}, {fmt_per_step(top_launches)} "
            f"{_plural(top_launches, 'launch' if gpu else 'operator')} per step and "
            f"{fmt_pct(top_share)} of the {'kernel' if gpu else 'operator'} time"
        )
    return text + "."


def _plural(count: float | None, noun: str) -> str:
    """``noun`` for exactly one, else its plural (launch -> launches, operator -> operators)."""
    if count == 1:
        return noun
    return noun + ("es" if noun.endswith("ch") else "s")


def _top_category(s: Mapping[str, Any]) -> tuple[str, float | None, float | None] | None:
    """(name, launches per step, share of time) of the largest category, from a summary or a flat row."""
    top = s.get("top_categories")
    if isinstance(top, list) and top and isinstance(top[0], Mapping) and top[0].get("category"):
        first = top[0]
        return str(first["category"]), _number(first.get("launches_per_step")), _number(first.get("share_of_time"))
    if s.get("top_category"):
        return (
            str(s["top_category"]),
            _number(s.get("top_category_launches_per_step")),
            _number(s.get("top_category_share_of_time")),
        )
    return None


def utilization_table(summary: Mapping[str, Any] | None) -> Any:
    """Nominal utilization, SM-efficiency estimate, MFU, idle share and step time, with what each measures."""
    import pandas as pd

    if summary is None:
        return _no_trace()
    s = _plain(summary)
    gpu = s.get("sm_efficiency_estimate") is not None or "GPU" in str(s.get("unit", ""))
    what = "kernel" if gpu else "aten operator"
    peak = s.get("peak_flops")
    rows = [
        ("nominal utilization", fmt_pct(s.get("nominal_utilization")),
         f"share of wall time with any {what} running (what nvidia-smi calls GPU utilization)"),
        ("SM-efficiency estimate", fmt_pct(s.get("sm_efficiency_estimate")),
         "time-weighted share of SMs each kernel's grid can occupy" if gpu else "no SMs on a CPU: not defined"),
        ("MFU (profiled step)", fmt_pct(s.get("mfu")),
         "useful model FLOPs per second over the peak"
         + (f" ({fmt_num(peak / 1e12, 3)} TFLOP/s, {s.get('peak_flops_source')})" if peak else "")),
        ("idle share", fmt_pct(s.get("idle_share")), f"share of wall time with no {what} running"),
        ("step time (profiled)", fmt_us(s.get("step_time_us")), "wall time of one profiled step"),
        (f"{what}s / step", fmt_per_step(s.get("launches_per_step")), "launches (GPU) or top-level operators (CPU)"),
    ]  # fmt: skip
    return pd.DataFrame(rows, columns=["measure", "value", "what it measures"])


# ----------------------------------------------------------------------------------------------
# Section 4: plots (HoloViews)


@needs_trace
def category_plot(trace: Any) -> Any:
    """Time per step by category (``trace_plots.category_bars``)."""
    from nbhelpers.profiling.analyze import category_summary
    from nbhelpers.profiling.plots import category_bars

    return category_bars(category_summary(trace))


@needs_trace
def duration_plots(trace: Any, bins: int = 30) -> Any:
    """Durations on a log axis, counted by launches and weighted by time (``trace_plots.duration_histogram``)."""
    from nbhelpers.profiling.plots import duration_histogram

    return (duration_histogram(trace, bins, "launches") + duration_histogram(trace, bins, "time_us")).cols(1)


@needs_trace
def timeline_plot(trace: Any, step_index: int = 0) -> Any:
    """One profiled step as a timeline, one lane per stream or thread (``trace_plots.step_timeline_plot``)."""
    from nbhelpers.profiling.plots import step_timeline_plot

    return step_timeline_plot(trace, step_index)


# ----------------------------------------------------------------------------------------------
# Section 5: the H200 view from the committed records


def _is_gpu_baseline(record: RunRecord) -> bool:
    return record.ok and record.kind == "step" and record.label.lower().startswith(BASELINE_LABEL)


def load_jsonl_records(folder: str | Path | None = None) -> list[RunRecord]:
    """Every RunRecord line of ``folder/*.jsonl`` (default: the repo's benchmarks/gpu), files in name order.

    Each record's ``artifacts["source"]`` names its file; lines that are not run records are skipped.
    """
    import json

    from .gpu_results import GPU_RESULTS_DIR

    root = Path(folder) if folder is not None else GPU_RESULTS_DIR
    records = []
    for path in sorted(root.glob("*.jsonl")) if root.is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                data = json.loads(line) if line.strip() else None
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and "config" in data:
                record = RunRecord.from_dict(data)
                record.artifacts = {**record.artifacts, "source": path.name}
                records.append(record)
    return records


def gpu_baseline_record(folder: str | Path | None = None) -> RunRecord | None:
    """The committed H200 baseline: the newest ok step record labelled "baseline…" (files in name order),
    one with trace numbers first; the newest is the one whose trace is shipped in ``data/``."""
    candidates = [r for r in load_jsonl_records(folder) if _is_gpu_baseline(r)]
    with_trace = [r for r in candidates if r.metrics.get("trace_launches_per_step") is not None]
    return (with_trace or candidates or [None])[-1]


SUMMARY_COLUMNS = (
    "launches_per_step", "short_share_of_launches", "short_share_of_time", "nominal_utilization",
    "sm_efficiency_estimate", "mfu", "step_time_us", "kernel_time_per_step_us", "memcpy_launches_per_step",
    "idle_share", "num_sms", "unit",
)  # fmt: skip


def machine_label(environment: Mapping[str, Any]) -> str:
    """``NVIDIA H200 · torch 2.11.0 · transformers 5.17.0 · CUDA 13.0`` from a record's environment."""
    parts = [str(environment.get("device_name") or "unknown device")]
    for key, name in (("torch", "torch"), ("transformers", "transformers"), ("cuda", "CUDA")):
        if environment.get(key):
            parts.append(f"{name} {environment[key]}")
    return " · ".join(parts)


def gpu_baseline_summary(folder: str | Path | None = None) -> Any:
    """The committed H200 baseline's trace numbers, one row labelled with its machine and versions.

    Reads ``benchmarks/gpu/*.jsonl`` (or ``folder``); an empty frame when no ok "baseline…" record exists.
    Columns: machine, configuration, model/batch, the ``trace_*`` metrics without their prefix, the timed
    MFU and throughput, the peak FLOP/s source and the file.
    """
    import pandas as pd

    record = gpu_baseline_record(folder)
    if record is None:
        return pd.DataFrame(columns=["machine", "configuration", *SUMMARY_COLUMNS])
    m, cfg, env = record.metrics, record.config, record.environment
    row: dict[str, Any] = {
        "machine": machine_label(env),
        "device": env.get("device_name"),
        "configuration": record.label,
        "model": cfg.get("model"),
        "batch": f"{cfg.get('batch_size')} x {cfg.get('max_length')}",
        "torch": env.get("torch"),
        "transformers": env.get("transformers"),
    }
    row.update({key: m.get(f"trace_{key}") for key in SUMMARY_COLUMNS})
    row.update(
        {
            "mfu_timed": m.get("mfu"),
            "real_tokens_per_s": m.get("real_tokens_per_s"),
            "peak_flops_source": m.get("peak_flops_source"),
            "short_threshold_us": m.get("trace_short_threshold_us", SHORT_US),
            "source": record.artifacts.get("source", ""),
        }
    )
    top = _top_category({"top_categories": m.get("trace_top_categories")})
    if top is not None:
        row |= dict(zip(("top_category", "top_category_launches_per_step", "top_category_share_of_time"), top))
    return pd.DataFrame([row], index=[row["machine"]])


def gpu_baseline_categories(folder: str | Path | None = None) -> Any:
    """The committed H200 baseline's top kernel categories (time and launches per step, share of time)."""
    import pandas as pd

    record = gpu_baseline_record(folder)
    top = (record.metrics.get("trace_top_categories") or []) if record is not None else []
    frame = pd.DataFrame(top, columns=["category", "launches_per_step", "time_per_step_us", "share_of_time"])
    return frame.assign(
        launches_per_step=frame["launches_per_step"].map(fmt_per_step),
        time_per_step=frame["time_per_step_us"].map(fmt_us),
        share_of_time=frame["share_of_time"].map(fmt_pct),
    )[["category", "launches_per_step", "time_per_step", "share_of_time"]]


def describe_gpu_baseline(gpu: Any) -> str:
    """Markdown: the H200 baseline's utilization sentence, or where no record was found."""
    from .gpu_results import GPU_RESULTS_DIR

    if gpu is None or len(gpu) == 0:
        return (
            f"**No H200 baseline record** in `{GPU_RESULTS_DIR}` (no ok step record labelled `baseline…`): "
            "this section has nothing to show."
        )
    row = gpu.iloc[0]
    return f"**{row['machine']}** (`{row['source']}`): " + interpret_utilization(row)


def compare_with_gpu(summary: Mapping[str, Any] | None, gpu: Any) -> Any:
    """This run's trace numbers beside the H200 baseline's, one column each, labelled with the machine."""
    import pandas as pd

    rows = [
        ("unit", "unit", str),
        ("launches / step", "launches_per_step", fmt_per_step),
        ("< 10 us: share of launches", "short_share_of_launches", fmt_pct),
        ("< 10 us: share of time", "short_share_of_time", fmt_pct),
        ("nominal utilization", "nominal_utilization", fmt_pct),
        ("SM-efficiency estimate", "sm_efficiency_estimate", fmt_pct),
        ("MFU (profiled step)", "mfu", fmt_pct),
        ("step time (profiled)", "step_time_us", fmt_us),
    ]
    columns: dict[str, list[str]] = {}
    sources: list[tuple[str, dict[str, Any]]] = []
    if summary is not None:
        s = _plain(summary)
        sources.append((f"this notebook's trace ({s.get('machine') or s.get('device') or 'unknown device'})", s))
    if gpu is not None and len(gpu):
        row = _plain(gpu.iloc[0])
        sources.append((f"committed baseline ({row['machine']})", row))
    for name, values in sources:
        columns[name] = [MISSING if _missing(values.get(key)) else fmt(values.get(key)) for _, key, fmt in rows]
    return pd.DataFrame(columns, index=[label for label, _, _ in rows])


# ----------------------------------------------------------------------------------------------
# Section 6: records


def trace_record(
    run_name: str, summary: Mapping[str, Any], source_record: RunRecord | None, notebook: str = NOTEBOOK
) -> RunRecord:
    """A record of kind "trace" holding a shipped trace's summary, on the machine that recorded it."""
    config = dict(source_record.config) if source_record is not None else {}
    label = f"shipped trace: {source_record.label if source_record is not None else Path(summary['trace_path']).name}"
    environment = dict(source_record.environment) if source_record is not None else {}
    environment.setdefault("device_name", summary.get("device") or "unknown device")
    environment.setdefault("hostname", "shipped trace")
    metrics = {f"trace_{k}": v for k, v in summary.items() if k not in ("trace_path", "peak_flops_source")}
    metrics |= {
        "kernels_per_step": summary.get("launches_per_step"),
        "peak_flops_source": summary.get("peak_flops_source"),
    }
    return RunRecord(
        config=config | {"run_name": run_name, "label": label},
        kind="trace",
        notebook=notebook,
        metrics=metrics,
        environment=environment,
        artifacts={"trace": str(summary.get("trace_path") or "")},
    )


def write_records(
    run_name: str,
    plan: TracePlan,
    record: RunRecord | None,
    summary: Mapping[str, Any] | None,
    notebook: str = NOTEBOOK,
) -> Any:
    """Append what this notebook made to ``RunStore.for_run(run_name)``; a table of what was written.

    The run's record when the baseline ran here (failed ones too); with a shipped trace analysed, a
    record of kind "trace" with its summary. The H200 step record is not copied: it was not measured here.
    """
    import pandas as pd

    store = RunStore.for_run(run_name)
    written: list[RunRecord] = []
    if plan.run_model and record is not None:
        written.append(store.append(record))
    if plan.source == "shipped" and summary is not None:
        written.append(store.append(trace_record(run_name, summary, record, notebook)))
    frame = pd.DataFrame(
        [
            {
                "kind": r.kind,
                "label": r.label,
                "status": r.status,
                "machine": r.machine,
                "kernels/step": fmt_per_step(r.metrics.get("kernels_per_step")),
                "record_id": r.record_id,
            }
            for r in written
        ],
        columns=["kind", "label", "status", "machine", "kernels/step", "record_id"],
    )
    frame.attrs["store"] = str(store.path)
    return frame
