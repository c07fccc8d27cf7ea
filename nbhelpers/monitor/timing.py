"""Step times that do not stall the device: CUDA events on a GPU, read only when an interval closes.

A device sync before and after every step (as a benchmark's timed loop does) costs a real training job the
overlap of its host work (the data loader, the next step's launches) with the GPU's queue. On CUDA the monitor
records an event pair per step instead and reads their elapsed times when the interval's figures are computed
(after the monitor's one device sync for the interval). Elsewhere, and for profiler windows (whose cost is
wall-clock time by definition), a step is timed with a device sync and the host clock. Both events go on the
stream that is current when the step starts: work a step puts on another stream counts only as far as that
stream waits for it (as a training step's does before its optimizer update).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nbhelpers.measure.env import sync_device


class StepTime:
    """One step's duration, known at once (a float) or once its end event has completed (CUDA events)."""

    def __init__(self, seconds: float | None = None, events: tuple[Any, Any] | None = None) -> None:
        if (seconds is None) == (events is None):
            raise ValueError("StepTime takes seconds or an event pair, not both")
        self._seconds, self._events = seconds, events

    @property
    def pending(self) -> bool:
        """True while the duration sits in events not read yet."""
        return self._seconds is None

    def seconds(self) -> float:
        """The duration; waits for the step's end event the first time (the only wait of an event timing)."""
        if self._seconds is None:
            start, end = self._events  # type: ignore[misc]
            end.synchronize()
            self._seconds, self._events = start.elapsed_time(end) / 1e3, None  # elapsed_time is in ms
        return self._seconds


class StepTimer:
    """Starts and stops a step's clock: an event pair on CUDA (or from ``event_factory``), else a synced host
    clock."""

    def __init__(self, device: str, device_index: int | None = None, event_factory: Callable[[], Any] | None = None):
        self.device, self.device_index = device, device_index
        self._event_factory = event_factory
        if event_factory is None and device == "cuda":
            import torch

            self._event_factory = lambda: torch.cuda.Event(enable_timing=True)
        self._open: tuple[str, Any] | None = None

    @property
    def uses_events(self) -> bool:
        return self._event_factory is not None

    def start(self, synced: bool = False) -> None:
        """Start the clock; ``synced`` (a profiler window's step) times it on the host after a device sync."""
        if self.uses_events and not synced:
            event = self._event_factory()  # type: ignore[misc]
            event.record(self._stream())
            self._open = ("events", event)
        else:
            sync_device(self.device)
            self._open = ("host", time.perf_counter())

    def stop(self) -> StepTime:
        if self._open is None:
            raise RuntimeError("StepTimer.stop() without start()")
        how, start = self._open
        self._open = None
        if how == "events":
            end = self._event_factory()  # type: ignore[misc]
            end.record(self._stream())
            return StepTime(events=(start, end))
        sync_device(self.device)
        return StepTime(seconds=time.perf_counter() - start)

    def _stream(self) -> Any:
        if self.device != "cuda":
            return None
        import torch

        return torch.cuda.current_stream(self.device_index)


__all__ = ["StepTime", "StepTimer"]
