"""Capture a torch.profiler trace of a few training steps as a gzip-compressed Chrome trace.

``profile_steps`` runs a step function itself; ``ProfilerWindow`` is driven step by step from outside (a
trainer callback, a training loop), for a loop the caller does not own.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRACE_FILENAME = "trace.json.gz"


def _synchronize(device_type: str) -> None:
    import torch

    if device_type == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def _resolve_out_path(out_path: Path) -> Path:
    out_path = Path(out_path)
    if out_path.name.endswith(".json.gz"):
        return out_path
    if out_path.name.endswith(".json"):
        return out_path.with_name(out_path.name + ".gz")
    return out_path / TRACE_FILENAME


def _check_schedule(wait: int, warmup: int, active: int) -> None:
    for name, value in (("wait", wait), ("warmup", warmup), ("active", active)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "active" else 0):
            raise ValueError(f"{name}={value!r}: must be an integer >= {1 if name == 'active' else 0}")


class ProfilerWindow:
    """A torch.profiler window over wait + warmup + active steps, driven from outside the loop.

    Call ``start()`` before the first step and ``step()`` after each one; the ``step()`` that ends the last
    active step writes the trace and returns its path (None before). ``stop()`` ends the window early
    (nothing is written). CPU activity is always recorded, CUDA activity when ``device_type == "cuda"``;
    shapes are not recorded. The device is synchronized at the end of every step, so each ProfilerStep
    span holds its own kernels. ``out_path`` is a ``.json.gz`` file, or a folder that gets ``trace.json.gz``.
    """

    def __init__(self, out_path: Path, device_type: str, *, wait: int = 0, warmup: int = 1, active: int = 1) -> None:
        _check_schedule(wait, warmup, active)
        self.target = _resolve_out_path(out_path)
        self.device_type = device_type
        self.wait, self.warmup, self.active = wait, warmup, active
        self.steps_done = 0
        self._profiler: Any = None
        self._folder: tempfile.TemporaryDirectory[str] | None = None

    @property
    def length(self) -> int:
        """Steps the window covers (wait + warmup + active)."""
        return self.wait + self.warmup + self.active

    @property
    def running(self) -> bool:
        return self._profiler is not None

    def start(self) -> ProfilerWindow:
        """Open the profiler (before the window's first step)."""
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        if self.running:
            raise RuntimeError("the profiler window is already running")
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self._folder = tempfile.TemporaryDirectory()
        raw = Path(self._folder.name) / "trace.json"
        activities = [ProfilerActivity.CPU]
        if self.device_type == "cuda" and torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.active, repeat=1),
            on_trace_ready=lambda prof: prof.export_chrome_trace(str(raw)),
            record_shapes=False,
        )
        self._profiler.__enter__()
        self.steps_done = 0
        return self

    def step(self) -> Path | None:
        """Mark the end of one step; after the window's last step, write the trace and return its path."""
        if not self.running:
            raise RuntimeError("the profiler window is not running: call start() first")
        _synchronize(self.device_type)
        self._profiler.step()
        self.steps_done += 1
        if self.steps_done < self.length:
            return None
        return self._finish()

    def stop(self) -> None:
        """End the window before its last step, writing nothing."""
        if self.running:
            self._profiler.__exit__(None, None, None)
            self._profiler = None
        self._cleanup()

    def _finish(self) -> Path:
        self._profiler.__exit__(None, None, None)
        self._profiler = None
        assert self._folder is not None
        raw = Path(self._folder.name) / "trace.json"
        try:
            if not raw.exists():  # pragma: no cover - torch always calls on_trace_ready after the active steps
                raise RuntimeError("torch.profiler wrote no trace")
            partial = self.target.with_name(self.target.name + ".partial")
            with open(raw, "rb") as source, gzip.open(partial, "wb", compresslevel=6) as sink:
                shutil.copyfileobj(source, sink, length=1 << 20)
            os.replace(partial, self.target)
        finally:
            self._cleanup()
        return self.target

    def _cleanup(self) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def profile_steps(
    step_fn: Callable[[], None],
    *,
    wait: int = 1,
    warmup: int = 1,
    active: int = 1,
    out_path: Path,
    device_type: str,
) -> Path:
    """Run ``step_fn`` wait + warmup + active times under torch.profiler and write the active steps.

    What is recorded is :class:`ProfilerWindow`'s. Returns the path of the written trace.
    """
    window = ProfilerWindow(out_path, device_type, wait=wait, warmup=warmup, active=active).start()
    path = None
    try:
        while path is None:
            step_fn()
            path = window.step()
    finally:
        window.stop()
    return path
