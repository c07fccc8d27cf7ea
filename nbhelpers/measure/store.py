"""RunRecord and RunStore: append-only JSON lines, one record per measured configuration."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.measure.jsonl import append_line, read_lines

STATUS_OK = "ok"
STATUS_FAILED = "failed"


def runs_root() -> Path:
    """Folder that holds every run (``$NBHELPERS_RUNS`` or ``./runs``)."""
    return Path(os.environ.get("NBHELPERS_RUNS", "runs")).resolve()


def run_dir(run_name: str, root: str | Path | None = None) -> Path:
    """The folder of one run, created if needed."""
    path = (Path(root) if root is not None else runs_root()) / run_name
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class RunRecord:
    """What one configuration did: its config, where it ran, what was measured."""

    config: dict[str, Any]
    status: str = STATUS_OK
    reason: str = ""  # why it failed ("" when ok)
    kind: str = "step"  # "step" (timed training step), "parity", "trace", "startup", ...
    notebook: str = ""  # notebook (or script) that made the record
    metrics: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> path (trace, executed notebook)
    record_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat())

    @property
    def ok(self) -> bool:
        return self.status == STATUS_OK

    @property
    def label(self) -> str:
        return str(self.config.get("label") or self.config.get("name") or self.record_id)

    @property
    def machine(self) -> str:
        """Identity of the machine: device name and host; speedups only divide within one."""
        env = self.environment
        return f"{env.get('device_name', 'unknown device')} @ {env.get('hostname', 'unknown host')}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def failed(cls, config: dict[str, Any], reason: str, **kwargs: Any) -> RunRecord:
        """A record for a configuration that could not be measured, with its reason."""
        return cls(config=config, status=STATUS_FAILED, reason=reason, **kwargs)


class RunStore:
    """Append-only JSON-lines file of RunRecords (``runs/<name>/records.jsonl``).

    Appends and reads go through ``nbhelpers.measure.jsonl``: one locked O_APPEND write of a whole line
    and fsync, so concurrent writers never interleave, a crash leaves at most one torn last line, and
    reading skips such a line with a warning. Records are never rewritten.
    """

    FILENAME = "records.jsonl"

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if path.suffix != ".jsonl":
            path = path / self.FILENAME
        self.path = path

    @classmethod
    def for_run(cls, run_name: str, root: str | Path | None = None) -> RunStore:
        return cls(run_dir(run_name, root) / cls.FILENAME)

    def append(self, record: RunRecord) -> RunRecord:
        append_line(self.path, record.to_dict())
        return record

    def load(self) -> list[RunRecord]:
        """Every whole record in order; a torn or corrupt line is skipped with a warning."""
        return read_lines(self.path, RunRecord.from_dict, what="record", stacklevel=3)

    def __len__(self) -> int:
        return len(self.load())


def load_records(*paths: str | Path) -> list[RunRecord]:
    """Records from several stores (files or run folders), in the order given."""
    records: list[RunRecord] = []
    for path in paths:
        records.extend(RunStore(path).load())
    return records


def records_frame(records: list[RunRecord]) -> Any:
    """A pandas DataFrame with one row per record: label, status, reason, machine and metrics."""
    import pandas as pd

    rows = []
    for record in records:
        row = {
            "label": record.label,
            "kind": record.kind,
            "status": record.status,
            "reason": record.reason,
            "machine": record.machine,
            "notebook": record.notebook,
            "run_name": record.config.get("run_name", ""),
            "record_id": record.record_id,
        }
        row.update({k: v for k, v in record.metrics.items() if not isinstance(v, (list, dict))})
        rows.append(row)
    return pd.DataFrame(rows)
