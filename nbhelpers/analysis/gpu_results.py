"""Shipped GPU measurements (``benchmarks/gpu/``): records measured elsewhere, shown on a CPU.

The one reader of that folder. Records are filed by what they measure (``<model>/<question>/<experiment>.jsonl``,
a ``manifest.jsonl`` beside them). A folder shows the record files directly in it and, in its sub-folders, those
its ``validity.json`` names; that file says per record id whether each record is valid, and why not (``source``:
the file, relative to the folder). The shelves the notebooks read (``benchmarks/gpu/`` for the dense family,
``benchmarks/gpu/hybrid/`` for the hybrid one) hold no record file at their top, so they show what their
``validity.json`` names and nothing else filed beside it::

    {"<record_id>": {"source": "qwen3-1.7b/padding-strategies-epoch/padding-epoch-default.jsonl", "label": "...",
                     "validity": "valid"}}

A record without an entry carries no note (and counts as valid). Record files: JSON lines (``.jsonl``) or JSON
holding one record, a list of records or ``{"records": [...]}``; each record is a RunRecord dict. Summary rows
(``h200_summary.json``, written from the records and that file by ``benchmarks/summarize_gpu.py``) are not records
and are skipped. The folder may be absent (a copied notebook, a wheel install): then there is nothing to show, and
no error.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from nbhelpers.kernels.liger import LIGER_BACKEND
from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.jsonl import read_lines
from nbhelpers.measure.store import RunRecord, records_frame
from nbhelpers.models.families import family_of_model
from nbhelpers.resources import GPU_RESULTS_DIR

VALIDITY_FILE = "validity.json"
NOT_RECORDS = (VALIDITY_FILE, "manifest.jsonl")  # files beside the records that hold none

SHOWN_COLUMNS = (
    "machine", "source", "label", "status", "validity", "kernels", "real_tokens_per_s", "step_time_median_s",
    "first_step_s", "peak_memory_gib", "kernels_per_step", "loss_first", "grad_norm_first", "reason",
)  # fmt: skip


def _entries(path: Path) -> list[Any]:
    if path.suffix == ".jsonl":
        return read_lines(path, what="line", stacklevel=4)
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        data = data["records"]
    return data if isinstance(data, list) else [data]


def _is_record(entry: Any) -> bool:
    return isinstance(entry, dict) and "config" in entry and "environment" in entry


def _is_summary_row(entry: Any) -> bool:
    return isinstance(entry, dict) and "record_id" in entry and "validity" in entry and "environment" not in entry


def _fill_machine(records: list[RunRecord], source: str) -> None:
    """Give records without an environment (older failed ones) the one machine of the others, if unique."""
    machines = {_machine_keys(r) for r in records if r.environment.get("device_name")}
    if len(machines) != 1:
        return
    device, host, device_type = machines.pop()
    for record in records:
        if not record.environment.get("device_name"):
            record.environment = {
                **record.environment, "device_name": device, "hostname": host, "device_type": device_type,
                "inferred_from": source,
            }  # fmt: skip


def _scratch_dataset_named(record: RunRecord) -> None:
    """A dataset file the suite generated in its call's scratch folder is named by its file name alone.

    The GPU suite writes its synthetic sets (same generator, same seed) into each call's output folder, so
    the same set appears under /tmp/d/, /tmp/x/, ...; by name, records of different calls share a workload.
    """
    dataset = str(record.config.get("dataset", ""))
    if Path(dataset).is_absolute():
        record.config = {**record.config, "dataset": Path(dataset).name}


def _machine_keys(record: RunRecord) -> tuple[Any, Any, Any]:
    env = record.environment
    return env.get("device_name"), env.get("hostname"), env.get("device_type")


def load_validity(folder: str | Path | None = None) -> dict[str, str]:
    """record_id -> validity note ("valid", "invalid: why", ...) from ``folder/validity.json``; {} without one.

    An unreadable file, or an entry without a ``validity`` string, is skipped with a warning.
    """
    path = (Path(folder) if folder is not None else GPU_RESULTS_DIR) / VALIDITY_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        warnings.warn(f"{path}: skipped, not readable JSON ({error})", stacklevel=2)
        return {}
    if not isinstance(data, dict):
        warnings.warn(f"{path}: skipped, not an object of record_id -> entry", stacklevel=2)
        return {}
    notes: dict[str, str] = {}
    for record_id, entry in data.items():
        note = entry.get("validity") if isinstance(entry, dict) else None
        if isinstance(note, str):
            notes[str(record_id)] = note
        else:
            warnings.warn(f"{path}: {record_id}: skipped an entry without a validity note", stacklevel=2)
    return notes


def family_results_dir(model: str) -> Path:
    """The shipped GPU records of ``model``'s family: its folder under benchmarks/gpu (the hybrid family's
    ``hybrid/``), the top folder for a family without one or a model of no known family."""
    family = family_of_model(model)
    folder = GPU_RESULTS_DIR / family.shipped_results if family and family.shipped_results else GPU_RESULTS_DIR
    return folder if folder.is_dir() else GPU_RESULTS_DIR


def shelf_sources(folder: str | Path) -> list[str]:
    """The record files a shelf shows, as its ``validity.json`` names them (relative paths, sorted); [] without one."""
    path = Path(folder) / VALIDITY_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return []  # load_validity says why
    entries = data.values() if isinstance(data, dict) else []
    return sorted({str(e["source"]) for e in entries if isinstance(e, dict) and isinstance(e.get("source"), str)})


def record_files(folder: str | Path) -> list[Path]:
    """The files :func:`load_gpu_records` reads, in the order of their paths: every JSON or JSON-lines file directly
    in the folder, and those in its sub-folders that its ``validity.json`` names (one it names but lacks is skipped
    with a warning)."""
    root = Path(folder)
    found = {p for p in [*root.glob("*.json"), *root.glob("*.jsonl")] if p.name not in NOT_RECORDS}
    for source in (s for s in shelf_sources(root) if "/" in s):
        path = root / source
        if path.is_file():
            found.add(path)
        else:
            warnings.warn(f"{root / VALIDITY_FILE} names {source}, which is absent", stacklevel=3)
    return sorted(found)


def load_gpu_records(folder: str | Path | None = None) -> list[RunRecord]:
    """Every record of ``folder``'s record files (default: the repo's benchmarks/gpu; :func:`record_files`), in the
    order of their paths.

    ``artifacts["source"]`` names each record's file and ``metrics["validity"]`` carries its note from
    ``validity.json``. Unreadable files, torn or corrupt lines and entries that are neither records nor
    summary rows are skipped with a warning; a missing folder gives [].
    """
    root = Path(folder) if folder is not None else GPU_RESULTS_DIR
    if not root.is_dir():
        return []
    records: list[RunRecord] = []
    for path in record_files(root):
        try:
            entries = _entries(path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            warnings.warn(f"{path}: skipped, not readable JSON ({error})", stacklevel=2)
            continue
        found = []
        for entry in entries:
            if _is_record(entry):
                record = RunRecord.from_dict(entry)
                record.artifacts = {**record.artifacts, "source": path.relative_to(root).as_posix()}
                _scratch_dataset_named(record)
                found.append(record)
            elif not _is_summary_row(entry):
                warnings.warn(f"{path}: skipped an entry that is not a run record", stacklevel=2)
        _fill_machine(found, f"the other records of {path.name}")
        records.extend(found)
    _fill_machine(records, f"the other records of {root.name}/")
    validity = load_validity(root)
    for record in records:
        if record.record_id in validity:
            record.metrics = {**record.metrics, "validity": validity[record.record_id]}
    return records


def gpu_results_frame(records: list[RunRecord], columns: tuple[str, ...] | None = SHOWN_COLUMNS) -> Any:
    """One row per shipped record, machine (device @ host) and source file first; ``columns=None`` keeps all."""
    frame = records_frame(records)
    if frame.empty:
        return frame
    frame.insert(0, "source", [r.artifacts.get("source", "") for r in records])
    frame["kernels"] = [r.config.get("kernels", "") for r in records]
    frame["validity"] = [r.metrics.get("validity", "") for r in records]
    shown = [c for c in columns if c in frame.columns] if columns is not None else list(frame.columns)
    return frame[shown]


FAILED_COLUMNS = ("machine", "source", "label", "reason")  # a failed shipped row: what it was and why


def measured_and_failed(frame: Any) -> tuple[Any, Any]:
    """:func:`gpu_results_frame` split in two: the rows that measured (their figures), and the failed ones in a
    short table of what and why (their figure columns would be empty)."""
    if frame.empty or "status" not in frame.columns:
        return frame, frame.iloc[0:0]
    failed = frame["status"] != "ok"
    measured = frame[~failed].drop(columns=["reason"], errors="ignore").reset_index(drop=True)
    return measured, frame[failed][[c for c in FAILED_COLUMNS if c in frame.columns]].reset_index(drop=True)


def describe_gpu_results(records: list[RunRecord], folder: str | Path | None = None, device: str = "cpu") -> str:
    """One line: how many shipped records from which machines, or that there are none (and where looked); on a
    GPU, that the notebook's own rows stand in for them."""
    root = Path(folder) if folder is not None else GPU_RESULTS_DIR
    if device != "cpu":
        return (
            f"On {device} this notebook measured its own rows above; the shipped records of {root} are shown "
            "when it runs on a CPU."
        )
    if not records:
        return f"No shipped GPU results: {root} is absent or holds no records; this section is skipped."
    machines = sorted({r.machine for r in records})
    return f"{len(records)} shipped GPU record(s) from {root.name}/, measured on: {'; '.join(machines)}"


