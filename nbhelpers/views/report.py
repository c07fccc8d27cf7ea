"""The standalone HTML report of a set of RunRecords: one section per machine, opens offline.

Every number in it comes from ``analysis`` (speedup table, waterfall, recommendation) and is shown
with ``formatting``, as in the notebooks; this module only writes the HTML.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nbhelpers.analysis.convergence import Convergence, convergence_of
from nbhelpers.analysis.entry_gains import ENTRIES_TEXT, entry_gains
from nbhelpers.analysis.job_projection import JobSpec
from nbhelpers.analysis.overview import failed_configurations, peak_flops_sources
from nbhelpers.analysis.peers import export_gap, export_gap_text, peer_table
from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.records import choose_baselines, machines_of, record_label, run_name_of, step_records
from nbhelpers.analysis.references import WITHOUT_WORKBOOK_WHAT, both_references, references_text
from nbhelpers.analysis.repeats import disagreement_table
from nbhelpers.analysis.speedup import build_table, waterfall_steps
from nbhelpers.formatting import format_table, format_waterfall
from nbhelpers.kernels.doctor import DOCTOR_KIND, describe_machine, doctor_table
from nbhelpers.measure.jsonl import dumps
from nbhelpers.measure.spread import INTERVAL_METHOD, MIN_TIMED_STEPS
from nbhelpers.measure.store import RunRecord
from nbhelpers.validation import output_target

from .html_table import html_table
from .report_sections import findings_html, job_section, monitor_section, scaling_section

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.5rem; }
table.nbh-table { border-collapse: collapse; font-size: 0.88rem; margin: 0.6rem 0 1.2rem; display: block;
                  overflow-x: auto; max-width: 100%; }
table.nbh-table th, table.nbh-table td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
table.nbh-table th { background: #f3f3f3; }
table.nbh-table td:first-child, table.nbh-table td.text { text-align: left; }
.failed { color: #a40000; } .meta { color: #555; font-size: 0.9rem; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 0.7rem; overflow-x: auto; font-size: 0.85rem; }
"""


def _environment_line(records: list[RunRecord], machine: str) -> str:
    env = next((r.environment for r in records if r.machine == machine and r.environment), {})
    keys = ("device_type", "platform", "torch", "transformers", "liger_kernel")
    parts = [f"{k} {env[k]}" for k in keys if env.get(k)]
    return ", ".join(parts)


