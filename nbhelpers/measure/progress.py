"""Where a measurement is, told by the configuration's own process to the one that started it.

The runner names a file in :data:`PROGRESS_VARIABLE`; the measuring process (rank 0 under torchrun) appends one
line, ``phase<TAB>done<TAB>total``, after each step; the runner reads the new lines while it waits and once more
when the process is done, so a notebook's bar shows the configuration's name, its phase, its steps and the time
spent, and no phase is missed however fast it passes. Without the variable nothing is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRESS_VARIABLE = "NBHELPERS_PROGRESS_FILE"
# Set (to "1") for a notebook run in batch (run-all, sweep, papermill): bars are plain text, so the saved notebook
# shows each bar's last state; a widget bar saves only its first ("0/0").
PLAIN_BARS_VARIABLE = "NBHELPERS_PLAIN_PROGRESS"


@dataclass(frozen=True)
class Progress:
    """A phase of a measurement ("untimed", "timed pass 1", "parity probe") and its steps done out of total."""

    phase: str
    done: int
    total: int


def plain_bars() -> bool:
    """Whether bars are drawn as plain text (a batch run: :data:`PLAIN_BARS_VARIABLE`)."""
    return os.environ.get(PLAIN_BARS_VARIABLE) == "1"


@contextlib.contextmanager
def plain_bars_in_children() -> Iterator[None]:
    """Processes started inside (a notebook's kernel) draw plain-text bars; this process's setting is put back."""
    saved = os.environ.get(PLAIN_BARS_VARIABLE)
    os.environ[PLAIN_BARS_VARIABLE] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(PLAIN_BARS_VARIABLE, None)
        else:
            os.environ[PLAIN_BARS_VARIABLE] = saved


def progress_bar(*args: Any, **kwargs: Any) -> Any:
    """A tqdm bar: a widget in a live notebook, plain text where :data:`PLAIN_BARS_VARIABLE` is set (batch runs,
    whose saved notebooks keep text, not widget state) and in a terminal."""
    if plain_bars():
        from tqdm.std import tqdm
    else:
        from tqdm.auto import tqdm
    return tqdm(*args, **kwargs)


def report_progress(phase: str, done: int, total: int) -> None:
    """Tell the starting process (if it asked) where this measurement is; never raises for a write that fails."""
    path = os.environ.get(PROGRESS_VARIABLE)
    if not path or os.environ.get("RANK", "0") != "0":
        return
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{phase}\t{done}\t{total}\n")
    except OSError:  # progress is a courtesy: a full or vanished temp folder must not fail the measurement
        pass


def _parse(line: str) -> Progress | None:
    """One ``phase<TAB>done<TAB>total`` line, None for one that is not."""
    try:
        phase, done, total = line.split("\t")
        return Progress(phase, int(done), int(total))
    except ValueError:
        return None


class ProgressReader:
    """Reads a progress file's lines as they come: each call to :meth:`new` returns the complete lines added
    since the last call (a line still being written waits for the next call)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0

    def new(self) -> list[Progress]:
        """The progress reported since the last call, oldest first."""
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                added = log.read()
        except OSError:
            return []
        complete = added[: added.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = complete.decode("utf-8", errors="replace").splitlines()
        return [progress for line in lines if (progress := _parse(line)) is not None]


def read_progress(path: str | Path) -> Progress | None:
    """The last complete progress line a measuring process wrote to ``path``, None before the first."""
    reported = ProgressReader(path).new()
    return reported[-1] if reported else None




def notebook_line(entry: dict[str, Any]) -> str:
    """One notebook run's outcome in a line: point, notebook, status and seconds (and the error's first line)."""
    error = str(entry.get("error") or "").strip().splitlines()
    why = f": {error[0]}" if error and entry["status"] != "ok" else ""
    return f"{entry['point']} / {entry['notebook']}: {entry['status']} in {entry['duration_s']:.1f} s{why}"


__all__ = [
    "PLAIN_BARS_VARIABLE", "PROGRESS_VARIABLE", "Progress", "ProgressReader", "notebook_line", "plain_bars",
    "plain_bars_in_children",
    "progress_bar", "read_progress", "report_progress",
]  # fmt: skip
