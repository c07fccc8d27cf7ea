"""Which records a report covers: runs loaded by name or folder, counted per machine, failures with reasons."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from nbhelpers.analysis.records import STEP_KIND, group_key, record_label, run_name_of, step_records
from nbhelpers.analysis.tuner_choice import mark_tuner_winner
from nbhelpers.formatting import MISSING
from nbhelpers.measure.store import RunRecord, RunStore, runs_root
from nbhelpers.planning.lists import parse_list
from nbhelpers.validation import check_run_name


def _split_dirs(run_dirs: str | Sequence[str | Path] | None) -> list[str]:
    if not run_dirs:
        return []
    if isinstance(run_dirs, (str, Path)):
        return list(parse_list(str(run_dirs), None, "run_dirs", empty=True))
    return [str(p) for p in run_dirs]


def _records_path(path: Path, spec: str) -> Path:
    """The records file a run folder or records file names; FileNotFoundError (ValueError for a file of another
    kind) saying what was found instead: a folder without records.jsonl (the runs root: which runs it holds)."""
    if path.is_dir():
        records = path / RunStore.FILENAME
        if records.is_file():
            return records
        runs = sorted(p.name for p in path.iterdir() if (p / RunStore.FILENAME).is_file())
        inside = f"; it holds the run folders {', '.join(runs[:8])}" if runs else ""
        raise FileNotFoundError(f"{spec!r}: a folder without {RunStore.FILENAME}, so no run folder{inside}")
    if not path.is_file() or path.suffix != ".jsonl":
        raise ValueError(f"{spec!r}: neither a run folder nor a records file (.jsonl)")
    return path


def store_for(spec: str) -> RunStore:
    """A run folder, a records.jsonl file, or a run name under the runs root."""
    path = Path(spec).expanduser()
    if path.exists():
        return RunStore(_records_path(path, spec))
    if any(mark in str(spec) for mark in ("/", "\\")) or str(spec).startswith((".", "~")):
        raise FileNotFoundError(f"no run folder or records file at {spec!r}")
    check_run_name(spec, "run folder")  # not an existing path: a run name, one folder inside the runs root
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
        stores.append(RunStore(runs_root() / check_run_name(run_name)))
    stores.extend(store_for(spec) for spec in _split_dirs(run_dirs))
    seen: set[str] = set()
    records: list[RunRecord] = []
    for store in stores:
        loaded = store.load()
        mark_tuner_winner(loaded, store.path.parent)  # the tuner's winner, as its tuned.json names it
        for record in loaded:
            if record.record_id not in seen:
                seen.add(record.record_id)
                records.append(record)
    return records


def records_overview(records: Iterable[RunRecord]) -> Any:
    """Per machine and run: step records ok / failed, records of other kinds, the peak FLOP/s source."""
    import pandas as pd

    records = list(records)
    counts: dict[tuple[str, str, str], dict[str, Any]] = {}
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
