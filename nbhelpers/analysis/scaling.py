"""1 vs N GPUs: the configurations to measure and the table of throughput, memory and scaling efficiency."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord

from .records import gpu_count, is_measured, metric_value, record_label, scaling_efficiency, step_records


def scaling_configs(base: RunConfig, gpus: int) -> list[RunConfig]:
    """``base`` under FSDP2 on one GPU and on ``gpus``: one workload per GPU (batch sizes are per GPU)."""
    return [base.replace(gpus=n, sharding="fsdp2", label=f"{base.name} · FSDP2 on {n}") for n in sorted({1, gpus})]


def _reference(record: RunRecord, singles: list[RunRecord]) -> RunRecord | None:
    """The 1-GPU record of the same configuration (all settings but the GPU count and label)."""
    skip = {"gpus", "label", "group"}
    mine = {k: v for k, v in record.config.items() if k not in skip}
    return next((s for s in singles if {k: v for k, v in s.config.items() if k not in skip} == mine), None)


def scaling_frame(records: Iterable[RunRecord]) -> Any:
    """One row per step record: GPUs, total and per-GPU real tok/s, scaling efficiency, memory per GPU, MFU.

    Scaling efficiency is per-GPU throughput over the 1-GPU record of the same configuration
    (:func:`nbhelpers.analysis.records.scaling_efficiency`); communication is the trace's collective time per
    step, where the configuration was profiled.
    """
    import pandas as pd

    steps = step_records(records)
    singles = [r for r in steps if is_measured(r) and gpu_count(r) == 1]
    rows = []
    for record in steps:
        m = record.metrics
        ref = _reference(record, singles) if gpu_count(record) > 1 and is_measured(record) else None
        memory = m.get("peak_memory_gib_per_gpu") or ([m["peak_memory_gib"]] if "peak_memory_gib" in m else [])
        total = metric_value(record, "real_tokens_per_s")
        rows.append({
            "label": record_label(record), "status": record.status, "reason": record.reason,
            "gpus": gpu_count(record), "sharding": record.config.get("sharding", "none"),
            "checkpointing": record.config.get("activation_checkpointing", "none"),
            "real_tok_s": total, "real_tok_s_per_gpu": total / gpu_count(record),
            "scaling_efficiency": scaling_efficiency(record, ref) if ref is not None else None,
            "peak_gib_per_gpu": ", ".join(f"{g:.2f}" for g in memory), "mfu": metric_value(record, "mfu"),
            "first_loss": metric_value(record, "loss_first"),
            "communication_ms_per_step": (m["communication_per_step_us"] / 1000
                                          if isinstance(m.get("communication_per_step_us"), (int, float)) else None),
            "memory_measured_by": m.get("peak_memory_source", ""),
        })  # fmt: skip
    return pd.DataFrame(rows)
