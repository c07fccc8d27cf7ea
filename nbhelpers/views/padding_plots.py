"""Displays of notebook 03: length histogram, per-step padding bars, throughput bars, the GPU verdict.

Plots are HoloViews (bokeh backend), imported lazily; the tables they show come from
``nbhelpers.analysis.padding``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nbhelpers.analysis.padding import measured_table, padding_records
from nbhelpers.analysis.records import is_valid
from nbhelpers.data.strategies import PACKED_STRATEGIES
from nbhelpers.measure.store import RunRecord
from nbhelpers.plotting import holoviews

REAL_COLOR = "#3b7dd8"
PAD_COLOR = "#e07b54"


def length_histogram(lengths: Sequence[int], max_length: int | None = None, bins: int = 40) -> Any:
    """Histogram of token lengths, with the max-length cut as a dashed line."""
    import numpy as np

    hv = holoviews()
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

    hv = holoviews()
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


def throughput_bars(table: Any, title: str = "real tokens per second") -> Any:
    """Bars of real tok/s per measured configuration (failed ones left out); None when nothing ran."""
    hv = holoviews()
    measured = table[table["real tok/s"].notna()]
    if measured.empty:
        return None
    return hv.Bars(measured, kdims="label", vdims="real tok/s").opts(
        title=title, width=620, height=280, xrotation=30, color=REAL_COLOR, tools=["hover"]
    )


def gpu_validity(folder: str | Path | None = None) -> dict[str, str]:
    """record_id -> validity note ("valid", "invalid: why") from the GPU folder's validity file."""
    from nbhelpers.analysis.gpu_results import load_validity

    return load_validity(folder or None)


def skipped_frame(skipped: dict[str, str]) -> Any:
    """What was left out of the measured grid (kernels, Liger switches, attentions), with why."""
    import pandas as pd

    return pd.DataFrame({"left out": list(skipped), "because": list(skipped.values())})


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
            "`nbhelpers bench qwen3-1.7b/padding-strategies-epoch --out DIR` on a GPU and point `GPU_RESULTS` "
            "at `DIR/qwen3-1.7b/padding-strategies-epoch`."
        )
    from IPython.display import display

    from nbhelpers.analysis.gpu_results import measured_and_failed

    steps = [r for r in records if r.kind == "step"]
    table = measured_table(steps)
    table.insert(1, "machine", [r.machine for r in steps])
    table.insert(2, "validity", [(validity or {}).get(r.record_id, "") for r in steps])
    measured, failed = measured_and_failed(table)
    if failed.empty:
        return measured
    display(measured)  # the rows with figures, then the failed ones in a short table: what and why
    return failed


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
            if r.config.get("padding") in PACKED_STRATEGIES and (not r.ok or not is_valid(r, validity))
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
