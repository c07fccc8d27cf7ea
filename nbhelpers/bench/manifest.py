"""The manifest beside a folder of records: one line per record saying when, where, from which code and by which
command it was measured (``manifest.jsonl``, append-only JSON lines like the records themselves).

    {"record_id": "...", "file": "padding-epoch-default.jsonl", "date": "2026-11-30T12:45:45+00:00",
     "machine": "NVIDIA H200 @ vm", "commit": "2c2a12f", "command": "nbhelpers bench ..."}

``ManifestStore`` is a RunStore that writes the line as it appends the record, so a record stored through it never
lacks one. The lines of records measured before the suites existed also say ``note`` (where a field came from: the
record, the notes, or "unknown") and ``suite`` (the suite that measures the same rows now); a measurement file that
holds no run record gets one line with ``record_id`` null. The commit is ``$NBHELPERS_COMMIT`` where set (a machine
without the repository's history), else the checkout's ``git rev-parse --short HEAD`` (with "+changes" when the
package's files differ from that commit), else "unknown".
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from nbhelpers.measure.jsonl import append_line, read_lines
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.resources import REPO_ROOT

MANIFEST = "manifest.jsonl"
COMMIT_VARIABLE = "NBHELPERS_COMMIT"
UNKNOWN = "unknown"
FIELDS = ("record_id", "file", "date", "machine", "commit", "command")


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def code_commit() -> str:
    """The commit of the code measuring here (see the module's docstring)."""
    if given := os.environ.get(COMMIT_VARIABLE, "").strip():
        return given
    commit = _git("rev-parse", "--short", "HEAD")
    if not commit:
        return UNKNOWN
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", "nbhelpers")
    return f"{commit}+changes" if changed else commit


def manifest_line(record: RunRecord, file: str, commit: str, command: str) -> dict[str, Any]:
    """The manifest's line for one stored record."""
    machine = record.machine if record.environment.get("device_name") else UNKNOWN
    return {"record_id": record.record_id, "file": file, "date": record.created_at, "machine": machine,
            "commit": commit, "command": command}  # fmt: skip


def load_manifest(folder: str | Path) -> list[dict[str, Any]]:
    """Every line of ``folder/manifest.jsonl`` ([] without one)."""
    return read_lines(Path(folder) / MANIFEST, what="manifest line")


class ManifestStore(RunStore):
    """A RunStore whose every append also writes the record's manifest line beside it."""

    def __init__(self, path: str | Path, command: str, commit: str | None = None) -> None:
        super().__init__(path)
        self.command = command
        self.commit = commit if commit is not None else code_commit()

    @property
    def manifest(self) -> Path:
        return self.path.parent / MANIFEST

    def append(self, record: RunRecord) -> RunRecord:
        stored = super().append(record)
        file = self.path.name if "saved_to" not in stored.artifacts else Path(stored.artifacts["saved_to"]).name
        append_line(self.manifest, manifest_line(stored, file, self.commit, self.command))
        return stored
