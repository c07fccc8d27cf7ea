"""Displays of notebook 03: length histogram, per-step padding bars, measured tables, GPU results.

Plots are HoloViews (bokeh backend), imported lazily; tables are pandas DataFrames built from
RunRecords only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .results import RunRecord

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


def padding_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    """Step records of configurations that differ in padding or attention (the ones this notebook is about)."""
    return [r for r in records if r.kind == "step" and r.config.get("padding") and r.config.get("attn_implementation")]


def packing_gain(records: Iterable[RunRecord]) -> Any:
    """Per machine, run, attention and kernels: real tok/s padded (static, dynamic) vs packed, and the ratio.

    Packing removes padding for every attention; only an attention that skips the masked
    (cross-sequence) blocks of a packed row also stops paying for them, so the ratio packed/static
    tells which one does.
    """
    import pandas as pd

    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    for record in padding_records(records):
        key = (
            record.machine,
            str(record.config.get("run_name", "")),
            str(record.config["attn_implementation"]),
            str(record.config.get("kernels", "eager")),
        )
        row = rows.setdefault(key, {"machine": key[0], "run": key[1], "attention": key[2], "kernels": key[3]})
        padding = str(record.config["padding"])
        value = _metric(record, "real_tokens_per_s") if record.ok else math.nan
        column = f"{padding} tok/s"
        if padding in ("static", "dynamic", "packed", "token_budget") and math.isnan(row.get(column, math.nan)):
            row[column] = value
    frame = pd.DataFrame(list(rows.values()))
    for column in ("static tok/s", "dynamic tok/s", "packed tok/s", "token_budget tok/s"):
        if column not in frame:
            frame[column] = math.nan
    if not frame.empty:
        frame["packed / static"] = frame["packed tok/s"] / frame["static tok/s"]
        frame["packed / dynamic"] = frame["packed tok/s"] / frame["dynamic tok/s"]
    return frame


def skipped_frame(skipped: dict[str, str]) -> Any:
    """Attention implementations left out of the measured grid, with why."""
    import pandas as pd

    return pd.DataFrame({"attention": list(skipped), "left out because": list(skipped.values())})


def gpu_overview(records: Sequence[RunRecord], folder: str | Path | None = None) -> Any:
    """The GPU records' measured table, or a Markdown note saying that there are none in ``folder``."""
    from IPython.display import Markdown

    from .gpu_results import GPU_RESULTS_DIR

    folder = folder or GPU_RESULTS_DIR
    if not records:
        return Markdown(
            f"**No GPU results about padding** in `{folder}`: this section is skipped. Measure them with "
            "`python benchmarks/gpu_suite.py padding padding-flex --out DIR` on a GPU and point `GPU_RESULTS` "
            "at `DIR`."
        )
    machines = sorted({r.machine for r in records})
    table = measured_table(records)
    table.insert(1, "machine", [r.machine for r in records if r.kind == "step"])
    table.attrs["machines"] = machines
    return table


def skip_verdict(gain: Any) -> Any:
    """Markdown: per machine and attention, what packing gained over static padding, and what that says."""
    from IPython.display import Markdown

    if gain is None or gain.empty or gain["packed / static"].isna().all():
        return Markdown("No packed-vs-static pair was measured on a GPU: no verdict on block skipping.")
    lines = []
    rows = gain[gain["packed / static"].notna()]
    for (machine, run), group in rows.groupby(["machine", "run"], sort=False):
        best = group.loc[group["packed / static"].idxmax()]
        parts = [
            f"`{r['attention']}` ({r['kernels']}) {r['packed / static']:.2f}x"
            for _, r in group.sort_values("packed / static", ascending=False).iterrows()
        ]
        lines.append(
            f"- **{machine}** (run `{run}`): packed over static padding: {', '.join(parts)}. "
            f"`{best['attention']}` gains the most from packing: it is the one that skips the masked "
            "(cross-sequence) blocks; an attention near 1x computes them anyway."
        )
    return Markdown("\n".join(lines))
