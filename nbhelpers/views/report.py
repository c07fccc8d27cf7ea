"""The speedup table, the waterfall and the standalone HTML report, computed from RunRecords only.

A speedup is a ratio of two records from one run on one machine: :func:`speedup` refuses anything
else with :class:`CrossMachineError`. Every table and report is grouped by machine (and run), and a
failed configuration stays in the table with its reason.
"""

from __future__ import annotations

import html
import json
import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.store import RunRecord, RunStore, runs_root

STEP_KIND = "step"
KERNEL_FIELDS = ("kernels", "liger_kernels", "attn_implementation")
PADDING_FIELDS = ("padding", "pad_to_multiple_of", "num_buckets", "token_budget")
TABLE_COLUMNS = (
    "label",
    "machine",
    "run",
    "status",
    "reason",
    "real tok/s",
    "speedup",
    "MFU",
    "peak memory GiB",
    "kernels/step",
    "padding fraction",
    "parity",
    "baseline",
    "record_id",
)
WATERFALL_STAGES = ("baseline", "kernels only", "padding only", "best overall")
WATERFALL_COLUMNS = ("machine", "run", "workload", "stage", "label", "real tok/s", "speedup", "step gain", "record_id")
MISSING = "—"


class CrossMachineError(ValueError):
    """Two records that may not be divided: different machines or different runs."""


# ----------------------------------------------------------------------------------------------
# Record helpers


def record_label(record: RunRecord) -> str:
    """The configuration's label, or one derived from its settings like RunConfig.name."""
    cfg = record.config
    if cfg.get("label"):
        return str(cfg["label"])
    if cfg.get("name"):
        return str(cfg["name"])
    if "kernels" in cfg or "padding" in cfg:
        return (
            f"{cfg.get('kernels', '?')}/{cfg.get('padding', '?')}/{cfg.get('attn_implementation', '?')}"
            f"/b{cfg.get('batch_size', '?')}x{cfg.get('max_length', '?')}"
        )
    return record.record_id


def run_name_of(record: RunRecord) -> str:
    return str(record.config.get("run_name", ""))


WORKLOAD_FIELDS = ("model", "dataset", "batch_size", "max_length", "num_samples", "dtype", "seed", "steps", "warmup",
                   "prompt_field", "response_field", "use_chat_template", "timing")  # fmt: skip


def _timed_window(cfg: dict[str, Any]) -> str:
    if cfg.get("timing") == "epoch":
        return "one epoch timed after one untimed"
    return f"{cfg.get('warmup', '?')}+{cfg.get('steps', '?')} steps"


def workload_of(record: RunRecord) -> str:
    """What the step trains on: model, data, batch shape, dtype; speedups only divide equal workloads."""
    cfg = record.config
    text = (
        f"{cfg.get('model', '?')} on {cfg.get('dataset', '?')}, b{cfg.get('batch_size', '?')}x"
        f"{cfg.get('max_length', '?')}, {cfg.get('num_samples', '?')} samples, {cfg.get('dtype', '?')}, "
        f"seed {cfg.get('seed', '?')}, {_timed_window(cfg)}"
    )
    fields = (cfg.get("prompt_field"), cfg.get("response_field"), cfg.get("use_chat_template"))
    if fields not in ((None, None, None), ("prompt", "response", False)):
        text += f", fields {fields[0]}/{fields[1]}" + (", chat template" if fields[2] else "")
    return text


def _workload_fields(record: RunRecord) -> tuple[Any, ...]:
    defaults = {"timing": "steps"}  # records written before epoch timing existed timed steps
    return tuple(record.config.get(f, defaults.get(f)) for f in WORKLOAD_FIELDS)


def group_key(record: RunRecord) -> tuple[str, str, str]:
    """(machine, run name, workload): the only set of records whose throughputs may be divided."""
    return (record.machine, run_name_of(record), workload_of(record))


