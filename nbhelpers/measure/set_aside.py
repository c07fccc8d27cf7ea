"""Moving an attempt's records out of a run's store (into a file beside it) before the attempt runs again.

A store is append-only JSON lines; what an attempt wrote is either named by record id (a journal entry keeps
them) or is every line from the byte offset its marker noted when it began. Set-aside lines are appended whole
(and synced) to the side file before the store is rewritten without them, so a crash in between can leave a
record in both files, never in neither, and the next move keeps the side file's one copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from .jsonl import locked_open, write_all

SET_ASIDE_NAME = "interrupted-records.jsonl"  # records of a killed or failed attempt, set aside before its rerun


def record_id_of(line: bytes) -> str | None:
    """The ``record_id`` of one JSON line of a store (None for a torn or foreign line)."""
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return entry.get("record_id") if isinstance(entry, dict) else None


def written_record_ids(store: Path, start: int, end: int) -> list[str]:
    """The ids of the records appended to ``store`` between byte offsets ``start`` and ``end``."""
    if not store.exists():
        return []
    with open(store, "rb") as handle:
        handle.seek(start)
        data = handle.read(max(0, end - start))
    return [rid for line in data.splitlines() if line.strip() and (rid := record_id_of(line)) is not None]


def move_aside(store: Path, aside: Path, keep: Callable[[int, bytes], bool]) -> int:
    """Move the lines of ``store`` that ``keep(offset, line)`` rejects (``offset``: the byte the line starts at) to
    the end of ``aside``; how many moved.

    Under the store's append lock: the moved lines are appended (and synced) to ``aside`` first, then the store
    is replaced by a staging file that holds the rest; a writer waiting for the lock follows the new file. An
    operation that fails (a full disk) is undone on both files, leaves no staging file and names the path in its
    OSError, so a retry moves each record once; a record already in ``aside`` (a move killed between its two
    writes) is not appended again.
    """
    fd = locked_open(store)
    try:
        size = os.fstat(fd).st_size
        lines, offset, verdicts = os.pread(fd, size, 0).splitlines(keepends=True), 0, []
        for line in lines:
            verdicts.append(keep(offset, line))
            offset += len(line)
        moved = [line for line, kept in zip(lines, verdicts) if not kept]
        if not moved:
            return 0
        kept = [line for line, keep_it in zip(lines, verdicts) if keep_it]
        there = set(written_record_ids(aside, 0, aside.stat().st_size)) if aside.exists() else set()
        new = [line for line in moved if record_id_of(line) is None or record_id_of(line) not in there]
        # a move killed after its append (kill -9) left these in both files: the side file keeps its one copy
        undo = append_bytes(aside, b"".join(line if line.endswith(b"\n") else line + b"\n" for line in new))
        staging = store.with_name(store.name + ".tmp")
        try:
            staging.write_bytes(b"".join(kept))
            os.replace(staging, store)
        except OSError as error:
            staging.unlink(missing_ok=True)
            truncate_to(aside, undo)  # the moved lines stay in the store only: a retry moves them once
            why = f"could not be rewritten without the {len(moved)} record(s) set aside ({error.strerror or error})"
            raise OSError(error.errno, f"{store}: {why}; both files are as they were", str(store)) from error
        return len(moved)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def append_bytes(path: Path, data: bytes) -> int:
    """Append whole lines to ``path`` under its lock, synced; returns the size the file had before (the offset to
    truncate back to). A torn last line (a crash mid-write) is sealed with a newline first, with a warning, so the
    lines added stay whole; a write that fails is undone and its OSError names ``path``."""
    fd = locked_open(path)
    try:
        start = os.fstat(fd).st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            warnings.warn(f"{path}: its last line is torn (a crash while writing it); sealed, so the lines set "
                          "aside now stay whole (the torn one is skipped when read)", stacklevel=3)  # fmt: skip
            data = b"\n" + data
        try:
            write_all(fd, data)
            os.fsync(fd)
        except OSError as error:
            os.ftruncate(fd, start)  # a short write undone: nothing half-added, nothing added twice on a retry
            raise OSError(error.errno, f"{path}: could not append {len(data):,} bytes ({error.strerror or error}); "
                          "nothing was added", str(path)) from error  # fmt: skip
        return start
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def truncate_to(path: Path, size: int) -> None:
    """Cut ``path`` back to ``size`` bytes under its lock (undoing an append)."""
    fd = locked_open(path)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


COMMAND_PREFIX = "nbhelpers "  # a record's notebook field when a CLI command wrote it ("nbhelpers doctor")


def written_by_command(line: bytes) -> bool:
    """Whether a store line is a record a CLI command wrote (``notebook`` "nbhelpers doctor", ...): never part of a
    notebook's attempt, even when it landed in the store while that attempt was unfinished."""
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(entry, dict) and str(entry.get("notebook") or "").startswith(COMMAND_PREFIX)


def move_aside_from(store: Path, aside: Path, start: int) -> int:
    """Move every line of ``store`` that begins at or after byte ``start`` to ``aside``, but a record a CLI command
    wrote meanwhile (:func:`written_by_command`); how many moved."""
    if not store.exists() or not 0 <= start < store.stat().st_size:
        return 0
    return move_aside(store, aside, lambda offset, line: offset < start or written_by_command(line))


def set_aside_after_marker(store: Path, marker: Path, aside: Path) -> int:
    """What an attempt that left ``marker`` (the store's size when it began) appended to ``store``, moved to
    ``aside``; the marker removed. How many records moved (0 without a marker, or with an unreadable one)."""
    if not marker.exists():
        return 0
    moved = 0
    try:
        start = int(json.loads(marker.read_text())["store_bytes"])
    except (ValueError, KeyError, TypeError, OSError):
        warnings.warn(f"{marker}: unreadable attempt marker; the store is left as it is", stacklevel=3)
    else:
        moved = move_aside_from(store, aside, start)
    marker.unlink(missing_ok=True)
    return moved


__all__ = [
    "COMMAND_PREFIX",
    "SET_ASIDE_NAME",
    "append_bytes",
    "move_aside",
    "move_aside_from",
    "record_id_of",
    "set_aside_after_marker",
    "truncate_to",
    "written_by_command",
    "written_record_ids",
]
