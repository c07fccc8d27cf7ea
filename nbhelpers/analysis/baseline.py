"""The baseline study (notebook 01): the unoptimized step, which trace to read, the H200 baseline, records.

The notebook profiles the unoptimized step (``TRACE_SOURCE="run"``) or studies the H200 trace shipped in
``data/`` without running a model (``TRACE_SOURCE="shipped"``; when that file is absent it says so and
falls back to a local run plus the H200 numbers recorded in ``benchmarks/gpu``). The trace's tables, plots
and utilization sentence are ``profiling.tables``, ``profiling.plots`` and ``profiling.verdict``. Every
number shown comes from a record or a trace; nothing here is hard-coded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.analysis.records import metric_value
from nbhelpers.analysis.references import VS_REFERENCE, VS_WITHOUT, both_references, without_workbook_config
from nbhelpers.formatting import MISSING, fmt_num, fmt_per_step, fmt_percent, fmt_us, is_missing
from nbhelpers.measure.advice import advice_for, raise_if_failed
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.measure.workload import ADAPTER_NAMES, DATA_NAMES, Workload, workload_from
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.profiling.analyze import SHORT_US
from nbhelpers.profiling.verdict import interpret_utilization, plain_summary, top_category
from nbhelpers.resources import DATA_DIR
from nbhelpers.validation import ConfigError

NOTEBOOK = "01_baseline_profile.ipynb"
TRACE_SOURCES = ("run", "shipped")
SHIPPED_TRACE_NAME = "h200_qwen3-1.7b_baseline.trace.json.gz"
BASELINE_LABEL = "baseline"

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


# The parameters of notebook 01 its baseline's RunConfig takes (the rest choose the trace and what is shown).
WORKLOAD = (
    "RUN_NAME", "MODEL", *DATA_NAMES, "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES", "STEPS", "WARMUP", "TIMING",
    "PADDING", *ADAPTER_NAMES, "ACTIVATION_CHECKPOINTING", "DTYPE", "GPU_MEMORY_GIB",
)  # fmt: skip


def setup_workload(parameters: Mapping[str, Any]) -> Workload:
    """Notebook 01's baseline from its parameters (``globals()``): :func:`baseline_config`'s unoptimized step on
    the workload they name, refused at once with the parameter named when a value is not allowed."""
    return workload_from(parameters, WORKLOAD, label=BASELINE_LABEL, kernels="eager", profile=True)


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
# The baseline record


def baseline_record(config: RunConfig, plan: TracePlan, notebook: str = NOTEBOOK) -> RunRecord | None:
    """Run the baseline in its own process (plan.run_model), else the H200 baseline record (or None)."""
    if plan.run_model:
        from nbhelpers.measure.runner import run_config

        RunStore.for_run(config.run_name).check_writable()  # fail before measuring, not after
        return run_config(config, notebook=notebook)
    return gpu_baseline_record()


def without_workbook_record(config: RunConfig, plan: TracePlan, notebook: str = NOTEBOOK) -> RunRecord | None:
    """The baseline's workload as a user runs it without the workbook (TRL's defaults on the model as transformers
    binds it: :mod:`nbhelpers.analysis.references`), in its own process; None when the baseline does not run here."""
    if not plan.run_model:
        return None
    from nbhelpers.measure.runner import run_config

    return run_config(without_workbook_config(config), notebook=notebook)


REFERENCE_COLUMNS = ("label", "engine", "real tok/s", VS_REFERENCE, f"{VS_REFERENCE} interval", VS_WITHOUT,
                     f"{VS_WITHOUT} interval", "note")  # fmt: skip


def references_table(record: RunRecord | None, without: RunRecord | None) -> Any:
    """The baseline and "without the workbook" side by side, each over both references; a row that could not be
    measured is left out and the note says why."""
    from nbhelpers.formatting import format_table

    frame = both_references([r for r in (record, without) if r is not None])
    return format_table(frame[list(REFERENCE_COLUMNS)])


def _unit(text: str, unit: str) -> str:
    return text if text == MISSING else f"{text} {unit}"


def key_metrics(record: RunRecord | None) -> Any:
    """The record's headline numbers as a two-column table (measure, value), titled by its machine."""
    import pandas as pd

    if record is None:
        return pd.DataFrame({"measure": ["record"], "value": ["none: no run here and no H200 record found"]})
    rows: list[tuple[str, str]] = [("configuration", record.label), ("machine", record.machine)]
    if not record.ok:
        rows += [("status", record.status), ("reason", record.reason), ("what to do", advice_for(record.reason))]
        return pd.DataFrame(rows, columns=["measure", "value"])
    m = record.metrics
    cfg = record.config

    def number(key: str) -> float | None:
        return metric_value(record, key, None)

    times = m.get("step_times_s") or []
    spread = (
        f"IQR {fmt_num(number('step_time_iqr_s'), 3)} s, min {fmt_num(number('step_time_min_s'), 3)}"
        f" s, max {fmt_num(number('step_time_max_s'), 3)} s over {len(times) or m.get('timed_batches', '?')}"
        " timed step(s)"
    )
    peak = number("peak_flops")
    memory_source = m.get("peak_memory_source", "source not recorded")
    peak_source = m.get("peak_flops_source", "source not recorded")
    rows += [
        ("model / batch", f"{cfg.get('model')} · {cfg.get('batch_size')} x {cfg.get('max_length')} · "
                          f"padding {cfg.get('padding')} · {cfg.get('attn_implementation')} · "
                          f"{m.get('compute_dtype') or cfg.get('dtype')}"),
        ("real tokens / s", fmt_num(number("real_tokens_per_s"), 1)),
        ("step time, median", _unit(fmt_num(number("step_time_median_s"), 3), "s")),
        ("step time, spread", spread),
        ("first step (incl. start-up)", _unit(fmt_num(number("first_step_s"), 2), "s")),
        ("positions / step (padded)", fmt_per_step(number("positions_per_step"))),
        ("real tokens / step", fmt_per_step(number("real_tokens_per_step"))),
        ("loss tokens / step", fmt_per_step(number("loss_tokens_per_step"))),
        ("padding fraction", fmt_percent(number("padding_fraction"))),
        ("peak memory", _unit(fmt_num(number("peak_memory_gib"), 2), f"GiB ({memory_source})")),
        ("MFU", fmt_percent(number("mfu"))),
        ("peak FLOP/s", _unit(fmt_num(peak / 1e12 if peak else None, 3), f"TFLOP/s ({peak_source})")),
        ("kernels / step (profiled)", fmt_per_step(number("kernels_per_step"))),
    ]  # fmt: skip
    adapter = AdapterSettings.from_config(cfg)
    if adapter.active:  # a frozen base: what trains and what does not
        trained, frozen = fmt_num(number("trainable_parameters")), fmt_num(number("frozen_parameters"))
        what = f"{adapter.label} on {adapter.targets}: {trained} trained, {frozen} frozen parameters"
        rows.insert(3, ("adapter", what))
    return pd.DataFrame(rows, columns=["measure", "value"])


