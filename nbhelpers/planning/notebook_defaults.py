"""The notebooks' defaults in one table, for the commands that take the same settings (``nbhelpers tune``,
``nbhelpers warm-cache``): a command run with no option measures what the notebook run with no parameter measures.

The notebooks' parameters cells hold the same values as literals (papermill reads literals); a test holds every
notebook that declares one of these names to this table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .device import AUTO_KERNELS

# Notebook parameter -> default: the workload notebooks 01-03 share (keep them equal, so notebook 04 divides records
# of one workload) and notebook 03's grid and tuner.
NOTEBOOK_DEFAULTS: dict[str, Any] = {
    "MODEL": "qwen3-tiny",
    "DATASET": "default",
    "BATCH_SIZE": 2,
    "MAX_LENGTH": 512,
    "NUM_SAMPLES": 8,
    "STEPS": 10,
    "WARMUP": 1,
    "TIMING": "steps",
    "DTYPE": "auto",
    "ADAPTER": "none",
    "LORA_RANK": 16,
    "LORA_ALPHA": 32,
    "LORA_TARGETS": "all-linear",
    "FROZEN_BASE": "bf16",
    "GPU_MEMORY_GIB": 0.0,
    "KERNELS": AUTO_KERNELS,  # per device: eager,liger on a GPU, eager,regional_compile on a CPU (planning.device)
    "STRATEGIES": "static,packed",
    "ATTENTION": "sdpa",
    "TUNE_BUDGET_S": 60,
    "TUNE_TOKEN_BUDGETS": "0",
}


def command_defaults(names: Iterable[str]) -> dict[str, Any]:
    """The notebooks' defaults of ``names`` (notebook parameters) keyed as a command's options (``batch_size``)."""
    return {name.lower(): NOTEBOOK_DEFAULTS[name] for name in names}


__all__ = ["NOTEBOOK_DEFAULTS", "command_defaults"]
