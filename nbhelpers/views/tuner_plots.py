"""Displays of the tuner: real tok/s of every measurement by stage, and the journal as a table."""

from __future__ import annotations

from typing import Any

from nbhelpers.plotting import holoviews

DECISION_COLORS = {"winner": "#2a9d4b", "kept": "#3b7dd8", "baseline": "#555555", "dropped": "#e07b54"}
JOURNAL_COLUMNS = ("candidate", "stage", "steps", "real_tokens_per_s", "speedup", "parity", "decision", "reason")


def measured_points(journal: Any) -> Any:
    """The journal's measured rows (a real tok/s), with the stage as the plot's x-axis."""
    if journal is None or len(journal) == 0 or "real_tokens_per_s" not in journal:
        return journal.iloc[0:0] if journal is not None else None
    points = journal[journal["real_tokens_per_s"].notna()].copy()
    points["real tok/s"] = points["real_tokens_per_s"].astype(float)
    return points


def journal_plot(journal: Any, title: str = "tuner: real tok/s of every measurement") -> Any:
    """Scatter of real tok/s by stage (baseline, rung 0, rung 1, ..., final), coloured by the decision."""
    hv = holoviews()
    points = measured_points(journal)
    if points is None or len(points) == 0:
        return hv.Text(0, 0, "nothing was measured").opts(title=title, width=560, height=300)
    stages = list(dict.fromkeys(points["stage"]))  # in the order the tuner went through them
    points["stage index"] = points["stage"].map({stage: i for i, stage in enumerate(stages)})
    layers = []
    hover = ["real tok/s", "candidate", "stage", "reason"]
    for decision, color in DECISION_COLORS.items():
        chosen = points[points["decision"] == decision]
        if len(chosen):
            scatter = hv.Scatter(chosen, kdims="stage index", vdims=hover, label=decision)
            layers.append(scatter.opts(color=color, size=9, tools=["hover"]))
    return hv.Overlay(layers).opts(
        title=title, width=640, height=340, legend_position="right", xlabel="stage", ylabel="real tok/s",
        xticks=list(enumerate(stages)), xlim=(-0.5, len(stages) - 0.5),
    )  # fmt: skip


def journal_table(journal: Any) -> Any:
    """The journal's main columns, in the order the decisions were taken."""
    columns = [c for c in JOURNAL_COLUMNS if c in journal]
    return journal[columns]