# ----------------------------------------------------------------------------------------------
# The trace


def load_trace_for(source: str, record: RunRecord | None, shipped: str | Path | None = None) -> Any:
    """The :class:`~nbhelpers.profiling.parse.Trace` that :func:`trace_for` picks, or None without one."""
    from nbhelpers.profiling.parse import load_trace

    path = trace_for(source, record, shipped)
    return load_trace(path) if path is not None else None


# ----------------------------------------------------------------------------------------------
# The profiled step's summary (for utilization vs MFU)


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


# ----------------------------------------------------------------------------------------------
# The H200 baseline from the committed records


def _is_gpu_baseline(record: RunRecord) -> bool:
    return record.ok and record.kind == "step" and record.label.lower().startswith(BASELINE_LABEL)


def gpu_baseline_record(folder: str | Path | None = None) -> RunRecord | None:
    """The committed H200 baseline: the newest ok step record labelled "baseline…" (by ``created_at``),
    one with trace numbers first; the newest is the one whose trace is shipped in ``data/``."""
    from .gpu_results import load_gpu_records

    candidates = sorted((r for r in load_gpu_records(folder) if _is_gpu_baseline(r)), key=lambda r: r.created_at)
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

    Reads the shipped records (``benchmarks/gpu``'s shelf, or ``folder``); an empty frame when no ok "baseline…"
    record exists.
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
    top = top_category({"top_categories": m.get("trace_top_categories")})
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
        share_of_time=frame["share_of_time"].map(fmt_percent),
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
        ("< 10 us: share of launches", "short_share_of_launches", fmt_percent),
        ("< 10 us: share of time", "short_share_of_time", fmt_percent),
        ("nominal utilization", "nominal_utilization", fmt_percent),
        ("SM-efficiency estimate", "sm_efficiency_estimate", fmt_percent),
        ("MFU (profiled step)", "mfu", fmt_percent),
        ("step time (profiled)", "step_time_us", fmt_us),
    ]
    columns: dict[str, list[str]] = {}
    sources: list[tuple[str, dict[str, Any]]] = []
    if summary is not None:
        s = plain_summary(summary)
        sources.append((f"this notebook's trace ({s.get('machine') or s.get('device') or 'unknown device'})", s))
    if gpu is not None and len(gpu):
        row = plain_summary(gpu.iloc[0])
        sources.append((f"committed baseline ({row['machine']})", row))
    for name, values in sources:
        columns[name] = [MISSING if is_missing(values.get(key)) else fmt(values.get(key)) for _, key, fmt in rows]
    return pd.DataFrame(columns, index=[label for label, _, _ in rows])


# ----------------------------------------------------------------------------------------------
# Records this notebook writes


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
    without: RunRecord | None = None,
) -> Any:
    """Append what this notebook made to ``RunStore.for_run(run_name)``; a table of what was written.

    The run's record when the baseline ran here (failed ones too) and its "without the workbook" record
    (``without``; a failed one too, which fails nothing); with a shipped trace analysed, a record of kind "trace"
    with its summary. The H200 step record is not copied: it was not measured here.
    """
    import pandas as pd

    store = RunStore.for_run(run_name)
    written: list[RunRecord] = []
    if plan.run_model and record is not None:
        written.append(store.append(record))
    if plan.run_model and without is not None:
        written.append(store.append(without))
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
    if plan.run_model:  # after writing: the notebook (and a sweep) fails visibly, nothing is lost
        raise_if_failed([record], str(store.path))
    return frame
