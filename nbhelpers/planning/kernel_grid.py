"""The kernel axis of a grid: one configuration per kernel backend (notebook 02), or those that can run here.

What each backend is lives in the table (:mod:`nbhelpers.kernels.registry`); what a device cannot run, and why,
in :mod:`nbhelpers.planning.device`. Applying a backend is :mod:`nbhelpers.kernels.backends`' job.
"""

from __future__ import annotations

from collections.abc import Iterable

from nbhelpers.kernels.liger import LIGER_BACKEND, LIGER_KERNELS
from nbhelpers.kernels.registry import BASELINE_BACKEND, KERNEL_BACKENDS, liger_switches_for, uses_liger_switches
from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import ConfigError

from .device import CPU_SWITCHES_REASON, auto_kernels, backend_refusal, cpu_skipped_switches, switches_here
from .lists import parse_list


def parse_backends(backends: str, parameter: str) -> tuple[str, ...]:
    """Kernel backends of the table, 'eager' (the parity and speed baseline) among them; else ConfigError."""
    names = parse_list(backends, KERNEL_BACKENDS, parameter)
    if BASELINE_BACKEND not in names:
        raise ConfigError(parameter, backends, "a list that includes 'eager' (the parity and speed baseline)")
    return names


def parse_switches(liger_kernels: str, parameter: str = "LIGER_KERNELS") -> tuple[str, ...]:
    """Liger switches of the table ('' for none)."""
    return parse_list(liger_kernels, LIGER_KERNELS, parameter, empty=True)


def backend_configs(
    base: RunConfig, backends: str, liger_kernels: str, device: str = "cpu", parameter: str = "BACKENDS"
) -> list[RunConfig]:
    """One config per backend (label = backend; 'eager' required). On a CPU, Liger keeps only the
    kernels Triton's interpreter runs.

    The Liger kernels a CPU cannot run are listed by :func:`cpu_skipped_kernels`; the notebook runs
    them separately to show why. ``parameter`` names the notebook parameter in errors.
    """
    names = parse_backends(auto_kernels(backends, device)[0], parameter)
    switches = switches_here(parse_switches(liger_kernels), device)
    configs = []
    for name in names:
        uses_switches = uses_liger_switches(name)
        if uses_switches and not switches:
            raise ConfigError("LIGER_KERNELS", liger_kernels, "at least one kernel this device can run")
        configs.append(base.replace(label=name, kernels=name, liger_kernels=liger_switches_for(name, switches)))
    return configs


def kernel_grid(
    base: RunConfig, backends: str, liger_kernels: str, device: str = "cpu", parameter: str = "KERNELS"
) -> tuple[list[RunConfig], dict[str, str]]:
    """The kernel axis of a measured grid: one config per backend that can run here, and what is left out, with why.

    Like :func:`backend_configs`, but a backend that cannot run on ``device`` (Liger without its packages, or
    with no requested switch this device runs) is skipped with its reason instead of refused, and the Liger
    switches a CPU cannot run are listed as skipped too. Keys of the skipped dict say what was left out.
    """
    backends, left_out = auto_kernels(backends, device)
    names = parse_backends(backends, parameter)
    requested = parse_switches(liger_kernels)
    switches = requested
    skipped: dict[str, str] = {"kernels liger": left_out} if left_out else {}
    if any(uses_liger_switches(name) for name in names):
        switches = switches_here(requested, device)
        left_out = cpu_skipped_switches(requested, device)
        if left_out:
            skipped[f"Liger switches {', '.join(left_out)}"] = CPU_SWITCHES_REASON
    configs = []
    for name in names:
        why = backend_refusal(name, requested, device)
        if why:
            skipped[f"kernels {name}"] = why
            continue
        configs.append(base.replace(label=name, kernels=name, liger_kernels=liger_switches_for(name, switches)))
    return configs, skipped


def cpu_skipped_kernels(liger_kernels: str, backends: str = LIGER_BACKEND, device: str = "cpu") -> tuple[str, ...]:
    """Requested Liger kernels that Triton's CPU interpreter cannot run (none off a CPU or without Liger)."""
    backends = auto_kernels(backends, device)[0]
    switches = parse_switches(liger_kernels)
    if not any(uses_liger_switches(name) for name in parse_list(backends, None, "BACKENDS", empty=True)):
        return ()
    return cpu_skipped_switches(switches, device)


def cpu_unsupported_configs(base: RunConfig, kernels: Iterable[str]) -> list[RunConfig]:
    """One Liger config per kernel, to run on a CPU and show (by its failed record) why it is not checked."""
    return [
        base.replace(
            label=f"{LIGER_BACKEND} {k} (CPU interpreter)", kernels=LIGER_BACKEND, liger_kernels=(k,), profile=False
        )
        for k in kernels
    ]


def describe_backends(configs: Iterable[RunConfig], skipped: Iterable[str], device: str, left_out: str = "") -> str:
    """What is measured where, which Liger kernels this device leaves unchecked, and why Liger is left out when an
    "auto" list left it out (``left_out``)."""
    configs = list(configs)
    liger = next((c.liger_kernels for c in configs if uses_liger_switches(c.kernels)), ())
    text = (
        f"device {device}: backends {', '.join(c.label for c in configs)} (baseline {BASELINE_BACKEND}); "
        f"Liger kernels {', '.join(liger) or 'none'}\n"
        f"Liger kernels not checked on this device: {', '.join(skipped) or 'none'}"
    )
    return text + (f"\nLiger is left out here: {left_out}" if left_out else "")
