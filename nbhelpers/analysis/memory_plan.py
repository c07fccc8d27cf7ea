"""The memory planner beside the records: its plan for a set of settings as a table, and its prediction against
each measured peak.

The arithmetic (:func:`plan_memory`, :class:`MemorySettings`, :func:`settings_from_config`, the cap's refusal)
is :mod:`nbhelpers.measure.memory_plan`'s, below the step that refuses a configuration planned over its memory
cap; its names are taken here so that analysis reads one module. On the shipped single-H200 records of the 1.7B
shape the plan is within 12% of the measured peak (:func:`planned_vs_measured`; tests/analysis/test_memory_plan.py
keeps it so).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nbhelpers.kernels.fla import FUSED_GATED_NORM
from nbhelpers.measure.engines import WORKBOOK
from nbhelpers.measure.memory_plan import (
    GIB,
    H200_USABLE_GIB,
    LOSS_BYTES_PER_LOGIT,
    SHARDINGS,
    WEIGHTS,
    MemoryPlan,
    MemorySettings,
    adapter_activation_bytes,
    delta_net_bytes,
    gpus_needed,
    host_offload_bytes,
    layer_activation_bytes,
    plan_memory,
    planned_capacity_gib,
    recomputed_layers,
    settings_from_config,
)
from nbhelpers.models.shape import ModelShape


def plan_frame(shape: ModelShape, settings: dict[str, MemorySettings]) -> Any:
    """One row per named setting: GiB by part, total, fits, and the fewest GPUs that fit."""
    import pandas as pd

    rows = []
    for name, setting in settings.items():
        plan = plan_memory(shape, setting)
        rows.append({"setting": name, "gpus": setting.gpus, **{k: round(v, 2) for k, v in plan.gib().items()},
                     "fits": plan.fits, "gpus_needed": gpus_needed(shape, setting)})  # fmt: skip
    return pd.DataFrame(rows)


def planned_vs_measured(records: Any, capacity_gib: float = H200_USABLE_GIB, cuda_only: bool = True) -> Any:
    """Predicted and measured peak GiB per GPU for measured step records of preset models, with the error.

    The tokens per GPU are the widest timed batch the record kept (``timed_batch_shapes``); records without
    it, and a peer engine's (TRL's, Unsloth's: not the step the planner plans), are left out. ``cuda_only`` keeps
    records whose peak is CUDA's allocator peak (a CPU run's peak is the process's resident set, which also holds
    Python and the libraries).
    """
    import pandas as pd

    from nbhelpers.measure.config import RunConfig
    from nbhelpers.models.families import is_preset, model_shape, preset_config

    rows = []
    for record in records:
        metrics = record.metrics
        shapes = metrics.get("timed_batch_shapes")
        source = str(metrics.get("peak_memory_source", ""))
        if record.kind != "step" or not record.ok or not shapes or "peak_memory_gib" not in metrics:
            continue
        if record.config.get("engine", WORKBOOK) != WORKBOOK:  # a peer's (TRL's, Unsloth's) step is not planned
            continue
        if (cuda_only and "cuda" not in source) or not is_preset(str(record.config.get("model"))):
            continue
        config = RunConfig.from_record(record.config)
        report = metrics.get("patch_report") or {}  # what the step really ran: older fla steps had no fused norm
        settings = dataclasses.replace(
            settings_from_config(config, planned_capacity_gib(config, capacity_gib)),
            tokens_per_gpu=max(a * b for a, b in shapes),
            fused_gated_norm=bool(report.get(FUSED_GATED_NORM)),
        )  # fmt: skip
        plan = plan_memory(model_shape(preset_config(config.model)), settings)
        measured = float(metrics["peak_memory_gib"])
        rows.append({
            "label": config.name, "model": config.model, "gpus": config.gpus, "sharding": config.sharding,
            "checkpointing": config.activation_checkpointing, "tokens_per_gpu": settings.tokens_per_gpu,
            "planned_gib": round(plan.total_gib, 2), "measured_gib": round(measured, 2),
            "error": plan.total_gib / measured - 1 if measured else float("nan"), "measured_by": source,
        })  # fmt: skip
    return pd.DataFrame(rows)


def standard_settings(tokens_per_gpu: int, capacity_gib: float = H200_USABLE_GIB) -> dict[str, MemorySettings]:
    """The settings worth comparing for a shape: bf16 or fp32 weights, Liger or not, checkpointing or not."""
    base = MemorySettings(tokens_per_gpu=tokens_per_gpu, capacity_gib=capacity_gib)
    liger = dataclasses.replace(base, fused_norm_mlp=True, loss="liger_ce")
    return {
        "bf16 weights, eager": base,
        "bf16 weights, Liger (no fused linear CE)": liger,
        "bf16 weights, Liger, checkpoint every 2nd layer": dataclasses.replace(liger, checkpointing="every_k"),
        "bf16 weights, Liger, full checkpointing": dataclasses.replace(liger, checkpointing="full"),
        "fp32 weights + bf16 autocast, Liger, full checkpointing": dataclasses.replace(
            liger, weights="fp32", checkpointing="full"
        ),
    }


__all__ = [
    "GIB", "H200_USABLE_GIB", "LOSS_BYTES_PER_LOGIT", "SHARDINGS", "WEIGHTS", "MemoryPlan",
    "MemorySettings", "adapter_activation_bytes", "delta_net_bytes", "gpus_needed", "layer_activation_bytes",
    "host_offload_bytes", "plan_frame", "plan_memory", "planned_capacity_gib", "planned_vs_measured",
    "recomputed_layers", "settings_from_config", "standard_settings",
]  # fmt: skip