def liger_switch_table(records: list[RunRecord]) -> Any:
    """Eager against each Liger switch set, per machine, workload, padding and attention (valid ok records).

    Only groups holding an eager record and at least one Liger record are shown; "vs eager" divides within the
    group. A ``liger (...)`` row names its switches where they are not the default set (see
    ``records.kernels_label``), so what one kernel (say, the fused linear cross-entropy) costs on a padding
    shows as the gap between two Liger rows.
    """
    import pandas as pd

    from nbhelpers.analysis.records import is_valid, kernels_label, workload_of

    validity = {r.record_id: str(r.metrics.get("validity", "")) for r in records}
    rows = []
    for record in records:
        kernels = str(record.config.get("kernels", ""))
        if record.kind != "step" or not record.ok or kernels not in (BASELINE_BACKEND, LIGER_BACKEND):
            continue
        if not is_valid(record, validity):
            continue
        rows.append({
            "machine": record.machine, "workload": workload_of(record), "padding": record.config.get("padding"),
            "attention": record.config.get("attn_implementation"), "kernels": kernels_label(record),
            "real tok/s": record.metrics.get("real_tokens_per_s"), "peak GiB": record.metrics.get("peak_memory_gib"),
            "kernels/step": record.metrics.get("kernels_per_step"), "label": record.label,
        })  # fmt: skip
    columns = ["machine", "workload", "padding", "attention", "kernels", "real tok/s", "vs eager", "peak GiB",
               "kernels/step", "label"]  # fmt: skip
    frame = pd.DataFrame(rows, columns=[c for c in columns if c != "vs eager"])
    if frame.empty:
        return pd.DataFrame(columns=columns)
    keys = ["machine", "workload", "padding", "attention"]
    frame = frame.drop_duplicates(subset=[*keys, "kernels"])
    eager = frame[frame["kernels"] == BASELINE_BACKEND].set_index(keys)["real tok/s"]
    kept = frame.groupby(keys, sort=False)["kernels"].transform(
        lambda k: (k == BASELINE_BACKEND).any() and (k != BASELINE_BACKEND).any()
    )
    frame = frame[kept.astype(bool)].copy()
    frame["vs eager"] = [row["real tok/s"] / eager.loc[tuple(row[keys])] for _, row in frame.iterrows()]
    return frame[columns].sort_values(keys, kind="stable").reset_index(drop=True)


