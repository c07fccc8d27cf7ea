"""How a GPU casts each float8 GEMM's other operand (the activation; in the backward the output gradient) to e4m3:
"fused", one compiled function (the default), or "eager", the separate ops over fp32 copies it replaced
(``NBHELPERS_FLOAT8_CAST``). Light at import: no torch."""

from __future__ import annotations

import os

CAST_VARIABLE = "NBHELPERS_FLOAT8_CAST"
CASTS = ("fused", "eager")


def cast_mode() -> str:
    """The cast this process runs: ``NBHELPERS_FLOAT8_CAST``, "fused" when unset; a bad value names the allowed."""
    mode = os.environ.get(CAST_VARIABLE, CASTS[0])
    if mode not in CASTS:
        raise ValueError(f"{CAST_VARIABLE}={mode!r} is not allowed: one of {', '.join(CASTS)}")
    return mode
