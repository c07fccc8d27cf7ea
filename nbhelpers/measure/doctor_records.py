"""The kernel doctor's verdict as records: the record of a report, the newest one of this machine, what it marks
broken, and the curated kernel set pinned from it.

The doctor itself (:mod:`nbhelpers.kernels.doctor`) and the kernel set (:mod:`nbhelpers.kernels.kernel_set`)
work on plain data; this module wraps that data in a RunRecord of kind "doctor" and reads it back.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nbhelpers.kernels.doctor import DOCTOR_KIND, DoctorReport, broken_paths
from nbhelpers.kernels.kernel_set import kernel_pins, render_pins, write_pins

from .env import safe_environment
from .store import RunRecord


def doctor_record(report: DoctorReport, run_name: str = "default", notebook: str = "") -> RunRecord:
    """The verdict as a RunRecord of kind "doctor" (label "kernel doctor")."""
    config = {"label": "kernel doctor", "run_name": run_name, "device": report.device}
    return RunRecord(config=config, kind=DOCTOR_KIND, notebook=notebook, metrics=report.metrics(),
                     environment=safe_environment(report.device))  # fmt: skip


def latest_doctor(records: Iterable[RunRecord], hostname: str | None = None) -> RunRecord | None:
    """The newest doctor record (of host ``hostname`` when given), or None."""
    found = [r for r in records if r.kind == DOCTOR_KIND and r.ok]
    if hostname is not None:
        found = [r for r in found if r.environment.get("hostname") == hostname]
    return max(found, key=lambda r: r.created_at, default=None)


def broken_here(records: Iterable[RunRecord]) -> dict[str, str]:
    """The paths the newest doctor record of this machine (this host) marks broken, with the reason ({} without)."""
    record = latest_doctor(records, socket.gethostname())
    return broken_paths(record.metrics if record is not None else None)


def _verdict(record: RunRecord) -> dict[str, Any]:
    """A doctor record's metrics; ValueError for a record of another kind."""
    if record.kind != DOCTOR_KIND:
        raise ValueError(f"record kind {record.kind!r}: a kernel set is made from a {DOCTOR_KIND!r} record")
    return record.metrics


def kernel_set(record: RunRecord) -> tuple[dict[str, str], dict[str, str]]:
    """(pins: distribution -> version, left out: distribution -> why) from a doctor record."""
    return kernel_pins(_verdict(record))


def render_kernel_set(record: RunRecord) -> str:
    """The requirements file of a doctor record: header (machine, source record, what was left out), pins."""
    return render_pins(_verdict(record), f"doctor record {record.record_id} of {record.created_at}")


def write_kernel_set(record: RunRecord, path: str | Path) -> Path:
    """Write the kernel set of a doctor record to ``path`` (a requirements file); its path."""
    return write_pins(render_kernel_set(record), path)
