"""The report's sections beyond one machine's speedups: the first screen (what was found, in three lines), notebook
05's scaling and memory planner rows, and the watched training run. Each returns HTML (and a plot to embed, where it
has one); a section with nothing to show says in a sentence which notebook or parameter would fill it."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from nbhelpers.analysis.findings import findings
from nbhelpers.analysis.job_projection import JobSpec, assumptions, project_sweep_point, projection_markdown
from nbhelpers.analysis.memory_plan import planned_vs_measured
from nbhelpers.analysis.records import gpu_count, machines_of, run_name_of, step_records
from nbhelpers.analysis.scaling import scaling_frame
from nbhelpers.formatting import fmt_gib, fmt_percent, fmt_rate, format_table
from nbhelpers.measure.store import RunRecord
from nbhelpers.monitor.records import monitor_frame

from .html_table import html_table

SCALING_NOTEBOOK = "05_several_gpus"  # its records name it; its 1-GPU rows are the scaling's reference


def findings_html(records: Iterable[RunRecord], baseline_label: str | None = None) -> str:
    """The first screen: three lines that say what the run found (:func:`nbhelpers.analysis.findings.findings`)."""
    lines = findings(records, baseline_label)
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<section class="findings"><h2>What was found</h2><ol class="findings">{items}</ol></section>'


def job_section(records: Iterable[RunRecord], job: JobSpec, baseline_label: str | None = None) -> str:
    """Your job, in hours and money: for each machine and run (a sweep's points are runs), the baseline's, the
    recommendation's and "without the workbook"'s projected wall time, GPU-hours and cost, with the assumptions."""
    from markdown_it import MarkdownIt

    records = list(records)
    render = MarkdownIt("commonmark").enable("table").render
    parts = ['<section class="job"><h2>Your job, in hours and money</h2>']
    groups = [(m, run) for m in machines_of(step_records(records))
              for run in dict.fromkeys(run_name_of(r) for r in step_records(records) if r.machine == m)]  # fmt: skip
    if not groups:
        parts.append("<p>No projection: no configuration was measured.</p>")
    for machine, run in groups:
        mine = [r for r in records if r.machine == machine and run_name_of(r) == run]
        parts.append(f'<h3 class="job-run">{html.escape(machine)}, run {html.escape(run)}</h3>')
        try:
            frame = project_sweep_point(mine, job, baseline_label)
        except ValueError as error:  # a baseline label this run lacks
            parts.append(f"<p>No projection: {html.escape(str(error))}</p>")
            continue
        parts.append(render(projection_markdown(frame, assumptions(job, frame))))  # escapes what the records hold
    parts.append("</section>")
    return "\n".join(parts)


def scaling_section(records: Iterable[RunRecord]) -> str:
    """Notebook 05: the configuration on 1 and N GPUs (throughput, scaling efficiency, memory per GPU) and the memory
    planner's prediction beside each measured peak; a sentence when the run has no several-GPU record."""
    records = list(records)
    shown = [r for r in step_records(records) if gpu_count(r) > 1 or SCALING_NOTEBOOK in r.notebook]
    parts = ['<section class="scaling"><h2>Several GPUs (notebook 05)</h2>']
    if not any(gpu_count(r) > 1 for r in shown):
        parts.append(
            "<p>No configuration of this run ran on several GPUs (or several gloo processes on a CPU): notebook 05 "
            "measures one on 1 and N of them.</p></section>"
        )
        return "\n".join(parts)
    frame = scaling_frame(shown)
    parts.append(
        '<p class="meta">Scaling efficiency is per-GPU throughput on N GPUs over the 1-GPU record of the same '
        'configuration; on a CPU the "GPUs" are processes sharing its cores (the note says so).</p>'
    )
    parts.append(html_table(format_table(frame), "scaling"))
    planned = planned_vs_measured(shown, cuda_only=False)
    if len(planned):
        parts.append("<h3>Memory per GPU beside the planner</h3>")
        parts.append(
            '<p class="meta">On a GPU the measured peak is CUDA\'s allocator peak, which the planner predicts; on '
            "a CPU it is the process's resident memory (Python and the libraries included), not the same quantity."
            "</p>"
        )
        parts.append(html_table(format_table(planned), "planner"))
    parts.append("</section>")
    return "\n".join(parts)


def monitor_summary(records: Iterable[RunRecord]) -> Any:
    """One row per watched training run: steps seen, median real tok/s and MFU, mean padding, peak memory,
    launches per step (profiled windows) and the alerts raised."""
    import pandas as pd

    frame = monitor_frame(records)
    rows = []
    for (machine, session), part in frame.groupby(["machine", "session"], sort=False):
        alerts = sorted({code for text in part["warnings"] for code in str(text).split(", ") if code})
        rows.append({
            "run": str(session or part["label"].iloc[0]), "machine": machine, "last step": int(part["step"].max()),
            "real tok/s (median)": fmt_rate(part["real_tokens_per_s"].dropna().median()),
            "MFU (median)": fmt_percent(part["mfu"].dropna().median()),
            "padding (mean)": fmt_percent(part["padding_fraction"].dropna().mean()),
            "peak GiB": fmt_gib(part["peak_memory_gib"].dropna().max()),
            "launches per step": fmt_rate(part["launches_per_step"].dropna().median()),
            "alerts": ", ".join(alerts) or "none",
        })  # fmt: skip
    return pd.DataFrame(rows)


def monitor_section(records: Iterable[RunRecord]) -> tuple[str, Any | None]:
    """The watched training run (notebook 04's section 9): a summary row per run and its plot over the steps, or
    a sentence saying how a run is watched. Returns the HTML and the HoloViews plot to embed (None without one)."""
    from .monitor_plots import monitor_plot

    records = list(records)
    summary = monitor_summary(records)
    parts = ['<section class="monitor"><h2>A real training run, watched</h2>']
    if summary.empty:
        parts.append(
            "<p>No monitor records in this run: notebook 04's MONITOR_STEPS watches the recommendation's TRL run, "
            "and <code>nbhelpers.monitor.attach(trainer, RUN_NAME)</code> watches your own.</p></section>"
        )
        return "\n".join(parts), None
    parts.append(
        '<p class="meta">Figures the monitor logged during the run (a record every few steps, a profiler window now '
        "and then): a drop in throughput or a jump in launches shows the step it happened at.</p>"
    )
    parts.append(html_table(summary, "monitor"))
    parts.append("{{monitor_plot}}</section>")
    return "\n".join(parts), monitor_plot(records)


__all__ = ["findings_html", "job_section", "scaling_section", "monitor_summary", "monitor_section"]
