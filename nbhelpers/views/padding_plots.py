"""Displays of notebook 03: length histogram, per-step padding bars, measured tables, GPU results.

Plots are HoloViews (bokeh backend), imported lazily; tables are pandas DataFrames built from
RunRecords only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nbhelpers.data.collate import PACKED_STRATEGIES as PACKED
from nbhelpers.kernels.attention import DEFAULT_ATTENTION
from nbhelpers.kernels.registry import BASELINE_BACKEND, uses_liger_switches
from nbhelpers.measure.store import RunRecord

REAL_COLOR = "#3b7dd8"
PAD_COLOR = "#e07b54"
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


def _hv() -> Any:
    import holoviews as hv
    import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend)

    if hv.Store.current_backend != "bokeh":
        hv.Store.set_current_backend("bokeh")
    return hv


def length_histogram(lengths: Sequence[int], max_length: int | None = None, bins: int = 40) -> Any:
    """Histogram of token lengths, with the max-length cut as a dashed line."""
    import numpy as np

    hv = _hv()
    counts, edges = np.histogram(np.asarray(lengths), bins=bins)
    plot = hv.Histogram((edges, counts), kdims="tokens", vdims="sequences").opts(
        title=f"token lengths ({len(lengths):,} sequences)", width=460, height=260, color=REAL_COLOR, tools=["hover"]
    )
    if max_length:
        plot = plot * hv.VLine(max_length).opts(color="black", line_dash="dashed", line_width=1.5)
    return plot


def step_waste_bars(table: Any, title: str = "", max_steps: int = 120) -> Any:
    """Stacked bars per step: real tokens and padding positions (the first ``max_steps`` steps)."""
    import pandas as pd

    hv = _hv()
    shown = table.head(max_steps)
    long = pd.concat(
        [
            pd.DataFrame({"step": shown["step"].astype(str), "kind": "real", "tokens": shown["real"]}),
            pd.DataFrame({"step": shown["step"].astype(str), "kind": "padding", "tokens": shown["padding"]}),
        ]
    )
    suffix = f" (first {max_steps} of {len(table)} steps)" if len(table) > max_steps else ""
    bars = hv.Bars(long, kdims=["step", "kind"], vdims="tokens")
    return bars.opts(
        stacked=True,
        width=520,
        height=260,
        title=(title or "real tokens and padding per step") + suffix,
        cmap={"real": REAL_COLOR, "padding": PAD_COLOR},
        xaxis="bottom" if len(shown) <= 40 else None,
        xlabel="step",
        ylabel="positions",
        tools=["hover"],
        line_width=0,
        legend_position="top_right",
    )


def explorer_plot(lengths: Sequence[int], table: Any, max_length: int, title: str = "") -> Any:
    """The explorer's picture: length histogram with the cut, next to the per-step padding bars."""
    return (length_histogram(lengths, max_length) + step_waste_bars(table, title)).opts(shared_axes=False)


def kernel_unit(record: RunRecord) -> str:
    """What kernels/step counts on this record's device: GPU kernels or CPU aten operators."""
    device = str(record.environment.get("device_type", "")).lower()
    if device == "cpu":
        return "aten ops (CPU)"
    return "kernels (GPU)" if device else ""


def _metric(record: RunRecord, key: str) -> float:
    value = record.metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return math.nan
    return float(value)


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
                "padding fraction": _metric(record, "padding_fraction"),
                "positions/step": _metric(record, "positions_per_step"),
                "real tok/s": _metric(record, "real_tokens_per_s"),
                "step time s": _metric(record, "step_time_median_s"),
                "step time IQR s": _metric(record, "step_time_iqr_s"),
                "peak memory GiB": _metric(record, "peak_memory_gib"),
                "kernels/step": _metric(record, "kernels_per_step"),
                "kernel unit": kernel_unit(record) if "kernels_per_step" in record.metrics else "",
                "reason": record.reason,
            }
        )
    return pd.DataFrame(rows, columns=list(MEASURED_COLUMNS))


def throughput_bars(table: Any, title: str = "real tokens per second") -> Any:
    """Bars of real tok/s per measured configuration (failed ones left out); None when nothing ran."""
    hv = _hv()
    measured = table[table["real tok/s"].notna()]
    if measured.empty:
        return None
    return hv.Bars(measured, kdims="label", vdims="real tok/s").opts(
        title=title, width=620, height=280, xrotation=30, color=REAL_COLOR, tools=["hover"]
    )


def failures(table: Any) -> Any:
    """The failed rows of a measured table: label and reason."""
    return table.loc[table["status"] != "ok", ["label", "padding", "attention", "reason"]].reset_index(drop=True)


