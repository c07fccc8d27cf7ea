"""Where a measurement is, told by the configuration's own process to the one that started it.

The runner names a file in :data:`PROGRESS_VARIABLE`; the measuring process (rank 0 under torchrun) rewrites it
with one line, ``phase<TAB>done<TAB>total``, after each step; the runner reads it while it waits, so a notebook's
bar shows the configuration's name, its phase, its steps and the time spent. Without the variable nothing is
written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROGRESS_VARIABLE = "NBHELPERS_PROGRESS_FILE"


@dataclass(frozen=True)
class Progress:
    """A phase of a measurement ("untimed", "timed pass 1", "parity probe") and its steps done out of total."""

    phase: str
    done: int
    total: int


def report_progress(phase: str, done: int, total: int) -> None:
    """Tell the starting process (if it asked) where this measurement is; never raises for a write that fails."""
    path = os.environ.get(PROGRESS_VARIABLE)
    if not path or os.environ.get("RANK", "0") != "0":
        return
    staging = f"{path}.tmp"
    try:
        Path(staging).write_text(f"{phase}\t{done}\t{total}\n", encoding="utf-8")
        os.replace(staging, path)
    except OSError:  # progress is a courtesy: a full or vanished temp folder must not fail the measurement
        pass


def read_progress(path: str | Path) -> Progress | None:
    """The last progress a measuring process wrote to ``path``, None before the first (or for a torn line)."""
    try:
        phase, done, total = Path(path).read_text(encoding="utf-8").rstrip("\n").split("\t")
        return Progress(phase, int(done), int(total))
    except (OSError, ValueError):
        return None


__all__ = ["PROGRESS_VARIABLE", "Progress", "read_progress", "report_progress"]
