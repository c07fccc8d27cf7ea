"""Plots of a monitored training run over its steps: real tok/s, MFU, padding and launches per step."""

from __future__ import annotations

from typing import Any

from nbhelpers.monitor.records import monitor_frame
from nbhelpers.plotting import holoviews

# (column, axis label, factor): one panel each, in this order.
PANELS = (
    ("real_tokens_per_s", "real tok/s", 1.0),
    ("mfu", "MFU (%)", 100.0),
    ("padding_fraction", "padding (%)", 100.0),
    ("launches_per_step", "launches per step (profiled windows)", 1.0),
)


def _panel(frame: Any, column: str, ylabel: str, factor: float) -> Any:
    hv = holoviews()
    data = frame[frame[column].notna()].copy()
    if data.empty:
        why = data_note(frame, column)
        return hv.Text(0.5, 0.5, f"{ylabel}: {why}").opts(title=ylabel, width=420, height=260, xaxis=None, yaxis=None)
    data[ylabel] = data[column].astype(float) * factor
    layers = []
    for (machine, session), part in data.groupby(["machine", "session"], sort=False):
        name = f"{session} ({machine})"
        layers.append(hv.Curve(part, "step", ylabel, label=name).opts(alpha=0.6))
        layers.append(hv.Scatter(part, "step", [ylabel, "warnings"], label=name).opts(size=6, tools=["hover"]))
    return hv.Overlay(layers).opts(title=ylabel, width=420, height=260, show_legend=False)


def data_note(frame: Any, column: str) -> str:
    """Why a series has no point: MFU's note, no profiler window, or simply not recorded."""
    if column == "mfu" and "mfu_note" in frame and frame["mfu_note"].astype(bool).any():
        return str(frame["mfu_note"][frame["mfu_note"].astype(bool)].iloc[-1])
    if column == "launches_per_step":
        return "no profiler window finished (profile_every=0, or the run ended first)"
    return "not recorded"


def monitor_plot(records: Any, title: str = "") -> Any:
    """Four panels over the training step (:data:`PANELS`), one line per monitored run; ``records`` are
    RunRecords (those of kind ``monitor`` are used) or ``monitor_frame``'s table."""
    hv = holoviews()
    frame = records if hasattr(records, "columns") else monitor_frame(records)
    title = title or "the monitored training run"
    if frame.empty:
        return hv.Text(0.5, 0.5, "no monitor records").opts(title=title, width=420, height=200)
    return hv.Layout([_panel(frame, *panel) for panel in PANELS]).cols(2).opts(title=title)


def monitor_view(records: Any, run_name: str = "") -> Any:
    """Notebook 04's section: the plot of the monitored run(s), or a sentence saying how to get one."""
    frame = monitor_frame(records)
    if frame.empty:
        from IPython.display import Markdown

        name = repr(run_name) if run_name else "RUN_NAME"
        return Markdown(
            f"**No monitor records** for this run: a training run writes them with "
            f"`nbhelpers.monitor.attach(trainer, {name})` (Trainer, TRL's SFTTrainer) or "
            f"`nbhelpers.monitor.Monitor({name}, model=model)` in a plain loop "
            "(docs/real-training.md: \"Watching a real training run\")."
        )
    return monitor_plot(frame, title=f"the monitored training run ({run_name})" if run_name else "")