FLCE = "fused_linear_cross_entropy"


def flce_comparison(records: list[RunRecord]) -> Any:
    """Liger with its fused linear cross-entropy against Liger without it, where one machine and workload
    measured both on the same padding and attention (valid ok step records): the evidence behind the default
    switch set. Columns: machine, workload, padding, attention, with/without FLCE tok/s, without / with."""
    import pandas as pd

    from nbhelpers.analysis.records import is_valid, workload_of

    validity = {r.record_id: str(r.metrics.get("validity", "")) for r in records}
    found: dict[tuple[Any, ...], dict[bool, float]] = {}
    for record in records:
        tok_s = record.metrics.get("real_tokens_per_s")
        if record.kind != "step" or not record.ok or record.config.get("kernels") != LIGER_BACKEND or not tok_s:
            continue
        if not is_valid(record, validity):
            continue
        cfg = record.config
        key = (record.machine, workload_of(record), cfg.get("padding"), cfg.get("attn_implementation"))
        found.setdefault(key, {}).setdefault(FLCE in (record.config.get("liger_kernels") or ()), float(tok_s))
    columns = ["machine", "workload", "padding", "attention", "with FLCE tok/s", "without FLCE tok/s", "without / with"]
    rows = [
        [*key, both[True], both[False], both[False] / both[True]]
        for key, both in found.items()
        if True in both and False in both
    ]
    return pd.DataFrame(rows, columns=columns)


def describe_flce(comparison: Any) -> str:
    """One paragraph from :func:`flce_comparison`: where dropping the fused linear cross-entropy was faster."""
    if comparison.empty:
        return "No shipped GPU records measure Liger with and without its fused linear cross-entropy side by side."
    parts = [
        f"{row['padding']} rows with {row['attention']} on {row['machine']}: {row['with FLCE tok/s']:,.0f} real tok/s "
        f"with it, {row['without FLCE tok/s']:,.0f} without ({row['without / with']:.2f}x)"
        for _, row in comparison.iterrows()
    ]
    return "Liger with and without its fused linear cross-entropy, measured side by side: " + "; ".join(parts) + "."
