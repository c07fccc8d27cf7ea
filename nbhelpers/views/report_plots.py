"""HoloViews (Bokeh) plots of the report: waterfall, speedups over both references, what each kernel entry bought,
throughput and memory bars, convergence curves.

Every function takes the frames of :mod:`nbhelpers.views.report` (``build_table`` / ``waterfall_steps`` /
``entry_gains`` / ``both_references``) for ONE machine; plots never put two machines on one axis. HoloViews is
imported lazily.
"""

from __future__ import annotations

from typing import Any

from nbhelpers.plotting import holoviews

OK_COLOR = "#3b7dd8"
UP_COLOR = "#2e9d57"
DOWN_COLOR = "#c8553d"
BASE_COLOR = "#888888"


def _unique(names: list[str]) -> list[str]:
    """Make x categories unique: a repeated name gets " #2", " #3"..."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} #{seen[name]}")
    return out


def _x_names(frame: Any) -> list[str]:
    labels = [str(v) for v in frame["label"]]
    if frame["run"].nunique() > 1:
        labels = [f"{label} ({run})" for label, run in zip(labels, frame["run"], strict=True)]
    return _unique(labels)


def waterfall_plot(steps: Any, title: str = "") -> Any:
    """Bars of real tok/s per waterfall stage with the cumulative speedup written above each."""
    hv = holoviews()
    measured = steps[steps["real tok/s"].notna()]
    if measured.empty:
        return None
    prefix = measured["run"] if measured["run"].nunique() > 1 else None
    names = []
    for _, row in measured.iterrows():
        name = f"{row['stage']}: {row['label']}"
        if prefix is not None:
            name = f"{row['run']} / {name}"
        names.append(name)
    names = _unique(names)
    data = {
        "stage": names,
        "tok_s": [float(v) for v in measured["real tok/s"]],
        "speedup": [float(v) for v in measured["speedup"]],
        "text": [f"{v:.2f}x" for v in measured["speedup"]],
        "color": [
            BASE_COLOR if s == "baseline" else (UP_COLOR if g >= 1 else DOWN_COLOR)
            for s, g in zip(measured["stage"], measured["step gain"], strict=True)
        ],
    }
    bars = hv.Bars(data, kdims=["stage"], vdims=["tok_s", "speedup", "color"]).opts(
        color="color",
        tools=["hover"],
        ylabel="real tokens / s",
        xlabel="",
        xrotation=20,
        width=900,
        height=360,
        title=title or "Waterfall: measured stages, cumulative speedup over the baseline",
    )
    top = max(data["tok_s"]) if data["tok_s"] else 1.0
    labels = hv.Labels(
        {"stage": names, "y": [v + 0.04 * top for v in data["tok_s"]], "text": data["text"]},
        kdims=["stage", "y"],
        vdims=["text"],
    ).opts(text_font_size="11pt", text_baseline="bottom")
    return (bars * labels).opts(ylim=(0, top * 1.18))


def entries_plot(entries: Any, title: str = "") -> Any:
    """Each kernel entry's gain over the baseline's kernels at the best padding (``entry_gains``), one workload;
    None when no gain was measured."""
    hv = holoviews()
    rows = entries[entries["over baseline kernels"].notna()]
    if rows.empty:
        return None
    pairs = zip(rows["entry"], rows["attention"], strict=True)
    names = _unique([f"{entry} ({attention})" for entry, attention in pairs])
    gains = [float(v) for v in rows["over baseline kernels"]]
    data = {
        "entry": names,
        "gain": gains,
        "tok_s": [float(v) for v in rows["real tok/s"]],
        "color": [UP_COLOR if g > 1 else (BASE_COLOR if g == 1 else DOWN_COLOR) for g in gains],
    }
    bars = hv.Bars(data, kdims=["entry"], vdims=[hv.Dimension("gain", label="over the baseline's kernels"), "tok_s",
                                                 "color"]).opts(  # fmt: skip
        color="color", tools=["hover"], ylabel="x the baseline's kernels at this padding", xlabel="", xrotation=20,
        width=900, height=340, title=title or "What each kernel entry bought at the best padding",
    )  # fmt: skip
    top = max(gains)
    labels = hv.Labels(
        {"entry": names, "y": [g + 0.04 * top for g in gains], "text": [f"{g:.2f}x" for g in gains]},
        kdims=["entry", "y"],
        vdims=["text"],
    ).opts(text_font_size="11pt", text_baseline="bottom")
    return (bars * labels).opts(ylim=(0, top * 1.18))


REFERENCE_COLORS = {"vs reference path": OK_COLOR, "vs without the workbook": UP_COLOR}  # both_references' columns


def references_plot(frame: Any, title: str = "") -> Any:
    """Each measured configuration's speedup over both references (``both_references``, one workload), side by side;
    a missing second reference draws no bar and the title says why. None when no speedup was measured."""
    hv = holoviews()
    if frame.empty:
        return None
    names = _x_names(frame)
    rows = [
        (name, reference, float(value), float(rate))
        for reference in REFERENCE_COLORS
        for name, value, rate in zip(names, frame[reference], frame["real tok/s"], strict=True)
        if value == value  # NaN: that reference was not measured
    ]
    if not rows:  # neither reference measured in this run (the section's text says why)
        return None
    notes = sorted({str(n) for n in frame["note"] if n})
    title = title or "Speedup over both references"
    if notes:
        title += " (" + "; ".join(notes) + ")"
    data = {"configuration_over_references": [r[0] for r in rows], "reference": [r[1] for r in rows],
            "speedup": [r[2] for r in rows], "tok_s": [r[3] for r in rows]}  # fmt: skip
    # Its own name and label for the configurations: a Layout links the axes of equal dimensions, and this axis holds
    # (configuration, reference) pairs, which the throughput plot's axis of configuration names cannot map.
    configuration = hv.Dimension("configuration_over_references", label="configuration and reference")
    bars = hv.Bars(data, kdims=[configuration, "reference"], vdims=["speedup", "tok_s"])
    return bars.opts(
        color="reference", cmap=REFERENCE_COLORS, tools=["hover"], ylabel="x the reference", xlabel="",
        xrotation=30, width=900, height=360, title=title, show_legend=False, multi_level=True,  # axis names both
    )  # fmt: skip


def _bars(table: Any, column: str, ylabel: str, title: str, color: str = OK_COLOR) -> Any:
    hv = holoviews()
    rows = table[table["status"] == "ok"]
    rows = rows[rows[column].notna()]
    if rows.empty:
        return None
    names = _x_names(rows)
    values = [float(v) for v in rows[column]]
    order = sorted(range(len(values)), key=lambda i: -values[i])
    value = "".join(ch if ch.isalnum() else "_" for ch in column)  # its own axis: tok/s and GiB never share one
    data = {
        "configuration": [names[i] for i in order],
        value: [values[i] for i in order],
        "speedup": [float(rows["speedup"].iloc[i]) for i in order],
    }
    return hv.Bars(data, kdims=["configuration"], vdims=[hv.Dimension(value, label=ylabel), "speedup"]).opts(
        color=color,
        tools=["hover"],
        ylabel=ylabel,
        xlabel="",
        xrotation=30,
        width=900,
        height=340,
        title=title,
    )


def throughput_plot(table: Any) -> Any:
    """Real tok/s of every measured configuration, fastest first."""
    return _bars(table, "real tok/s", "real tokens / s", "Throughput (real tokens per second)")


def memory_plot(table: Any) -> Any:
    """Peak memory of every measured configuration, largest first."""
    return _bars(table, "peak memory GiB", "peak memory (GiB)", "Peak memory", color="#8a63b8")


def machine_plots(table: Any, steps: Any, machine: str = "", entries: Any = None, references: Any = None) -> Any:
    """Waterfall(s), the speedups over both references (``references``, where given), what each kernel entry bought
    (``entries``, where given), throughput and memory of one machine as one column, or None if nothing measured."""
    hv = holoviews()
    if machine:
        table = table[table["machine"] == machine]
        steps = steps[steps["machine"] == machine]
        entries = entries[entries["machine"] == machine] if entries is not None else None
        references = references[references["machine"] == machine] if references is not None else None
    machines = set(table["machine"]) | set(steps["machine"])
    if len(machines) > 1:
        raise ValueError(f"machine_plots draws one machine at a time, got {sorted(machines)}")
    plots = []
    for (run, workload), group in steps.groupby(["run", "workload"], sort=False):
        plot = waterfall_plot(group, title=f"Waterfall, run {run}: {workload}")
        if plot is not None:
            plots.append(plot)
        if references is not None:
            both = references[(references["run"] == run) & (references["workload"] == workload)]
            plot = references_plot(both, title=f"Speedup over both references, run {run}")
            if plot is not None:
                plots.append(plot)
        if entries is not None:
            bought = entries[(entries["run"] == run) & (entries["workload"] == workload)]
            plot = entries_plot(bought, title=f"What each kernel entry bought, run {run}: {workload}")
            if plot is not None:
                plots.append(plot)
    for plot in (throughput_plot(table), memory_plot(table)):
        if plot is not None:
            plots.append(plot)
    if not plots:
        return None
    return hv.Layout(plots).cols(1)


def report_plots(table: Any, steps: Any, entries: Any = None, references: Any = None) -> Any:
    """Every machine's plots, one machine after another, for display in a notebook (``references``: the speedups
    over both references, ``entries``: what each kernel entry bought, drawn after each waterfall).

    The notebook loads the plotting extension once (``hv.extension("bokeh")``) before this.
    """
    hv = holoviews()
    layouts = []
    for machine in dict.fromkeys(table["machine"]):
        plot = machine_plots(table, steps, machine, entries, references)
        if plot is not None:
            layouts.append(plot.relabel(machine) if hasattr(plot, "relabel") else plot)
    if not layouts:
        return hv.Div("<p>No measured configuration to plot.</p>")
    result = layouts[0]
    for more in layouts[1:]:
        result = result + more
    return result.cols(1)


def convergence_plot(result: Any) -> Any:
    """The recommendation's and the baseline's loss per step (an ``analysis.convergence.Convergence``), the
    verdict and tolerances in the title."""
    hv = holoviews()
    frame = result.frame()
    curves = [
        hv.Curve(frame, "step", hv.Dimension(role, label="loss"), label=role).opts(color=color)
        for role, color in (("recommended", OK_COLOR), ("baseline", BASE_COLOR))
    ]
    verdict = "pass" if result.passed else "fail"
    return hv.Overlay(curves).opts(
        title=f"Loss per step: {verdict} (per step within {result.step_rtol:g}, mean within {result.mean_rtol:g})",
        width=700, height=300, legend_position="top_right",
    )  # fmt: skip


def to_bokeh(plot: Any) -> Any:
    """The Bokeh model of a HoloViews object (for embedding in the HTML report)."""
    hv = holoviews()
    return hv.render(plot, backend="bokeh")
