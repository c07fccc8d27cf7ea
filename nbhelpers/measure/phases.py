"""Where a measurement's wall time goes: consecutive laps of one clock, in seconds, by phase name.

A record keeps them in ``metrics["phase_s"]`` (data, build, first_step, untimed, timed, profile, environment; the
worker adds parity_probe) and the runner keeps the whole process's wall time in ``metrics["process_s"]``, up to the
moment the record is written: what the laps do not cover is the interpreter's start, the imports and writing it.
"""

from __future__ import annotations

import time


class PhaseClock:
    """Laps since the clock was made or since the previous lap."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._mark = time.perf_counter()

    def lap(self, name: str) -> float:
        """Seconds since the previous lap, kept under ``name`` (added to it when the name repeats)."""
        now = time.perf_counter()
        seconds = now - self._mark
        self._mark = now
        self.laps[name] = round(self.laps.get(name, 0.0) + seconds, 3)
        return seconds


__all__ = ["PhaseClock"]
