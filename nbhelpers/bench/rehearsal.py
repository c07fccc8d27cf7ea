"""A suite's rows at a CPU's sizes: the same path end to end in minutes, before GPU time is spent on it.

Each row keeps its strategy, adapter, checkpointing, sharding and GPU count (gloo ranks on a CPU) and gets its
family's smallest preset, the kernel parts a CPU runs, the default attention, short rows and fp32. The numbers of a
rehearsal mean nothing; that every row measures, and is stored with its manifest line, does.
"""

from __future__ import annotations

from nbhelpers.kernels.attention import DEFAULT_ATTENTION
from nbhelpers.kernels.liger import CPU_INTERPRETABLE_LIGER_KERNELS
from nbhelpers.kernels.registry import BASELINE_BACKEND, KERNEL_BACKENDS, kernel_backend, uses_liger_switches
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.model_fit import text_config
from nbhelpers.models.families import is_preset, smallest_preset
from nbhelpers.models.loading import model_config

MAX_LENGTH = 64
BATCH_SIZE = 2
SAMPLES = 8
STEPS = 2
TIMEOUT_S = 300


def cpu_kernels(name: str) -> str:
    """The parts of a kernel backend that run on a CPU here, composed as the table names them; the baseline when
    none do or the table has no such composite."""
    runnable = [part for part in kernel_backend(name).components if not kernel_backend(part).status("cpu")]
    composed = "+".join(runnable)
    return composed if composed in KERNEL_BACKENDS else BASELINE_BACKEND


def rehearsal(config: RunConfig) -> RunConfig:
    """``config`` at a CPU's sizes (see the module's docstring)."""
    kernels = cpu_kernels(config.kernels)
    switches = tuple(k for k in config.liger_kernels if k in CPU_INTERPRETABLE_LIGER_KERNELS)
    budget = min(config.token_budget, 4 * MAX_LENGTH) if config.token_budget else 0
    steps = min(config.steps, STEPS) if config.timing == "steps" else config.steps
    model = smallest_preset(config.model) if is_preset(config.model) else config.model
    layers = text_config(model_config(model)).num_hidden_layers if is_preset(model) else config.checkpoint_every
    return config.replace(
        model=model, checkpoint_every=min(config.checkpoint_every, layers),  # every k-th of the small preset's layers
        kernels=kernels, liger_kernels=switches if uses_liger_switches(kernels) else (),
        attn_implementation=DEFAULT_ATTENTION, dtype="auto", device="cpu",
        batch_size=min(config.batch_size, BATCH_SIZE),
        max_length=MAX_LENGTH, token_budget=max(budget, MAX_LENGTH) if budget else 0,
        num_samples=min(config.num_samples, SAMPLES), steps=steps, warmup=min(config.warmup, 1),
        min_timed_steps=min(config.min_timed_steps, STEPS), timing_cap_s=min(config.timing_cap_s, 30),
        profile=False, timeout_s=TIMEOUT_S, extra={**config.extra, "parity_probe_samples": 2},
    )  # fmt: skip
