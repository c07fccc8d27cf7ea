"""The grid of notebook 03: kernel backends x padding strategies x attention implementations that can run here."""

from __future__ import annotations

from collections.abc import Sequence

from nbhelpers.data.strategies import PADDING_STRATEGIES
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
from nbhelpers.kernels.liger import DEFAULT_LIGER_KERNELS
from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import ConfigError, check_choice

from .device import attention_refusal
from .kernel_grid import kernel_grid


def strategy_configs(
    base: RunConfig,
    strategies: Sequence[str],
    attentions: Sequence[str],
    device: str = "cpu",
    kernels: str = BASELINE_BACKEND,
    liger_kernels: str = ",".join(DEFAULT_LIGER_KERNELS),
) -> tuple[list[RunConfig], dict[str, str]]:
    """The grid kernels x strategy x attention that can be tried here, and what is left out with why.

    ``kernels`` and ``liger_kernels`` are comma lists as notebook parameters give them (KERNELS, LIGER_KERNELS);
    the kernel axis comes from :func:`nbhelpers.planning.kernel_grid.kernel_grid` (eager first, a backend that
    cannot run here skipped with its reason), the attentions left out from
    :func:`nbhelpers.planning.device.attention_refusal`. Labels read ``kernels, strategy, attention``; eager comes
    first, so the first configuration is eager with the first strategy and attention (the parity reference).
    """
    for name in strategies:
        check_choice("padding", name, PADDING_STRATEGIES)
    for name in attentions:
        if name not in ATTENTION_IMPLEMENTATIONS:
            raise ConfigError("attn_implementation", name, "one of " + ", ".join(ATTENTION_IMPLEMENTATIONS))
    kernel_configs, skipped = kernel_grid(base, kernels, liger_kernels, device)
    skipped.update({f"attention {a}": why for a in attentions if (why := attention_refusal(a, device))})
    runnable = [a for a in attentions if f"attention {a}" not in skipped]
    kernel_configs.sort(key=lambda c: c.kernels != BASELINE_BACKEND)
    configs = [
        k.replace(padding=s, attn_implementation=a, label=f"{k.kernels}, {s}, {a}")
        for k in kernel_configs
        for a in runnable
        for s in strategies
    ]
    return configs, skipped
