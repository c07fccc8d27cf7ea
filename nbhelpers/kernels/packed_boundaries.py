"""A packed row's sequence boundaries as fla's varlen kernels take them, made once per row.

fla's varlen kernels launch one program per chunk of each sequence, so they need ``chunk_indices`` on the host's
side too (their count sizes the grid): building them from ``cu_seqlens`` on the GPU reads the count back, a host
synchronization. fla keeps the last few it built, keyed on the boundaries tensor's identity. transformers hands
every layer of a step the same int32 ``cu_seqlens``; an int64 copy made per call is a new tensor each time, so
each Gated DeltaNet layer's convolution and delta rule rebuilt them and synchronized, in the forward and again in
the recompute: the GPU waits for the host after each. :class:`PackedBoundaries` makes the int64 copy and the chunk
indices once per boundaries tensor and hands the same ones to every call until a new row's boundaries come.

Light at import: fla loads inside :func:`fla_chunk_indices`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any

FLA_CHUNK_SIZE = 64  # the chunk both fla kernels use by default (the delta rule's and the convolution's)
SHARED_VARIABLE = "NBHELPERS_FLA_SHARED_BOUNDARIES"  # "0": an int64 copy per call, fla's chunk indices per call
SHARED_CHOICES = ("1", "0")


def fla_chunk_indices(cu_seqlens: Any, chunk_size: int) -> Any:
    """fla's own chunk indices for ``cu_seqlens`` (one host synchronization on a GPU)."""
    from fla.ops.utils import prepare_chunk_indices

    return prepare_chunk_indices(cu_seqlens, chunk_size)


class PackedBoundaries:
    """The last row's boundaries as int64 and their chunk indices, rebuilt only when another tensor comes (or the
    same one written in place).

    ``chunk_indices_of(cu_seqlens, chunk_size)`` builds the indices (fla's, by default). The source tensor is held
    weakly: a freed row's boundaries are never mistaken for a new row's at the same address.
    """

    def __init__(self, chunk_indices_of: Callable[[Any, int], Any] = fla_chunk_indices,
                 chunk_size: int = FLA_CHUNK_SIZE) -> None:  # fmt: skip
        self.chunk_indices_of = chunk_indices_of
        self.chunk_size = chunk_size
        self.builds = 0  # how many rows' boundaries were built (one a step when every layer shares them)
        self._source: weakref.ref[Any] | None = None
        self._version = -1
        self._made: tuple[Any, Any] = (None, None)

    def __call__(self, cu_seqlens: Any) -> tuple[Any, Any]:
        """(the boundaries as int64, their chunk indices), the same objects for the same ``cu_seqlens``."""
        if self._source is None or self._source() is not cu_seqlens or self._version != cu_seqlens._version:
            as_int64 = cu_seqlens.long()
            self._made = (as_int64, self.chunk_indices_of(as_int64, self.chunk_size))
            self._source, self._version = weakref.ref(cu_seqlens), cu_seqlens._version
            self.builds += 1
        return self._made


def takes_chunk_indices(kernel: Callable[..., Any]) -> bool:
    """Whether ``kernel`` names a ``chunk_indices`` argument (fla 0.6's kernels do; older ones do not)."""
    try:
        return "chunk_indices" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):
        return False


def boundary_arguments(boundaries: PackedBoundaries | None, cu_seqlens: Any, chunks: bool) -> dict[str, Any]:
    """The keyword arguments that hand a kernel a row's boundaries: ``cu_seqlens`` as int64 (with ``boundaries``,
    the same object every call, so fla's own cache hits too) and, with ``chunks``, their chunk indices."""
    if cu_seqlens is None:
        return {"cu_seqlens": None}
    if boundaries is None:
        return {"cu_seqlens": cu_seqlens.long()}
    as_int64, chunk_indices = boundaries(cu_seqlens)
    return {"cu_seqlens": as_int64, "chunk_indices": chunk_indices} if chunks else {"cu_seqlens": as_int64}


_SHARED: PackedBoundaries | None = None


def shared_enabled() -> bool:
    """Whether fla's hooks share one build per row: ``NBHELPERS_FLA_SHARED_BOUNDARIES``, "1" when unset ("0" gives
    each call its own int64 copy, as before, to compare); a bad value names the allowed."""
    import os

    value = os.environ.get(SHARED_VARIABLE, SHARED_CHOICES[0])
    if value not in SHARED_CHOICES:
        raise ValueError(f"{SHARED_VARIABLE}={value!r} is not allowed: one of {', '.join(SHARED_CHOICES)}")
    return value == "1"


def shared_boundaries() -> PackedBoundaries | None:
    """The process's one :class:`PackedBoundaries` over fla's chunk indices: the convolution and the delta rule of
    every layer share it, so a step builds its row's indices once (None where ``shared_enabled`` says not)."""
    global _SHARED
    if not shared_enabled():
        return None
    if _SHARED is None:
        _SHARED = PackedBoundaries()
    return _SHARED
