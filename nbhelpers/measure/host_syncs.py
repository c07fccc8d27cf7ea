"""Where a step makes the host wait for the GPU: one step under torch's CUDA sync debug mode.

A synchronizing call (``.item()``, ``.tolist()``, a copy to the host, ``repeat_interleave`` without its output size,
a pageable copy to the device) empties the GPU's queue: the GPU then idles while the host launches what follows. A
profile shows the idle time; this says which lines caused it. torch warns at each such call in "warn" mode; the
warnings are counted by the Python line that made the call (inside the backward, the line that called it). The mode
sees torch's own operations only (torch calls it a prototype that does not detect every synchronization): a library
that synchronizes through its own CUDA calls (a Triton or TileLang launcher's host code) is not counted.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

SYNC_WARNING = "called a synchronizing CUDA operation"  # torch's message (c10/cuda/CUDAFunctions.cpp)
TOP_SITES = 8
_PACKAGE_ROOTS = ("site-packages/", "dist-packages/", "/nbhelpers/")


def short_site(filename: str, lineno: int) -> str:
    """``fla/ops/utils/index.py:130`` from an installed file's path (the path under its package root)."""
    for root in _PACKAGE_ROOTS:
        if root in filename:
            tail = filename.rsplit(root, 1)[1]
            return f"{'nbhelpers/' if root == '/nbhelpers/' else ''}{tail}:{lineno}"
    return f"{filename.rsplit('/', 1)[-1]}:{lineno}"


def sync_sites(caught: Sequence[warnings.WarningMessage], top: int = TOP_SITES) -> dict[str, Any]:
    """How many synchronizing calls the warnings record, and the ``top`` lines that made most of them."""
    sites = Counter(short_site(w.filename, w.lineno) for w in caught if SYNC_WARNING in str(w.message))
    return {
        "host_syncs_per_step": sum(sites.values()),
        "host_sync_sites": [{"site": site, "syncs": n} for site, n in sites.most_common(top)],
    }


def count_host_syncs(run_step: Callable[[], Any], device: str, top: int = TOP_SITES) -> dict[str, Any]:
    """Run one step under torch's sync debug mode ("warn") and count its synchronizing calls by call site; the mode
    is restored after. On a CPU there is nothing to wait for: ``{}`` (the step is not run)."""
    if device != "cuda":
        return {}
    import torch

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run_step()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return sync_sites(caught, top)
