"""A notebook's measuring cell as an attempt that a rerun can take back: what a killed attempt stored is set aside.

Notebooks run on their own (JupyterLab, papermill, Colab) have no sweep journal. Around the cell that measures,
:func:`measuring` notes the store's size in a marker beside it; the marker is removed when the cell finishes.
A marker still there when the cell runs again belongs to an attempt that was killed (or stopped by an error)
mid-cell: the records it stored after that size go to ``interrupted-records.jsonl`` before measuring again, so
the store holds each configuration once and nothing measured is lost.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from .set_aside import SET_ASIDE_NAME, set_aside_after_marker
from .store import RunStore

MARKER_PREFIX = ".measuring-"


def marker_path(store: RunStore, notebook: str) -> Path:
    """The marker of ``notebook``'s measuring cell, beside the store."""
    return store.path.parent / f"{MARKER_PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '_', notebook) or 'notebook'}.json"


def set_aside_killed_attempt(store: RunStore, notebook: str) -> int:
    """Move what an unfinished earlier attempt of ``notebook``'s measuring cell stored aside; how many records."""
    return set_aside_after_marker(store.path, marker_path(store, notebook), store.path.parent / SET_ASIDE_NAME)


@contextlib.contextmanager
def measuring(store: RunStore, notebook: str) -> Iterator[int]:
    """Around a notebook's measurements: an unfinished earlier attempt's records set aside first (their count is
    yielded), a marker kept while measuring, removed when the block ends without an error."""
    store.check_writable()
    moved = set_aside_killed_attempt(store, notebook)
    if moved:
        print(f"{moved} record(s) of an unfinished earlier attempt moved to {store.path.parent / SET_ASIDE_NAME}")
    marker = marker_path(store, notebook)
    size = store.path.stat().st_size if store.path.exists() else 0
    marker.write_text(json.dumps({"store_bytes": size}))
    yield moved
    marker.unlink(missing_ok=True)


__all__ = ["MARKER_PREFIX", "marker_path", "measuring", "set_aside_killed_attempt"]