def write_html_report(
    records: Iterable[RunRecord],
    path: str | Path,
    baseline_label: str | None = None,
    title: str = "Fine-tuning speedup report",
    left_out: Sequence[str] = (),
    job: JobSpec | None = None,
) -> Path:
    """Write a standalone HTML report (Bokeh resources inline: opens offline) and return its path.

    One section per machine: its peak FLOP/s source, waterfall, the speedups over both references (the reference
    path and "without the workbook"), plots, the full table (formatted as
    in the notebook), failed configurations with their reasons and the recommended configuration.
    ``left_out``: the lines the records' reader skipped (``<file>:<line>: ...`` each), listed at the top.
    ``job``: the training job projected in hours and money (notebook 04's JOB_* parameters); None: the dataset's
    full size, one epoch, one GPU, no price.
    """
    from bokeh.embed import components

    from . import report_plots

    records = list(records)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = build_table(records, baseline_label)
    steps = waterfall_steps(records, baseline_label)
    entries = entry_gains(records, baseline_label)
    both = both_references(records, baseline_label)
    baselines = choose_baselines(records, baseline_label)
    machines = machines_of(records)

    models: dict[str, Any] = {}
    sections: list[str] = []
    for index, machine in enumerate(machines):
        m_table = table[table["machine"] == machine]
        m_steps = steps[steps["machine"] == machine]
        m_records = [r for r in records if r.machine == machine]
        parts = [f'<section class="machine" data-machine="{html.escape(machine)}">']
        parts.append(f"<h2>Machine: {html.escape(machine)}</h2>")
        env_line = _environment_line(m_records, machine)
        if env_line:
            parts.append(f'<p class="meta">{html.escape(env_line)}</p>')
        sources = peak_flops_sources(records, machine)
        parts.append(
            '<p class="peak-flops">Peak FLOP/s used for MFU: '
            + html.escape("; ".join(sources) if sources else "not recorded")
            + "</p>"
        )
        for (b_machine, run, workload), base in baselines.items():
            if b_machine == machine:
                text = record_label(base) if base is not None else "none (no configuration was measured)"
                parts.append(
                    f'<p class="baseline">Run <b>{html.escape(run)}</b>, workload {html.escape(workload)}: '
                    f"speedups are over <b>{html.escape(text)}</b>, measured in the same run on this machine "
                    "(where the run measured that configuration more than once, each row divides by the "
                    "measurement nearest to it in time: the table's baseline record).</p>"
                )
        parts.append(
            f"<p class=\"spread\">Each speedup's interval divides the two rates' intervals end by end "
            f"({INTERVAL_METHOD}); a record marked thin rests on fewer than {MIN_TIMED_STEPS} timed steps: its "
            "figure may move more than its interval says.</p>"
        )
        apart = disagreement_table(m_records)
        if len(apart):
            parts.append(
                '<p class="disagreement"><b>Measured apart:</b> these configurations were measured more than '
                "once in one run and their intervals do not overlap, so the machine's speed moved between "
                "the measurements; a speedup across them is less certain than its interval says.</p>"
            )
            parts.append(html_table(apart[["run", "configuration", "measurements", "records"]], "disagreements"))
        parts.append("<h3>Waterfall</h3>")
        parts.append(html_table(format_waterfall(m_steps), "waterfall", machine))
        parts += _references_section([r for r in records if r.machine == machine], both, machine, baseline_label)
        m_entries = entries[entries["machine"] == machine]
        if len(m_entries):
            parts.append("<h3>What each kernel entry bought</h3>")
            parts.append(f'<p class="entries">{html.escape(ENTRIES_TEXT)}</p>')
            parts.append(html_table(format_table(m_entries), "entries", machine))
        plots = report_plots.machine_plots(m_table, m_steps, machine, m_entries, both[both["machine"] == machine])
        if plots is not None:
            key = f"plots_{index}"
            models[key] = report_plots.to_bokeh(plots)
            parts.append(f"{{{{{key}}}}}")
        parts.append("<h3>Every configuration</h3>")
        parts.append(html_table(format_table(m_table), "records", machine))
        failed = [f for f in failed_configurations(records) if f[0] == machine]
        parts.append("<h3>Failed configurations</h3>")
        if failed:
            parts.append('<ul class="failed-list">')
            for _, run, label, reason in failed:
                parts.append(
                    f'<li class="failed"><b>{html.escape(label)}</b> (run {html.escape(run)}): '
                    f"<pre>{html.escape(reason)}</pre></li>"
                )
            parts.append("</ul>")
        else:
            parts.append("<p>None: every configuration ran.</p>")
        parts.append("<h3>Recommended configuration</h3>")
        try:
            rec = recommend(m_records, baseline_label=baseline_label)
        except ValueError as error:
            parts.append(f"<p>{html.escape(str(error))}</p>")
        else:
            parts.append(f'<p class="recommendation">{html.escape(rec.summary())}</p>')
            parts.append(f'<pre class="python">{html.escape(rec.to_python())}</pre>')
            json_text = html.escape(rec.to_json())
            parts.append(f'<details><summary>JSON</summary><pre class="json">{json_text}</pre></details>')
            parts += _peer_section(m_records, rec, baseline_label)
        curves = convergence_of(m_records)
        parts += _convergence_section(curves)
        if curves is not None:
            models[f"convergence_{index}"] = report_plots.to_bokeh(report_plots.convergence_plot(curves))
            parts.append(f"{{{{convergence_{index}}}}}")
        parts.append("</section>")
        sections.append("\n".join(parts))

    body = "\n".join(sections)
    summary = (
        f"{len(step_records(records))} step records "
        f"({sum(1 for r in step_records(records) if not r.ok)} failed) "
        f"from {len({run_name_of(r) for r in step_records(records)})} run(s) on {len(machines)} machine(s): "
        + ", ".join(machines)
    )
    if not machines:
        body = "<p>No step records found: run notebooks 01-03 first.</p>"
    if left_out:
        items = "".join(f"<li><pre>{html.escape(line)}</pre></li>" for line in left_out)
        body = (
            f'<section class="left-out"><h2>Records left out</h2><p>{len(left_out)} line(s) of the records files '
            f"could not be read as records and are not drawn:</p><ul>{items}</ul></section>\n" + body
        )
    body += "\n" + scaling_section(records)
    monitor_html, monitor_plot = monitor_section(records)
    if monitor_plot is not None:
        models["monitor_plot"] = report_plots.to_bokeh(monitor_plot)
    body += "\n" + monitor_html
    body += doctor_sections(records)
    body = findings_html(records, baseline_label) + "\n" + job_section(records, job or JobSpec(), baseline_label) + body
    script, divs = components(models) if models else ("", {})
    for key, div in divs.items():
        body = body.replace(f"{{{{{key}}}}}", div)
    document = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
{_inline_bokeh(list(models.values()))}
{script}
</head>
<body>
<h1>{html.escape(title)}</h1>
<p class="summary">{html.escape(summary)}</p>
<p class="meta">Throughput is real (non-pad) tokens over the whole timed window (what a training job sees);
the step-time median and spread are in the records.
A speedup is a ratio of two records from one run on one machine; machines are never divided by each other.</p>
{body}
<script type="application/json" id="nbhelpers-records">{_json_for_script(records)}</script>
</body>
</html>
"""
    target = output_target(path, "output")  # a link is written through; a folder, device or pipe is refused
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(document, encoding="utf-8")
    tmp.replace(target)
    return path


def doctor_sections(records: list[RunRecord]) -> str:
    """One section per machine with a kernel-doctor record (its newest): the machine, every fused path's
    verdict with the reason, and the known slow combinations; "" without a doctor record."""
    newest: dict[str, RunRecord] = {}
    for record in records:
        if record.kind == DOCTOR_KIND and record.ok:
            held = newest.get(record.machine)
            if held is None or record.created_at >= held.created_at:
                newest[record.machine] = record
    parts = []
    for machine, record in newest.items():
        table = doctor_table(record.metrics)
        broken = table[table["verdict"] == "broken"]["path"].tolist()
        parts.append(f'<section class="doctor" data-machine="{html.escape(machine)}">')
        parts.append(f"<h2>Kernel doctor: {html.escape(machine)}</h2>")
        parts.append(f'<p class="meta">{html.escape(describe_machine(record.metrics)).replace(chr(10), "<br>")}</p>')
        verdict = f"broken, skipped by notebooks 02 and 03: {', '.join(broken)}" if broken else "no path is broken"
        parts.append(f'<p class="doctor-verdict">{html.escape(verdict)} (record {html.escape(record.record_id)}, '
                     f"{html.escape(record.created_at)})</p>")  # fmt: skip
        parts.append(html_table(table.drop(columns=["notes"]), "doctor", machine))
        notes = [note for row in record.metrics.get("paths", []) for note in row.get("notes") or []]
        if notes:
            items = "".join(f"<li>{html.escape(note)}</li>" for note in dict.fromkeys(notes))
            parts.append(f'<h3>Known slow combinations here</h3><ul class="doctor-notes">{items}</ul>')
        parts.append("</section>")
    return "\n".join(parts)


def _references_section(records: list[RunRecord], both: Any, machine: str, baseline_label: str | None) -> list[str]:
    """Every measured configuration of one machine over both references, and what the two references are."""
    lines = references_text(records, baseline_label, mark="").splitlines()
    parts = [
        "<h3>Over both references</h3>",
        f'<p class="meta">Without the workbook: {html.escape(WITHOUT_WORKBOOK_WHAT)}.</p>',
        '<ul class="references">' + "".join(f"<li>{html.escape(line[2:])}</li>" for line in lines) + "</ul>",
    ]
    shown = both[both["machine"] == machine].drop(columns=["machine", "record_id"])
    parts.append(html_table(format_table(shown), "both-references", machine))
    return parts


def _peer_section(records: list[RunRecord], rec: Any, baseline_label: str | None) -> list[str]:
    """TRL's SFTTrainer on the recommendation's workload (peer rows), and TRL run from the export."""
    table = peer_table(records, rec, baseline_label)
    parts = ["<h3>Against TRL</h3>"]
    if len(table) <= 1:
        parts.append("<p>No TRL peer rows measured (notebook 04's PEER_ROWS).</p>")
        return parts
    parts.append(
        '<p class="meta">TRL\'s SFTTrainer on the same samples and weights, one untimed epoch and timed epochs, real '
        "tokens counted on the batches its collator made (collation and its per-step logging inside the timed "
        "epoch, as in a real run; samples without a loss token are dropped by TRL). A peer row is never a "
        "baseline or a recommendation.</p>"
    )
    parts.append(html_table(format_table(table), "peers"))
    parts.append(f'<p class="export-gap">{html.escape(export_gap_text(export_gap(records, rec)))}</p>')
    return parts


def _convergence_section(result: Convergence | None) -> list[str]:
    """The recommendation's loss curve against its baseline's over many steps (the plot follows)."""
    parts = ["<h3>Convergence</h3>"]
    if result is None:
        parts.append("<p>Not measured (notebook 04's CONVERGENCE_STEPS).</p>")
        return parts
    parts.append(f'<p class="convergence">{html.escape(result.summary())}</p>')
    losses = result.frame().rename(columns={"recommended": "recommended loss", "baseline": "baseline loss"})
    parts.append(html_table(format_table(losses), "convergence"))
    return parts


def _inline_bokeh(models: list[Any]) -> str:
    """BokehJS (and what these models need) inlined; script/style URLs are dropped, so nothing is fetched.

    Other packages (panel, imported by holoviews) register models whose ``__javascript__`` URLs Bokeh
    would list for any document; the report's plots are plain Bokeh and do not use them.
    """
    from bokeh.embed.bundle import Bundle, bundle_for_objs_and_resources
    from bokeh.resources import INLINE

    if not models:
        return ""
    bundle = bundle_for_objs_and_resources(models, INLINE)
    return "\n".join(Bundle(js_raw=bundle.js_raw, css_raw=bundle.css_raw, hashes=bundle.hashes))


def _json_for_script(records: list[RunRecord]) -> str:
    """The records themselves, embedded so the report is self-describing (``</`` escaped)."""
    text = dumps([r.to_dict() for r in records])  # NaN and infinity as null: standard JSON
    return text.replace("</", "<\\/")
