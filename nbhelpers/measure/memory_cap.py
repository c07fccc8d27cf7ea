"""A memory cap: the step runs as on a smaller GPU (RunConfig.gpu_memory_gib), enforced by the CUDA allocator.

``torch.cuda.set_per_process_memory_fraction`` makes the caching allocator refuse (out of memory) past the cap, so an
80, 48 or 24 GiB GPU can be measured on a larger one. The cap bounds what the allocator reserves from the device
(``torch.cuda.max_memory_reserved``), which is at least the peak it hands out (``max_memory_allocated``, records'
``peak_memory_gib``); the CUDA context and other processes are outside it, as they are outside a real GPU's usable
memory. On a CPU a cap is recorded as not enforced.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

GIB = 2**30
NO_CAP = 0.0  # RunConfig.gpu_memory_gib's default: the whole device


def cap_rule() -> str:
    """What RunConfig.gpu_memory_gib allows, for error messages."""
    return "0 (the whole device) or a finite number of GiB above 0, at most 4096 (e.g. 80, 48 or 24)"


def valid_cap(gib: Any) -> bool:
    """Whether a value can be a memory cap in GiB (0 means none)."""
    if isinstance(gib, bool) or not isinstance(gib, (int, float)):
        return False
    return math.isfinite(gib) and (gib == NO_CAP or 0 < gib <= 4096)


def cap_refusal(gib: float, device_total_bytes: int) -> str:
    """Why a cap cannot be enforced on a device of ``device_total_bytes`` ('' when it can, or when there is none)."""
    if gib == NO_CAP:
        return ""
    if gib * GIB > device_total_bytes:
        return (f"gpu_memory_gib={gib:g}: more than this device has ({device_total_bytes / GIB:,.1f} GiB); "
                f"a cap at most that, or 0 for the whole device")  # fmt: skip
    return ""


def apply_memory_cap(gib: float, device: str, index: int = 0) -> dict[str, Any]:
    """Cap this process's CUDA allocator on GPU ``index`` at ``gib`` GiB (0: none) and return what a record keeps
    of it (``memory_cap_gib``, ``memory_cap_enforced``). On a CPU a cap is not enforced and the record says so; a
    cap above the device's memory raises ValueError naming the parameter, before any work."""
    if gib == NO_CAP:
        return {}
    if device != "cuda":
        return {"memory_cap_gib": float(gib), "memory_cap_enforced": False}
    import torch

    torch.cuda.set_device(index)  # this rank's GPU: no context is made on another
    total = torch.cuda.get_device_properties(index).total_memory
    if reason := cap_refusal(gib, total):
        raise ValueError(reason)
    torch.cuda.set_per_process_memory_fraction(gib * GIB / total, index)
    return {"memory_cap_gib": float(gib), "memory_cap_enforced": True, "device_memory_gib": total / GIB}


@contextmanager
def memory_cap(gib: float, device: str, index: int = 0) -> Iterator[dict[str, Any]]:
    """:func:`apply_memory_cap` for one measurement; the whole device again afterwards (a measurement in the
    notebook's own process leaves no cap behind)."""
    fields = apply_memory_cap(gib, device, index)
    try:
        yield fields
    finally:
        if fields.get("memory_cap_enforced"):
            import torch

            torch.cuda.set_per_process_memory_fraction(1.0, index)


@contextmanager
def cap_lifted(device: str, index: int = 0) -> Iterator[None]:
    """The whole GPU for set-up outside the measured step (a peer's weights built and saved), the cap as it was
    afterwards, with the allocator's cache emptied and its peak reset: the step's peak is its own."""
    if device != "cuda":
        yield
        return
    import torch

    fraction = torch.cuda.get_per_process_memory_fraction(index)
    torch.cuda.set_per_process_memory_fraction(1.0, index)
    try:
        yield
    finally:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(index)
        torch.cuda.set_per_process_memory_fraction(fraction, index)


__all__ = ["NO_CAP", "apply_memory_cap", "cap_lifted", "cap_refusal", "cap_rule", "memory_cap", "valid_cap"]
