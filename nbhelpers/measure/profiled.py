"""Glue between the measured step and the trace analysis: profile a few steps, summarize the trace."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import RunConfig


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
    from nbhelpers.profiling.analyze import summarize
    from nbhelpers.profiling.capture import profile_steps
    from nbhelpers.profiling.parse import load_trace

    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", config.name).strip("-")
    path = folder / "traces" / f"{slug}-{uuid.uuid4().hex[:6]}.trace.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    counter = iter(range(first_active_batch - 2, 10**9))  # wait + warm-up steps come first
    path = profile_steps(
        lambda: step(next(counter)), wait=1, warmup=1, active=config.profile_steps,
        out_path=path, device_type=device,
    )  # fmt: skip
    summary = summarize(load_trace(path), model_flops_per_step=model_flops_per_step, peak_flops=peak_flops)
    return Path(path), {f"trace_{key}": value for key, value in summary.items()} | {
        "kernels_per_step": summary.get("launches_per_step")
    }