def gpu_validity(folder: str | Path | None = None) -> dict[str, str]:
    """record_id -> validity note ("valid", "invalid: why") from summary files whose entries carry one."""
    from nbhelpers.analysis.gpu_results import GPU_RESULTS_DIR

    root = Path(folder) if folder else GPU_RESULTS_DIR
    notes: dict[str, str] = {}
    if not root.is_dir():
        return notes
    for path in sorted(root.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        entries = data.get("records", [data]) if isinstance(data, dict) else data
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("record_id") and isinstance(entry.get("validity"), str):
                notes[str(entry["record_id"])] = entry["validity"]
    return notes


def is_valid(record: RunRecord, validity: dict[str, str] | None = None) -> bool:
    """False when a validity note marks the record invalid; records without a note count as valid."""
    return not (validity or {}).get(record.record_id, "valid").lower().startswith("invalid")


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


def kernels_label(record: RunRecord) -> str:
    """The record's kernel backend, with its Liger switches when they are not the default set."""
    from nbhelpers.measure.config import RunConfig

    kernels, default = str(record.config.get("kernels", BASELINE_BACKEND)), RunConfig().liger_kernels
    switches = tuple(record.config.get("liger_kernels") or default)
    if not uses_liger_switches(kernels) or switches == default:
        return kernels
    return f"{kernels} ({', '.join(switches)})"


def _attention_ms(record: RunRecord) -> float | None:
    """Attention kernel time per profiled step (ms), from the record's trace categories; None without one."""
    for row in record.metrics.get("trace_top_categories") or []:
        if row.get("category") == "attention" and row.get("time_per_step_us") is not None:
            return float(row["time_per_step_us"]) / 1e3
    return None


def packing_gain(records: Iterable[RunRecord], validity: dict[str, str] | None = None) -> Any:
    """Per machine, run, workload, attention and kernels: real tok/s padded (static, dynamic) vs packed.

    Rows of one workload only (same samples, batch shape and timing window: ``report.workload_of``). Where a
    row has no static record of its own attention, its static column is the workload's eager static
    record (sdpa first), named in "static from". Packing removes padding for every attention; what is left
    between attentions is how much of a packed row's masked (cross-sequence) area each still computes, which
    the "attention ms/step" of profiled records shows. Failed records and records marked invalid are left out.
    """
    import pandas as pd

    from .report import workload_of

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
        if padding in ("static", "dynamic", "packed", "token_budget") and f"{padding} tok/s" not in row:
            row[f"{padding} tok/s"] = _metric(record, "real_tokens_per_s")
            if padding == "static":
                row["static from"] = record.label
            if padding == "packed":
                row["packed attention ms/step"] = _attention_ms(record)
        if padding == "static" and kernels == BASELINE_BACKEND:
            kept = reference.get(workload)
            default = DEFAULT_ATTENTION
            if kept is None or (attention == default and kept.config["attn_implementation"] != default):
                reference[workload] = record
    for key, row in rows.items():
        base = reference.get(key[:3])
        if "static tok/s" not in row and base is not None:
            row["static tok/s"] = _metric(base, "real_tokens_per_s")
            row["static from"] = base.label
    columns = ["machine", "run", "workload", "attention", "kernels", "static tok/s", "static from", "dynamic tok/s",
               "packed tok/s", "token_budget tok/s", "packed attention ms/step"]  # fmt: skip
    frame = pd.DataFrame(list(rows.values()), columns=columns)
    frame["packed / static"] = frame["packed tok/s"] / frame["static tok/s"]
    frame["packed / dynamic"] = frame["packed tok/s"] / frame["dynamic tok/s"]
    return frame


def skipped_frame(skipped: dict[str, str]) -> Any:
    """Attention implementations left out of the measured grid, with why."""
    import pandas as pd

    return pd.DataFrame({"attention": list(skipped), "left out because": list(skipped.values())})


def gpu_overview(
    records: Sequence[RunRecord], folder: str | Path | None = None, validity: dict[str, str] | None = None
) -> Any:
    """The GPU records' measured table with machine and validity, or a Markdown note when there are none."""
    from IPython.display import Markdown

    from nbhelpers.analysis.gpu_results import GPU_RESULTS_DIR

    folder = folder or GPU_RESULTS_DIR
    if not records:
        return Markdown(
            f"**No GPU results about padding** in `{folder}`: this section is skipped. Measure them with "
            "`python benchmarks/gpu_suite.py padding padding-flex --out DIR` on a GPU and point `GPU_RESULTS` "
            "at `DIR`."
        )
    steps = [r for r in records if r.kind == "step"]
    table = measured_table(steps)
    table.insert(1, "machine", [r.machine for r in steps])
    table.insert(2, "validity", [(validity or {}).get(r.record_id, "") for r in steps])
    return table


def skip_verdict(gain: Any, records: Sequence[RunRecord] = (), validity: dict[str, str] | None = None) -> Any:
    """Markdown: per machine and attention, what packing gained over static padding, and what that says.

    With no valid packed-vs-static pair, it says so and lists the packed records that were left out and why.
    """
    from IPython.display import Markdown

    lines = []
    rows = gain[gain["packed / static"].notna()] if gain is not None and not gain.empty else None
    if rows is None or rows.empty:
        lines.append("**No valid packed-vs-static pair was measured on a GPU: no verdict on block skipping yet.**")
        left_out = [
            r for r in padding_records(records)
            if r.config.get("padding") in PACKED and (not r.ok or not is_valid(r, validity))
        ]  # fmt: skip
        for record in left_out:
            why = (validity or {}).get(record.record_id) or record.reason or "failed"
            lines.append(f"- left out: `{record.label}` ({record.machine}): {why}")
        return Markdown("\n".join(lines))
    for (machine, run, workload), group in rows.groupby(["machine", "run", "workload"], sort=False):
        best = group.loc[group["packed / static"].idxmax()]
        fastest = group.loc[group["packed tok/s"].idxmax()]
        parts = [
            f"`{r['attention']}` ({r['kernels']}) {r['packed / static']:.2f}x"
            for _, r in group.sort_values("packed / static", ascending=False).iterrows()
        ]
        lines.append(
            f"- **{machine}** (run `{run}`; {workload}): packed over static padding: {', '.join(parts)}. "
            f"`{best['attention']}` ({best['kernels']}) gains the most from packing; the fastest packed step is "
            f"`{fastest['attention']}` ({fastest['kernels']}) at {fastest['packed tok/s']:,.0f} real tok/s. "
            "Packing removes the "
            "padding for every attention; the rest of the difference is how much of a packed row's masked "
            "(cross-sequence) area each attention still computes (attention ms/step, where profiled)."
        )
    return Markdown("\n".join(lines))
