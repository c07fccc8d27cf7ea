"""Notebook 02's facade (kernel swap-in): plan the backends, check them with the doctor, run them, judge parity,
time them, show what changed at kernel level, measure startup, and read the shipped GPU records.

Everything the notebook calls comes from here, so its import cell names one module; the functions live in
the layers below (planning, measure, analysis, views) and are listed in ``__all__``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbhelpers.analysis.gpu_results import (
    describe_flce,
    describe_gpu_results,
    family_results_dir,
    flce_comparison,
    gpu_results_frame,
    liger_switch_table,
    load_gpu_records,
    measured_and_failed,
)
from nbhelpers.analysis.kernel_diff import backend_kernel_diff, patch_reports_frame
from nbhelpers.analysis.parity import (
    attach_parity,
    cpu_unchecked_table,
    parity_against_eager,
    parity_table,
    store_checked,
)
from nbhelpers.analysis.speedup import build_table
from nbhelpers.analysis.startup import startup_table, startup_view
from nbhelpers.data.loading import DataParams, describe_format
from nbhelpers.formatting import format_table, table_or_note
from nbhelpers.kernels.doctor import DoctorReport, broken_paths, describe_machine, doctor_table, run_doctor
from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.doctor_records import doctor_record
from nbhelpers.measure.env import resolve_device
from nbhelpers.measure.runner import prime_spare
from nbhelpers.measure.startup import cold_start_env, export_startup_cache, measure_startup, prepare_startup
from nbhelpers.measure.store import RunStore, run_dir
from nbhelpers.measure.workload import ADAPTER_NAMES, DATA_NAMES, Workload, workload_from
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.planning.device import auto_kernels, skip_broken
from nbhelpers.planning.kernel_grid import (
    backend_configs,
    cpu_skipped_kernels,
    cpu_unsupported_configs,
    describe_backends,
)
from nbhelpers.views.kernel_plots import kernel_diff_plot

from .grid_runs import run_configs

# The parameters of notebook 02 its base workload takes (KERNELS and LIGER_KERNELS make one config per backend).
WORKLOAD = (
    "RUN_NAME", "MODEL", *DATA_NAMES, "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES", "STEPS", "WARMUP", "TIMING",
    "PADDING", *ADAPTER_NAMES, "ACTIVATION_CHECKPOINTING", "DTYPE", "GPU_MEMORY_GIB",
)  # fmt: skip


def setup_workload(parameters: Mapping[str, Any]) -> Workload:
    """Notebook 02's base workload from its parameters (``globals()``), each backend's step profiled; refused at
    once with the parameter named when a value is not allowed (:func:`plan_backends` checks the backend lists)."""
    return workload_from(parameters, WORKLOAD, profile=True)


@dataclass
class BackendPlan:
    """The backends to measure on this device, the Liger switches a CPU cannot run, and a sentence on both."""

    configs: list[RunConfig]
    cpu_skipped: tuple[str, ...]
    description: str


def plan_backends(base: RunConfig, backends: str, liger_kernels: str, device: str) -> BackendPlan:
    """One configuration per backend of ``backends`` (KERNELS), each on the base workload (errors name the
    parameter), with what a CPU leaves out and why."""
    configs = backend_configs(base, backends, liger_kernels, device, parameter="KERNELS")
    skipped = cpu_skipped_kernels(liger_kernels, backends, device)
    left_out = auto_kernels(backends, device)[1]
    return BackendPlan(configs, skipped, describe_backends(configs, skipped, device, left_out))


def doctor_filter(
    configs: Sequence[RunConfig], device: str, run_probes: bool, store: RunStore, run_name: str, notebook: str
) -> tuple[DoctorReport, list[RunConfig], dict[str, str]]:
    """Run the kernel doctor, store its record in the run's store, and leave out the configurations whose paths
    it marked broken (returned with the reason of each)."""
    doctor = run_doctor(device, run_probes=run_probes)
    store.append(doctor_record(doctor, run_name, notebook=notebook))
    kept, skipped = skip_broken(list(configs), broken_paths(doctor))
    return doctor, kept, skipped


def shipped_records(gpu_results: str, model: str, device: str) -> tuple[Any, list[Any]]:
    """The folder of shipped GPU records for the model's family (or ``gpu_results``) and its records; none on a
    GPU, which measures its own."""
    folder = gpu_results or family_results_dir(model)
    return folder, (load_gpu_records(folder) if device == "cpu" else [])


__all__ = [
    "AdapterSettings",
    "BASELINE_BACKEND",
    "BackendPlan",
    "DataParams",
    "RunConfig",
    "RunStore",
    "Workload",
    "attach_parity",
    "backend_kernel_diff",
    "build_table",
    "cold_start_env",
    "cpu_unchecked_table",
    "cpu_unsupported_configs",
    "describe_flce",
    "describe_format",
    "describe_gpu_results",
    "describe_machine",
    "doctor_filter",
    "doctor_table",
    "export_startup_cache",
    "flce_comparison",
    "format_table",
    "gpu_results_frame",
    "kernel_diff_plot",
    "liger_switch_table",
    "measured_and_failed",
    "load_gpu_records",
    "measure_startup",
    "prepare_startup",
    "parity_against_eager",
    "parity_table",
    "patch_reports_frame",
    "plan_backends",
    "resolve_device",
    "prime_spare",
    "run_configs",
    "run_dir",
    "setup_workload",
    "shipped_records",
    "startup_table",
    "startup_view",
    "store_checked",
    "table_or_note",
]
