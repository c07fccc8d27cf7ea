"""Capture a torch.profiler trace of a few training steps as a gzip-compressed Chrome trace."""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

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

    CPU activity is always recorded, CUDA activity when ``device_type == "cuda"``; shapes are not
    recorded. The device is synchronized at the end of every step, so each ProfilerStep span holds its
    own kernels. ``out_path`` is a ``.json.gz`` file, or a folder that gets ``trace.json.gz``.
    Returns the path of the written trace.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    for name, value in (("wait", wait), ("warmup", warmup), ("active", active)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "active" else 0):
            raise ValueError(f"{name}={value!r}: must be an integer >= {1 if name == 'active' else 0}")
    target = _resolve_out_path(out_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU]
    if device_type == "cuda" and torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with tempfile.TemporaryDirectory() as folder:
        raw = Path(folder) / "trace.json"

        def export(prof: torch.profiler.profile) -> None:
            prof.export_chrome_trace(str(raw))

        with profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=export,
            record_shapes=False,
        ) as prof:
            for _ in range(wait + warmup + active):
                step_fn()
                _synchronize(device_type)
                prof.step()
        if not raw.exists():  # pragma: no cover - torch always calls on_trace_ready after the active steps
            raise RuntimeError("torch.profiler wrote no trace")
        partial = target.with_name(target.name + ".partial")
        with open(raw, "rb") as source, gzip.open(partial, "wb", compresslevel=6) as sink:
            shutil.copyfileobj(source, sink, length=1 << 20)
        os.replace(partial, target)
    return target
