"""RunRecord and RunStore: append-only JSON lines, one record per measured configuration."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import numbers
import tempfile
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.measure.jsonl import append_line, dumps, read_lines
from nbhelpers.resources import runs_folder
from nbhelpers.validation import check_run_name

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUSES = (STATUS_OK, STATUS_FAILED)
# Metrics the analysis reads as numbers: each a number or null (NaN and infinity are stored as null).
NUMERIC_METRICS = (
    "real_tokens_per_s", "real_tokens_per_s_per_gpu", "positions_per_s", "mfu", "peak_memory_gib", "peak_flops",
    "step_time_median_s", "first_step_s", "loss_first", "grad_norm_first", "padding_fraction",
    "real_tokens_per_step", "positions_per_step", "loss_tokens_per_step", "model_flops_per_step",
)  # fmt: skip
TEXT_ENVIRONMENT = ("device_name", "device_type", "hostname")  # what names the machine: text when present
RATE_CEILING = 1e9  # tokens or positions a second: above anything one training step on one machine reaches
# Each numeric metric's range (inclusive); a stored value outside it is no measurement (a hand edit, a bug, a torn
# file put back together) and the line is skipped. Counts, times, memory, losses and norms are not negative.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "real_tokens_per_s": (0.0, RATE_CEILING), "real_tokens_per_s_per_gpu": (0.0, RATE_CEILING),
    "positions_per_s": (0.0, RATE_CEILING), "mfu": (0.0, math.inf), "padding_fraction": (0.0, 1.0),
    "peak_memory_gib": (0.0, 2.0**20), "peak_flops": (0.0, math.inf), "step_time_median_s": (0.0, math.inf),
    "first_step_s": (0.0, math.inf), "loss_first": (0.0, math.inf), "grad_norm_first": (0.0, math.inf),
    "real_tokens_per_step": (0.0, math.inf), "positions_per_step": (0.0, math.inf),
    "loss_tokens_per_step": (0.0, math.inf), "model_flops_per_step": (0.0, math.inf),
}  # fmt: skip
NUMBER_LISTS = ("losses", "step_times_s", "timed_real_tokens")  # lists of numbers (null for a non-finite one)


def _number_or_null(value: Any) -> bool:
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, bool))


class RunsFolderError(OSError):
    """The runs folder cannot be written: said before measuring, or with the unsaved record in hand."""


class RecordNotSaved(RunsFolderError):
    """A finished record that could not be written anywhere: it travels in ``.record`` and in the message."""

    def __init__(self, message: str, record: RunRecord) -> None:
        super().__init__(message)
        self.record = record


def runs_root() -> Path:
    """Folder that holds every run (``nbhelpers.resources.runs_folder``: ``$NBHELPERS_RUNS``, a clone's runs/...)."""
    return runs_folder()


def run_dir(run_name: str, root: str | Path | None = None) -> Path:
    """The folder of one run (``run_name`` validated: one folder inside the root), created if needed."""
    check_run_name(run_name)
    path = (Path(root) if root is not None else runs_root()) / run_name
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunsFolderError(
            f"cannot create the run folder {path} ({error}); set NBHELPERS_RUNS to a writable folder"
        ) from error
    return path


def check_writable(folder: str | Path) -> Path:
    """Create ``folder`` and write a probe file in it, before anything is measured; RunsFolderError if not."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as error:
        raise RunsFolderError(
            f"the runs folder {folder} is not writable ({error.strerror or error}): nothing was measured; "
            "make it writable or set NBHELPERS_RUNS to a writable folder"
        ) from error
    return folder


def json_kind(value: Any) -> str:
    """What a JSON value is, in words: "text", "a number", "true or false", "null", "a list", "an object"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, numbers.Real):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, (list, tuple)) else "an object" if isinstance(value, dict) else "other"


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
    def reused(self) -> bool:
        """True for a stored record standing in for a measurement it equals (already in the store: not again)."""
        return bool(self.metrics.get("reused_from"))

    @property
    def machine(self) -> str:
        """Identity of the machine: device name and host; speedups only divide within one."""
        env = self.environment
        return f"{env.get('device_name', 'unknown device')} @ {env.get('hostname', 'unknown host')}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        """A stored record; TypeError or ValueError naming the field when a part has the wrong kind (a config,
        metrics, environment or artifacts that is no JSON object, a status or id that is no string), a status
        other than "ok" or "failed", a metric of :data:`NUMERIC_METRICS` that is no number, or a machine name of
        :data:`TEXT_ENVIRONMENT` that is no text: a reader skips the line with a warning, never draws it."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "config" not in values:
            raise TypeError("no config")
        for name in ("config", "metrics", "environment", "artifacts"):
            if name in values and not isinstance(values[name], dict):
                raise TypeError(f"{name} is a {type(values[name]).__name__}, not a JSON object")
        for name in ("status", "reason", "kind", "notebook", "record_id", "created_at"):
            if name in values and not isinstance(values[name], str):
                raise TypeError(f"{name} is a {type(values[name]).__name__}, not a string")
        if values.get("status", STATUS_OK) not in STATUSES:
            raise ValueError(f"status={values['status']!r} is neither {STATUS_OK!r} nor {STATUS_FAILED!r}")
        metrics, environment = values.get("metrics", {}), values.get("environment", {})
        for key in NUMERIC_METRICS:
            value = metrics.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise TypeError(f"metrics.{key}={value!r} is {json_kind(value)}, not a number or null")
            low, high = METRIC_RANGES[key]
            if value is not None and not low <= value <= high:
                raise ValueError(f"metrics.{key}={value!r} is outside {low:g}..{high:g}")
        for key in NUMBER_LISTS:
            value = metrics.get(key)
            if value is not None and not isinstance(value, list):
                raise TypeError(f"metrics.{key} is {json_kind(value)}, not a list of numbers")
            bad = next((v for v in value or [] if not _number_or_null(v)), None)
            if bad is not None:
                raise TypeError(f"metrics.{key} holds {bad!r}, {json_kind(bad)}, not a number or null")
        for key in TEXT_ENVIRONMENT:
            value = environment.get(key)
            if key in environment and not isinstance(value, str):
                raise TypeError(f"environment.{key}={value!r} is {json_kind(value)}, not text")
        return cls(**values)

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

    def check_writable(self) -> RunStore:
        """Fail before measuring when the store's folder cannot be written (RunsFolderError)."""
        check_writable(self.path.parent)
        return self

    def append(self, record: RunRecord) -> RunRecord:
        """Append ``record``; if the store cannot be written, a fallback file beside the run folder; else
        RecordNotSaved carrying the record (``.record``) and its JSON in the message: never dropped."""
        try:
            append_line(self.path, record.to_dict())
            return record
        except OSError as error:
            first = error
        fallback = self.path.parent.parent / f"unsaved-{self.path.parent.name}-{record.record_id}.jsonl"
        try:
            append_line(fallback, record.to_dict())
        except OSError:
            raise RecordNotSaved(
                f"could not write the record to {self.path} ({first}) nor to {fallback}; the record "
                f"(also in this error's .record): {dumps(record.to_dict())}",
                record,
            ) from first
        warnings.warn(f"could not write to {self.path} ({first}); the record was saved to {fallback}", stacklevel=2)
        record.artifacts["saved_to"] = str(fallback)
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
    """A pandas DataFrame with one row per record: label, status, reason, machine and metrics (a failure's
    traceback stays in its record: the one-line reason is the table's)."""
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
        row.update({k: v for k, v in record.metrics.items() if not isinstance(v, (list, dict)) and k != "traceback"})
        rows.append(row)
    return pd.DataFrame(rows)
