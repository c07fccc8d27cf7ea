"""Shipped GPU measurements (``benchmarks/gpu/*.json``): records measured elsewhere, shown on a CPU.

A file may hold one record, a list of records, ``{"records": [...]}``, or JSON lines (``.jsonl``);
each record is a RunRecord dict. The folder may be absent (a copied notebook, a wheel install):
then there is nothing to show, and no error.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from .results import RunRecord, records_frame

GPU_RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"
SHOWN_COLUMNS = (
    "machine", "source", "label", "kind", "status", "kernels", "real_tokens_per_s", "step_time_median_s",
    "first_step_s", "peak_memory_gib", "kernels_per_step", "loss_first", "grad_norm_first", "parity", "reason",
)  # fmt: skip


def _record_dicts(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        data = data["records"]
    return data if isinstance(data, list) else [data]


def load_gpu_records(folder: str | Path | None = None) -> list[RunRecord]:
    """Every record in ``folder`` (default: the repo's benchmarks/gpu), files in name order.

    A file that is not JSON or holds no records is skipped with a warning; a missing folder gives [].
    Each record's ``artifacts["source"]`` names its file.
    """
    root = Path(folder) if folder is not None else GPU_RESULTS_DIR
    if not root.is_dir():
        return []
    records = []
    for path in sorted([*root.glob("*.json"), *root.glob("*.jsonl")]):
        try:
            items = _record_dicts(path)
        except (OSError, json.JSONDecodeError) as error:
            warnings.warn(f"{path}: skipped, not readable JSON ({error})", stacklevel=2)
            continue
        for item in items:
            if not isinstance(item, dict) or "config" not in item:
                warnings.warn(f"{path}: skipped an entry that is not a run record", stacklevel=2)
                continue
            record = RunRecord.from_dict(item)
            record.artifacts = {**record.artifacts, "source": path.name}
            records.append(record)
    return records


def gpu_results_frame(records: list[RunRecord], columns: tuple[str, ...] | None = SHOWN_COLUMNS) -> Any:
    """One row per shipped record, machine (device @ host) and source file first; ``columns=None`` keeps all."""
    frame = records_frame(records)
    if frame.empty:
        return frame
    frame.insert(0, "source", [r.artifacts.get("source", "") for r in records])
    frame["kernels"] = [r.config.get("kernels", "") for r in records]
    frame["parity"] = [(r.metrics.get("parity") or {}).get("status", "not checked") for r in records]
    shown = [c for c in columns if c in frame.columns] if columns is not None else list(frame.columns)
    return frame[shown]


def describe_gpu_results(records: list[RunRecord], folder: str | Path | None = None) -> str:
    """One line: how many shipped records from which machines, or that there are none (and where looked)."""
    root = Path(folder) if folder is not None else GPU_RESULTS_DIR
    if not records:
        return f"No shipped GPU results: {root} is absent or holds no records; this section is skipped."
    machines = sorted({r.machine for r in records})
    return f"{len(records)} shipped GPU record(s) from {root.name}/, measured on: {'; '.join(machines)}"
