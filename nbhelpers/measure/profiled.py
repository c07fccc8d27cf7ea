"""Glue between the measured step and the trace analysis: profile a few steps, summarize the trace. The workbook's
loop is profiled after its timed steps (:func:`capture_and_summarize`); a peer's trainer (TRL, Unsloth) in one more
epoch after its timed ones (:func:`profiled_epoch`), so neither timing holds a profiled step."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import RunConfig


def trace_path(config: RunConfig, folder: Path) -> Path:
    """A new trace file for ``config`` under ``folder``/traces."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", config.name).strip("-")
    path = folder / "traces" / f"{slug}-{uuid.uuid4().hex[:6]}.trace.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def trace_metrics(path: Path, model_flops_per_step: float, peak_flops: float) -> dict[str, Any]:
    """The trace's summary as a record's metrics (``trace_*``, ``kernels_per_step``)."""
    from nbhelpers.profiling.analyze import summarize
    from nbhelpers.profiling.parse import load_trace

    summary = summarize(load_trace(path), model_flops_per_step=model_flops_per_step, peak_flops=peak_flops)
    return {f"trace_{key}": value for key, value in summary.items()} | {
        "kernels_per_step": summary.get("launches_per_step"),
        "trace_model_flops_per_step": model_flops_per_step,
    }


def capture_and_summarize(
    step: Callable[[int], Any],
    config: RunConfig,
    folder: Path,
    device: str,
    model_flops_per_step: float,
    peak_flops: float,
    first_active_batch: int = 2,
) -> tuple[Path, dict[str, Any]]:
    """Profile ``config.profile_steps`` steps (after one wait and one warm-up step) and summarize.

    ``step(i)`` runs batch ``i``; the profiled (active) steps run batches ``first_active_batch`` onward,
    so they are the same batches as the first timed steps and ``model_flops_per_step`` (theirs) matches.
    """
    from nbhelpers.profiling.capture import profile_steps

    counter = iter(range(first_active_batch - 2, 10**9))  # wait + warm-up steps come first
    path = profile_steps(
        lambda: step(next(counter)), wait=1, warmup=1, active=config.profile_steps,
        out_path=trace_path(config, folder), device_type=device,
    )  # fmt: skip
    return Path(path), trace_metrics(Path(path), model_flops_per_step, peak_flops)


def profiled_epoch(config: RunConfig, folder: Path, device: str, epoch: int, steps_per_epoch: int) -> Any:
    """A TrainerCallback that profiles the first optimizer steps of epoch ``epoch`` (counted from 1): a warm-up
    step where the epoch has more than ``config.profile_steps`` steps, then ``config.profile_steps`` profiled ones
    (fewer where the epoch is shorter). Its ``trace`` is the written file (None until then), ``warmup`` the steps
    before the profiled ones."""
    from transformers import TrainerCallback

    from nbhelpers.profiling.capture import ProfilerWindow

    active = min(config.profile_steps, steps_per_epoch)
    warmup = 1 if steps_per_epoch > active else 0

    class ProfiledEpoch(TrainerCallback):
        def __init__(self) -> None:
            self.epochs_begun, self.warmup = 0, warmup
            self.window: ProfilerWindow | None = None
            self.trace: Path | None = None

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.epochs_begun += 1
            if self.epochs_begun == epoch:
                self.window = ProfilerWindow(trace_path(config, folder), device, warmup=warmup, active=active).start()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.window is not None and self.window.running:
                self.trace = self.window.step() or self.trace

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.window is not None:
                self.window.stop()  # a window the epoch did not finish writes nothing

    return ProfiledEpoch()
