"""Padding strategies compared from RunRecords: the measured table, and packed against padded rows.

Tables are pandas DataFrames built from records only; ``views.padding_plots`` draws and words them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.analysis.records import is_valid, kernels_label, metric_value, workload_of
from nbhelpers.data.strategies import BASELINE_STRATEGY, PACKED_STRATEGIES, STRATEGIES
from nbhelpers.kernels.attention import DEFAULT_ATTENTION
from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.store import RunRecord

MEASURED_COLUMNS = (
    "label",
    "padding",
    "attention",
    "status",
    "padding fraction",
    "positions/step",
    "real tok/s",
    "step time s",
    "step time IQR s",
    "peak memory GiB",
    "kernels/step",
    "kernel unit",
    "reason",
)


def kernel_unit(record: RunRecord) -> str:
    """What kernels/step counts on this record's device: GPU kernels or CPU aten operators."""
    device = str(record.environment.get("device_type", "")).lower()
    if device == "cpu":
        return "aten ops (CPU)"
    return "kernels (GPU)" if device else ""


def measured_table(records: Iterable[RunRecord]) -> Any:
    """One row per measured configuration: padding, positions/step, real tok/s, memory, kernels/step.

    Failed configurations stay, with their reason and empty numbers. On a CPU, kernels/step counts
    top-level aten operators per step (the column ``kernel unit`` says which).
    """
    import pandas as pd

    rows = []
    for record in records:
        if record.kind != "step":
            continue
        rows.append(
            {
                "label": record.label,
                "padding": record.config.get("padding", ""),
                "attention": record.config.get("attn_implementation", ""),
                "status": record.status,
                "padding fraction": metric_value(record, "padding_fraction"),
                "positions/step": metric_value(record, "positions_per_step"),
                "real tok/s": metric_value(record, "real_tokens_per_s"),
                "step time s": metric_value(record, "step_time_median_s"),
                "step time IQR s": metric_value(record, "step_time_iqr_s"),
                "peak memory GiB": metric_value(record, "peak_memory_gib"),
                "kernels/step": metric_value(record, "kernels_per_step"),
                "kernel unit": kernel_unit(record) if "kernels_per_step" in record.metrics else "",
                "reason": record.reason,
            }
        )
    return pd.DataFrame(rows, columns=list(MEASURED_COLUMNS))


def failures(table: Any) -> Any:
    """The failed rows of a measured table: label and reason."""
    return table.loc[table["status"] != "ok", ["label", "padding", "attention", "reason"]].reset_index(drop=True)


def padding_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Step records that name a padding and an attention, one per record id (the one with an environment)."""
    chosen: dict[str, RunRecord] = {}
    for record in records:
        if record.kind != "step" or not record.config.get("padding") or not record.config.get("attn_implementation"):
            continue
        kept = chosen.get(record.record_id)
        if kept is None or (not kept.environment and record.environment):
            chosen[record.record_id] = record
    return list(chosen.values())


def _attention_ms(record: RunRecord) -> float | None:
    """Attention kernel time per profiled step (ms), from the record's trace categories; None without one."""
    for row in record.metrics.get("trace_top_categories") or []:
        if row.get("category") == "attention" and row.get("time_per_step_us") is not None:
            return float(row["time_per_step_us"]) / 1e3
    return None


def packing_gain(records: Iterable[RunRecord], validity: dict[str, str] | None = None) -> Any:
    """Per machine, run, workload, attention and kernels: real tok/s of every strategy, padded vs packed.

    Rows of one workload only (same samples, batch shape and timing window: ``records.workload_of``). Where a
    row has no static record of its own attention, its static column is the workload's eager static
    record (sdpa first), named in "static from". Packing removes padding for every attention; what is left
    between attentions is how much of a packed row's masked (cross-sequence) area each still computes, which
    the "attention ms/step" of profiled records shows. Failed records and records marked invalid are left out.
    """
    import pandas as pd

    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    reference: dict[tuple[str, ...], RunRecord] = {}
    for record in padding_records(records):
        if not record.ok or not is_valid(record, validity):
            continue
        attention, kernels = str(record.config["attn_implementation"]), kernels_label(record)
        workload = (record.machine, str(record.config.get("run_name", "")), workload_of(record))
        row = rows.setdefault(
            (*workload, attention, kernels),
            {"machine": workload[0], "run": workload[1], "workload": workload[2], "attention": attention,
             "kernels": kernels},
        )  # fmt: skip
        padding = record.config["padding"]
        if padding in STRATEGIES and f"{padding} tok/s" not in row:
            row[f"{padding} tok/s"] = metric_value(record, "real_tokens_per_s")
            if padding == BASELINE_STRATEGY:
                row["static from"] = record.label
            if padding in PACKED_STRATEGIES:
                row[f"{padding} attention ms/step"] = _attention_ms(record)
        if padding == BASELINE_STRATEGY and kernels == BASELINE_BACKEND:
            kept = reference.get(workload)
            default = DEFAULT_ATTENTION
            if kept is None or (attention == default and kept.config["attn_implementation"] != default):
                reference[workload] = record
    for key, row in rows.items():
        base = reference.get(key[:3])
        if "static tok/s" not in row and base is not None:
            row["static tok/s"] = metric_value(base, "real_tokens_per_s")
            row["static from"] = base.label
    speeds = [f"{name} tok/s" for name in STRATEGIES]
    speeds.insert(speeds.index(f"{BASELINE_STRATEGY} tok/s") + 1, "static from")
    attention_ms = [f"{name} attention ms/step" for name in PACKED_STRATEGIES]
    columns = ["machine", "run", "workload", "attention", "kernels", *speeds, *attention_ms]
    frame = pd.DataFrame(list(rows.values()), columns=columns)
    frame["packed / static"] = frame["packed tok/s"] / frame["static tok/s"]
    frame["packed / dynamic"] = frame["packed tok/s"] / frame["dynamic tok/s"]
    return frame
