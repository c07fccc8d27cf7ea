"""The monitor's profiler window: every N steps, a few steps under torch.profiler, summarized as notebook 01 does."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.profiling.analyze import summarize
from nbhelpers.profiling.capture import ProfilerWindow
from nbhelpers.profiling.parse import load_trace


@dataclass
class WindowResult:
    """One finished window: its steps, the trace summary and what the window cost in wall time."""

    first_step: int
    steps: int  # steps under the profiler, warm-up included
    active_steps: int  # steps in the trace
    summary: dict[str, Any]  # nbhelpers.profiling.analyze.summarize of the trace
    steps_time_s: float  # wall time of the window's steps (the profiler's overhead included)
    export_time_s: float  # writing, reading and summarizing the trace
    trace: str | None  # path of the trace, when kept

    @property
    def time_s(self) -> float:
        return self.steps_time_s + self.export_time_s


@dataclass
class WindowSchedule:
    """A window starts at each step number divisible by ``every`` (0: never), never inside another window."""

    every: int
    warmup: int = 1
    active: int = 1
    next_allowed: int = field(default=1, init=False)

    @property
    def length(self) -> int:
        return self.warmup + self.active

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0 and step >= self.next_allowed


class MonitorWindow:
    """Opens a :class:`ProfilerWindow` when the schedule says so and summarizes the trace when it closes."""

    def __init__(
        self, folder: Path, device_type: str, schedule: WindowSchedule, peak_flops: float | None, keep_traces: bool,
        prefix: str = "monitor",
    ) -> None:  # fmt: skip
        self.folder = Path(folder)
        self.prefix = prefix
        self.device_type = device_type
        self.schedule = schedule
        self.peak_flops = peak_flops
        self.keep_traces = keep_traces
        self._window: ProfilerWindow | None = None
        self._first_step = 0
        self._times: list[float] = []
        self._active_flops: list[float] = []

    @property
    def running(self) -> bool:
        return self._window is not None

    def begin_step(self, step: int) -> bool:
        """Open a window at a due step; whether this step runs under the profiler."""
        if self._window is None and self.schedule.due(step):
            path = self.folder / f"{self.prefix}-step{step}-{time.strftime('%Y%m%d-%H%M%S')}.trace.json.gz"
            self._window = ProfilerWindow(
                path, self.device_type, wait=0, warmup=self.schedule.warmup, active=self.schedule.active
            ).start()
            self._first_step, self._times, self._active_flops = step, [], []
            self.schedule.next_allowed = step + self.schedule.length
        return self._window is not None

    def end_step(self, step_time_s: float, model_flops: float) -> WindowResult | None:
        """Close one profiled step; after the window's last one, the summary of its trace."""
        if self._window is None:
            return None
        self._times.append(step_time_s)
        if len(self._times) > self.schedule.warmup:
            self._active_flops.append(model_flops)
        start = time.perf_counter()
        path = self._window.step()
        if path is None:
            self._times[-1] += time.perf_counter() - start
            return None
        self._window = None
        flops = sum(self._active_flops) / len(self._active_flops) if self._active_flops else None
        summary = summarize(load_trace(path), model_flops_per_step=flops, peak_flops=self.peak_flops)
        if not self.keep_traces:
            path.unlink(missing_ok=True)
        return WindowResult(
            first_step=self._first_step, steps=len(self._times), active_steps=len(self._active_flops),
            summary=summary, steps_time_s=sum(self._times), export_time_s=time.perf_counter() - start,
            trace=str(path) if self.keep_traces else None,
        )  # fmt: skip

    def stop(self) -> None:
        """Drop an unfinished window (the run ended inside it)."""
        if self._window is not None:
            self._window.stop()
            self._window = None
