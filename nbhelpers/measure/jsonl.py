"""Append-only JSON-lines files: whole lines under a lock, torn or corrupt lines skipped on reading.

Used by ``RunStore`` (``runs/<name>/records.jsonl``), the sweep journal and the reader of shipped GPU
records. Each append is one ``write`` of a whole line to a file opened with O_APPEND under an exclusive
lock, then fsync (NaN and infinity written as null, so any JSON parser reads the file): concurrent
writers never interleave, a short or failed write is undone (the file cut back to its size before) and
raised, a crash leaves at most one torn last line, and
the next append seals that line with a newline so its own line stays whole. Reading skips a torn or
corrupt line with a warning that names the file and the line number.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class SkippedLine(UserWarning):
    """A line of a JSON-lines file that was not read: torn, not UTF-8, not JSON, or refused by its parser."""


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (in nested dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Standard JSON (sorted keys): NaN and infinity become null, never the bare ``NaN`` parsers reject."""
    kwargs.setdefault("sort_keys", True)
    return json.dumps(finite(value), allow_nan=False, default=str, **kwargs)


def append_line(path: str | Path, entry: Mapping[str, Any]) -> None:
    """Append ``entry`` as one JSON line (sorted keys, NaN as null), creating the file and its folder if needed."""
    path = Path(path)
    line = (dumps(entry) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = locked_open(path)
    try:
        size = os.fstat(fd).st_size
        seal = b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""  # a torn line left by a crash
        try:
            write_all(fd, seal + line)
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # undo a short or failed write: the file holds whole lines only, as before
            raise
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def locked_open(path: Path) -> int:
    """``path`` opened for appending under an exclusive lock, on the file the path names once the lock is held
    (a rewrite that replaced the file while this waited for the lock is followed to the new one)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` or raise OSError: a short write (a nearly full disk, a quota) is an error,
    never a partial line reported as written."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"wrote 0 of {len(view)} remaining bytes")
        view = view[written:]


def _as_is(entry: dict[str, Any]) -> Any:
    return entry


def _json_object(raw: bytes) -> dict[str, Any]:
    entry = json.loads(raw.decode("utf-8"))
    if not isinstance(entry, dict):
        raise TypeError(f"not a JSON object: {type(entry).__name__}")
    return entry


def read_lines(
    path: str | Path, parse: Callable[[dict[str, Any]], T] = _as_is, what: str = "line", stacklevel: int = 2
) -> list[T]:
    """Every whole line of ``path`` as a JSON object passed through ``parse``, in order; [] when it is absent.

    A line that is not a JSON object, not UTF-8, or that ``parse`` refuses (``ValueError`` or ``TypeError``) is
    skipped with a warning (:class:`SkippedLine`) ``<path>:<line>: skipped a torn or corrupt <what> (<error>)``;
    blank lines are skipped silently. ``stacklevel`` is ``warnings.warn``'s, seen from ``read_lines`` (2: its caller).
    """
    path = Path(path)
    if not path.exists():
        return []
    parsed: list[T] = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                parsed.append(parse(_json_object(raw)))
            except (ValueError, TypeError) as error:
                message = f"{path}:{number}: skipped a torn or corrupt {what} ({error})"
                warnings.warn(message, SkippedLine, stacklevel=stacklevel)
    return parsed
