"""1 vs N GPUs: the configurations to measure and the table of throughput, memory and scaling efficiency."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.distributed import cpu_processes_note
from nbhelpers.measure.env import safe_environment
from nbhelpers.measure.runner import run_configs
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.measure.workload import ADAPTER_NAMES, DATA_NAMES, Workload, workload_from
from nbhelpers.planning.kernel_grid import parse_switches

from .records import gpu_count, is_measured, metric_value, record_label, scaling_efficiency, step_records

ADAPTER_ON_ONE_GPU = (
    "not measured: an adapter (LoRA) trains on one GPU for now (RunConfig refuses an adapter with FSDP2 sharding); "
    "with LoRA a frozen bf16 base fits one GPU up to the 27B shape (the memory planner's LoRA fit says what fits)"
)


# The parameters of notebook 05 its one configuration takes (GPUS and the planner's take none).
WORKLOAD = (
    "RUN_NAME", "MODEL", *DATA_NAMES, "DEVICE", "DTYPE", "PADDING", "ATTENTION", "KERNELS", "LIGER_KERNELS",
    "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES", "STEPS", "WARMUP", "ACTIVATION_CHECKPOINTING", *ADAPTER_NAMES,
    "GPU_MEMORY_GIB",
)  # fmt: skip


def setup_workload(parameters: Mapping[str, Any]) -> Workload:
    """Notebook 05's configuration from its parameters (``globals()``), on one GPU until :func:`scaling_configs`
    takes it to N; refused at once with the parameter named when a value is not allowed."""
    switches = parse_switches(parameters["LIGER_KERNELS"])  # the comma list as the tuple RunConfig holds
    return workload_from({**parameters, "LIGER_KERNELS": switches}, WORKLOAD)


def scaling_configs(base: RunConfig, gpus: int) -> list[RunConfig]:
    """``base`` under FSDP2 on one GPU and on ``gpus``: one workload per GPU (batch sizes are per GPU). With an
    adapter (LoRA), which trains unsharded on one GPU, the 1-GPU run alone (:func:`refused_scaling` says why)."""
    if base.adapter_settings.active:
        return [base.replace(gpus=1, sharding="none", label=f"{base.name} · on 1 GPU")]
    return [base.replace(gpus=n, sharding="fsdp2", label=f"{base.name} · FSDP2 on {n}") for n in sorted({1, gpus})]


def refused_scaling(base: RunConfig, gpus: int, notebook: str = "") -> list[RunRecord]:
    """Failed records, made at once, of the GPU counts ``base`` cannot run: with an adapter, ``gpus`` above one
    (its config is the run that was asked for, under FSDP2); none otherwise."""
    if not base.adapter_settings.active or gpus <= 1:
        return []
    config = base.to_dict() | {"gpus": gpus, "sharding": "fsdp2", "label": f"{base.name} · FSDP2 on {gpus}"}
    return [RunRecord.failed(config, ADAPTER_ON_ONE_GPU, notebook=notebook, environment=safe_environment(base.device))]


def measure_scaling(base: RunConfig, gpus: int, store: RunStore, notebook: str = "") -> list[RunRecord]:
    """Measure :func:`scaling_configs` (each in its own process or torchrun), then store :func:`refused_scaling`'s
    records; every record is appended to ``store`` as it lands, in GPU order."""
    records = run_configs(scaling_configs(base, gpus), store=store, notebook=notebook)
    return records + [store.append(record) for record in refused_scaling(base, gpus, notebook)]


def _reference(record: RunRecord, singles: list[RunRecord]) -> RunRecord | None:
    """The 1-GPU record of the same configuration (all settings but the GPU count and label)."""
    skip = {"gpus", "label", "group"}
    mine = {k: v for k, v in record.config.items() if k not in skip}
    return next((s for s in singles if {k: v for k, v in s.config.items() if k not in skip} == mine), None)


def ran_on(record: RunRecord) -> str:
    """What the record's ranks ran on: "GPU", "CPU" (processes standing in for GPUs), "" when not recorded."""
    device = record.metrics.get("rank_device") or record.environment.get("device_type")
    return {"cuda": "GPU", "cpu": "CPU"}.get(str(device), "")


def device_note(record: RunRecord) -> str:
    """The record's note on what its per-GPU figures are ('' on GPUs): ranks that were CPU processes."""
    if ran_on(record) != "CPU":
        return ""
    note = record.metrics.get("per_gpu_note")
    if isinstance(note, str) and note:
        return note
    cores = record.metrics.get("cpu_cores")
    sharded = record.config.get("sharding", "none") != "none"
    return cpu_processes_note(gpu_count(record), cores if isinstance(cores, int) else None, gloo=sharded)


def scaling_frame(records: Iterable[RunRecord]) -> Any:
    """One row per step record: what it ran on, GPUs, total and per-GPU real tok/s, scaling efficiency, memory per
    GPU, MFU, and a note where the "GPUs" were CPU processes (its per-GPU figures are then per process).

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
            "ran_on": ran_on(record), "gpus": gpu_count(record), "sharding": record.config.get("sharding", "none"),
            "checkpointing": record.config.get("activation_checkpointing", "none"),
            "real_tok_s": total, "real_tok_s_per_gpu": total / gpu_count(record),
            "scaling_efficiency": scaling_efficiency(record, ref) if ref is not None else None,
            "peak_gib_per_gpu": ", ".join(f"{g:.2f}" for g in memory), "mfu": metric_value(record, "mfu"),
            "first_loss": metric_value(record, "loss_first"),
            "communication_ms_per_step": (m["communication_per_step_us"] / 1000
                                          if isinstance(m.get("communication_per_step_us"), (int, float)) else None),
            "memory_measured_by": m.get("peak_memory_source", ""), "note": device_note(record),
        })  # fmt: skip
    return pd.DataFrame(rows)