def tokens_per_s(record: RunRecord) -> float | None:
    """Real (non-pad) tokens per second, or None when the record has no usable value."""
    value = record.metrics.get("real_tokens_per_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def parity_status(record: RunRecord) -> str:
    parity = record.metrics.get("parity")
    if isinstance(parity, dict):
        return str(parity.get("status", "not checked"))
    if isinstance(parity, str):
        return parity
    return "not checked"


def is_measured(record: RunRecord) -> bool:
    """An ok step record with a throughput."""
    return record.kind == STEP_KIND and record.ok and tokens_per_s(record) is not None


def is_candidate(record: RunRecord) -> bool:
    """A measured record that may be recommended: its parity check did not fail."""
    return is_measured(record) and parity_status(record) != "fail"


def step_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    return [r for r in records if r.kind == STEP_KIND]


def _number(record: RunRecord, key: str) -> float:
    value = record.metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _groups(records: Iterable[RunRecord]) -> dict[tuple[str, str], list[RunRecord]]:
    """Step records grouped by (machine, run), in order of first appearance."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    for record in step_records(records):
        groups.setdefault(group_key(record), []).append(record)
    return groups


def machines_of(records: Iterable[RunRecord]) -> list[str]:
    seen: list[str] = []
    for record in step_records(records):
        if record.machine not in seen:
            seen.append(record.machine)
    return seen


def _fastest(records: Sequence[RunRecord]) -> RunRecord | None:
    """Highest real tok/s; ties go to the lower peak memory, then to the earlier record."""
    best = None
    for record in records:
        if best is None:
            best = record
            continue
        a, b = tokens_per_s(record), tokens_per_s(best)
        mem_a, mem_b = _number(record, "peak_memory_gib"), _number(best, "peak_memory_gib")
        mem_a = math.inf if math.isnan(mem_a) else mem_a
        mem_b = math.inf if math.isnan(mem_b) else mem_b
        if a > b or (a == b and mem_a < mem_b):
            best = record
    return best


# ----------------------------------------------------------------------------------------------
# Baselines and speedups


def default_baseline(records: Sequence[RunRecord]) -> RunRecord | None:
    """The first measured record with kernels "eager" and padding "static", else the first measured one."""
    measured = [r for r in records if is_measured(r)]
    for record in measured:
        if record.config.get("kernels") == BASELINE_BACKEND and record.config.get("padding") == "static":
            return record
    return measured[0] if measured else None


def choose_baselines(
    records: Iterable[RunRecord], baseline_label: str | None = None
) -> dict[tuple[str, str], RunRecord | None]:
    """The baseline of every (machine, run) group.

    With ``baseline_label`` a group uses its first measured record of that label; a group without one
    falls back to the default rule (with a warning). A label found in no group at all is an error.
    """
    groups = _groups(records)
    chosen: dict[tuple[str, str], RunRecord | None] = {}
    found_anywhere = False
    for key, members in groups.items():
        match = None
        if baseline_label:
            match = next((r for r in members if is_measured(r) and record_label(r) == baseline_label), None)
            found_anywhere = found_anywhere or match is not None
        chosen[key] = match or default_baseline(members)
    if baseline_label and groups and not found_anywhere:
        labels = sorted({record_label(r) for r in step_records(records) if is_measured(r)})
        raise ValueError(
            f"baseline_label={baseline_label!r} matches no measured step record; "
            f"measured labels are: {', '.join(labels) or '(none)'}"
        )
    if baseline_label:
        for (machine, run, _workload), base in chosen.items():
            if base is not None and record_label(base) != baseline_label:
                warnings.warn(
                    f"run {run!r} on {machine}: no measured {baseline_label!r}; "
                    f"baseline is {record_label(base)!r} instead",
                    stacklevel=2,
                )
    return chosen


def speedup(record: RunRecord, baseline: RunRecord) -> float:
    """Real tok/s of ``record`` over ``baseline``: both from one run on one machine, both measured."""
    if record.machine != baseline.machine:
        raise CrossMachineError(
            f"cannot divide {record_label(record)!r} on {record.machine!r} by {record_label(baseline)!r} on "
            f"{baseline.machine!r}: a speedup is only a ratio of records from one run on one machine "
            "(same samples, same order, same device); compare machines by their own baselines instead"
        )
    if run_name_of(record) != run_name_of(baseline):
        raise CrossMachineError(
            f"cannot divide {record_label(record)!r} from run {run_name_of(record)!r} by "
            f"{record_label(baseline)!r} from run {run_name_of(baseline)!r}: a speedup is only a ratio of "
            "records from one run on one machine"
        )
    if _workload_fields(record) != _workload_fields(baseline):
        raise ValueError(
            f"cannot divide {record_label(record)!r} ({workload_of(record)}) by {record_label(baseline)!r} "
            f"({workload_of(baseline)}): a speedup compares one workload (same model, data and batch shape)"
        )
    for which in (record, baseline):
        if not is_measured(which):
            raise ValueError(
                f"{record_label(which)!r} has no measured throughput (status {which.status!r}"
                + (f": {which.reason}" if which.reason else "")
                + "), so no speedup can be computed"
            )
    base = tokens_per_s(baseline)
    if not base:
        raise ValueError(f"baseline {record_label(baseline)!r} has zero throughput")
    return tokens_per_s(record) / base


# ----------------------------------------------------------------------------------------------
# Tables


def build_table(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """One row per step record (failed ones included, with their reason), grouped by machine and run.

    ``speedup`` is the record's real tok/s over its group's baseline (see :func:`choose_baselines`).
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    rows = []
    for key, members in _groups(records).items():
        base = baselines[key]
        for record in members:
            ratio = speedup(record, base) if base is not None and is_measured(record) else math.nan
            rows.append(
                {
                    "label": record_label(record),
                    "machine": record.machine,
                    "run": run_name_of(record),
                    "status": record.status,
                    "reason": record.reason,
                    "real tok/s": tokens_per_s(record) if is_measured(record) else math.nan,
                    "speedup": ratio,
                    "MFU": _number(record, "mfu"),
                    "peak memory GiB": _number(record, "peak_memory_gib"),
                    "kernels/step": _number(record, "kernels_per_step"),
                    "padding fraction": _number(record, "padding_fraction"),
                    "parity": parity_status(record) if record.ok else MISSING,
                    "baseline": record_label(base) if base is not None else "",
                    "record_id": record.record_id,
                }
            )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_rate(value: Any) -> str:
    """Tokens per second: thousands separators, more decimals for small (CPU) rates."""
    if _missing(value):
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_speedup(value: Any) -> str:
    return MISSING if _missing(value) else f"{value:.2f}x"


def fmt_percent(value: Any) -> str:
    """A fraction (0.08) as a percentage (8.0%)."""
    return MISSING if _missing(value) else f"{100 * value:.1f}%"


def fmt_gib(value: Any) -> str:
    return MISSING if _missing(value) else f"{value:.2f}"


def fmt_count(value: Any) -> str:
    return MISSING if _missing(value) else f"{int(round(value)):,}"


def fmt_reason(value: Any, limit: int = 160) -> str:
    """First line of a failure reason, shortened for a table cell."""
    if not value:
        return ""
    line = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


COLUMN_FORMATS = {
    "real tok/s": fmt_rate,
    "speedup": fmt_speedup,
    "MFU": fmt_percent,
    "peak memory GiB": fmt_gib,
    "kernels/step": fmt_count,
    "padding fraction": fmt_percent,
    "reason": fmt_reason,
    "step gain": fmt_speedup,
}


def format_table(table: Any, drop: Sequence[str] = ("record_id", "baseline")) -> Any:
    """The table as display strings: the notebook shows this, and the HTML report embeds the same."""
    shown = table.drop(columns=[c for c in drop if c in table.columns])
    out = shown.copy()
    for column in shown.columns:
        formatter = COLUMN_FORMATS.get(column)
        out[column] = [formatter(v) if formatter else ("" if _missing(v) else str(v)) for v in shown[column]]
    return out


# ----------------------------------------------------------------------------------------------
# Waterfall


def _same(a: RunRecord, b: RunRecord, fields: Sequence[str]) -> bool:
    return all(a.config.get(f) == b.config.get(f) for f in fields)


def _only(record: RunRecord, base: RunRecord, changed: Sequence[str], kept: Sequence[str]) -> bool:
    """``record`` differs from ``base`` in some of ``changed`` and in none of ``kept``."""
    return _same(record, base, kept) and not _same(record, base, changed)


def waterfall_steps(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """Per (machine, run): baseline -> best kernels-only -> best padding-only -> best overall.

    Every stage is a measured record (ok, parity not "fail"); nothing is multiplied or assumed.
    "Kernels only" means the padding settings equal the baseline's and the kernel settings
    (kernels, Liger switches, attention) differ; "padding only" is the reverse. A stage with no such
    record is a row with label "not measured" and no numbers. ``speedup`` is cumulative (over the
    baseline); ``step gain`` is over the previous measured stage.
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    rows = []
    for key, members in _groups(records).items():
        base = baselines[key]
        if base is None:
            continue
        candidates = [r for r in members if is_candidate(r)]
        kernels_only = [r for r in candidates if _only(r, base, changed=KERNEL_FIELDS, kept=PADDING_FIELDS)]
        padding_only = [r for r in candidates if _only(r, base, changed=PADDING_FIELDS, kept=KERNEL_FIELDS)]
        stages = {
            "baseline": base,
            "kernels only": _fastest(kernels_only),
            "padding only": _fastest(padding_only),
            "best overall": _fastest(candidates + [base]),
        }
        previous = base
        for stage, record in stages.items():
            row: dict[str, Any] = {"machine": key[0], "run": key[1], "workload": key[2], "stage": stage}
            if record is None:
                row.update(
                    {
                        "label": "not measured",
                        "real tok/s": math.nan,
                        "speedup": math.nan,
                        "step gain": math.nan,
                        "record_id": "",
                    }
                )
            else:
                row.update(
                    {
                        "label": record_label(record),
                        "real tok/s": tokens_per_s(record),
                        "speedup": speedup(record, base),
                        "step gain": speedup(record, previous),
                        "record_id": record.record_id,
                    }
                )
                previous = record
            rows.append(row)
    return pd.DataFrame(rows, columns=list(WATERFALL_COLUMNS))


def format_waterfall(steps: Any) -> Any:
    return format_table(steps, drop=("record_id",))


# ----------------------------------------------------------------------------------------------
# Loading and overview


def _split_dirs(run_dirs: str | Sequence[str | Path] | None) -> list[str]:
    if not run_dirs:
        return []
    if isinstance(run_dirs, (str, Path)):
        return [part.strip() for part in str(run_dirs).split(",") if part.strip()]
    return [str(p) for p in run_dirs]


def _store_for(spec: str) -> RunStore:
    """A run folder, a records.jsonl file, or a run name under the runs root."""
    path = Path(spec).expanduser()
    if path.exists():
        return RunStore(path)
    candidate = runs_root() / spec
    if candidate.exists():
        return RunStore(candidate)
    raise FileNotFoundError(f"no run folder or records file at {spec!r} (also looked in {candidate})")


def load_report_records(
    run_name: str | None = "default", run_dirs: str | Sequence[str | Path] | None = ""
) -> list[RunRecord]:
    """Records of ``run_name`` (under the runs root) plus those of extra run folders, without duplicates.

    ``run_dirs`` is a comma-separated string or a list of folders, records files or run names.
    """
    stores: list[RunStore] = []
    if run_name:
        stores.append(RunStore(runs_root() / run_name))
    stores.extend(_store_for(spec) for spec in _split_dirs(run_dirs))
    seen: set[str] = set()
    records: list[RunRecord] = []
    for store in stores:
        for record in store.load():
            if record.record_id not in seen:
                seen.add(record.record_id)
                records.append(record)
    return records


def records_overview(records: Iterable[RunRecord]) -> Any:
    """Per machine and run: step records ok / failed, records of other kinds, the peak FLOP/s source."""
    import pandas as pd

    records = list(records)
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        key = group_key(record)
        row = counts.setdefault(
            key, {"machine": key[0], "run": key[1], "steps ok": 0, "steps failed": 0, "other records": 0}
        )
        if record.kind != STEP_KIND:
            row["other records"] += 1
        elif record.ok:
            row["steps ok"] += 1
        else:
            row["steps failed"] += 1
    for row in counts.values():
        row["peak FLOP/s source"] = "; ".join(peak_flops_sources(records, row["machine"])) or MISSING
    columns = ["machine", "run", "steps ok", "steps failed", "other records", "peak FLOP/s source"]
    return pd.DataFrame(list(counts.values()), columns=columns)


def peak_flops_sources(records: Iterable[RunRecord], machine: str) -> list[str]:
    """Distinct peak FLOP/s sources (and values) used for MFU on one machine."""
    sources: list[str] = []
    for record in step_records(records):
        if record.machine != machine or not record.ok:
            continue
        source = record.metrics.get("peak_flops_source")
        peak = record.metrics.get("peak_flops")
        if not source and not peak:
            continue
        text = str(source or "unknown source")
        if isinstance(peak, (int, float)) and not isinstance(peak, bool) and peak > 0:
            text += f" ({peak / 1e12:,.1f} TFLOP/s)"
        if text not in sources:
            sources.append(text)
    return sources


def failed_configurations(records: Iterable[RunRecord]) -> list[tuple[str, str, str, str]]:
    """(machine, run, label, full reason) of every failed step record."""
    return [
        (r.machine, run_name_of(r), record_label(r), r.reason or "(no reason recorded)")
        for r in step_records(records)
        if not r.ok
    ]


def failed_table(records: Iterable[RunRecord]) -> Any:
    """The failed configurations with their full reasons, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(failed_configurations(records), columns=["machine", "run", "label", "reason"])


# ----------------------------------------------------------------------------------------------
# HTML report

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #222; line-height: 1.45; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2rem; margin-top: 2.5rem; }
table.nbh-table { border-collapse: collapse; font-size: 0.88rem; margin: 0.6rem 0 1.2rem; }
table.nbh-table th, table.nbh-table td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; text-align: right; }
table.nbh-table th { background: #f3f3f3; }
table.nbh-table td:first-child, table.nbh-table td.text { text-align: left; }
.failed { color: #a40000; } .meta { color: #555; font-size: 0.9rem; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 0.7rem; overflow-x: auto; font-size: 0.85rem; }
"""


_TEXT_COLUMNS = ("label", "machine", "run", "status", "reason", "parity", "stage")


def _html_table(frame: Any, css_class: str, machine: str = "") -> str:
    """A formatted (string) DataFrame as an HTML table; each cell carries its column name."""
    columns = list(frame.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for column in columns:
            value = str(row[column])
            cls = ' class="text"' if column in _TEXT_COLUMNS else ""
            cells.append(f'<td data-col="{html.escape(str(column))}"{cls}>{html.escape(value)}</td>')
        status = row.get("status", "ok") if hasattr(row, "get") else "ok"
        row_class = ' class="failed"' if status not in ("ok", "") and "status" in columns else ""
        body.append(f"<tr{row_class}>{''.join(cells)}</tr>")
    return (
        f'<table class="nbh-table {css_class}" data-machine="{html.escape(machine)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


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
) -> Path:
    """Write a standalone HTML report (Bokeh resources inline: opens offline) and return its path.

    One section per machine: its peak FLOP/s source, waterfall, plots, the full table (formatted as
    in the notebook), failed configurations with their reasons and the recommended configuration.
    """
    from bokeh.embed import components

    from nbhelpers.analysis.recommend import recommend

    from . import report_plots

    records = list(records)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = build_table(records, baseline_label)
    steps = waterfall_steps(records, baseline_label)
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
                    f"speedups are over <b>{html.escape(text)}</b>, measured in the same run on this machine.</p>"
                )
        parts.append("<h3>Waterfall</h3>")
        parts.append(_html_table(format_waterfall(m_steps), "waterfall", machine))
        plots = report_plots.machine_plots(m_table, m_steps, machine)
        if plots is not None:
            key = f"plots_{index}"
            models[key] = report_plots.to_bokeh(plots)
            parts.append(f"{{{{{key}}}}}")
        parts.append("<h3>Every configuration</h3>")
        parts.append(_html_table(format_table(m_table), "records", machine))
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
        parts.append("</section>")
        sections.append("\n".join(parts))

    script, divs = components(models) if models else ("", {})
    body = "\n".join(sections)
    for key, div in divs.items():
        body = body.replace(f"{{{{{key}}}}}", div)
    summary = (
        f"{len(step_records(records))} step records "
        f"({sum(1 for r in step_records(records) if not r.ok)} failed) "
        f"from {len({run_name_of(r) for r in step_records(records)})} run(s) on {len(machines)} machine(s): "
        + ", ".join(machines)
    )
    if not machines:
        body = "<p>No step records found: run notebooks 01-03 first.</p>"
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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(document, encoding="utf-8")
    tmp.replace(path)
    return path


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
    text = json.dumps([r.to_dict() for r in records], sort_keys=True, default=str)
    return text.replace("</", "<\\/")
