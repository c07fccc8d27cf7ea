"""What can run on this device, and why not: the checks every grid, notebook and the tuner make, in one place.

Each check returns '' when something can run here, else the reason (a sentence the notebooks show and the
tuner journals): Liger switches Triton's CPU interpreter cannot run, a kernel backend whose packages are missing,
an attention implementation this device lacks, a path the kernel doctor marks broken (passed in as the mapping
``nbhelpers.kernels.doctor.broken_paths`` returns), and a model family's own refusals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nbhelpers.kernels.attention import attention_status
from nbhelpers.kernels.liger import CPU_INTERPRETABLE_LIGER_KERNELS
from nbhelpers.kernels.registry import family_kernel_refusal, find_backend, uses_liger_switches
from nbhelpers.models.families import family_of_model, packing_mode_of

CPU_SWITCHES_REASON = "Triton's CPU interpreter fails on them (notebook 02 runs them to show it); they run on a GPU"
AUTO_KERNELS = "auto"  # a kernel list chosen per device by auto_kernels
GPU_AUTO_KERNELS = "eager,liger"
# On a CPU the fused kernels are Inductor's, compiled layer by layer: lengths symbolic from the first compile, so a
# packed row of another length compiles nothing new. Measured on 2 cores (qwen3-tiny, 2 x 512, 10 timed steps, empty
# caches, 2026-12-06): a process of 40 s static and 29 s packed, against 46 s and 51 s compiling the whole model
# (whose packed rows recompile once the length changes).
CPU_AUTO_KERNELS = "eager,regional_compile"
# The tuner's "auto" on a CPU: a compiled candidate compiles again in each rung that re-times it (27 s of a 60 s
# budget on 2 cores, 2026-12-06), for a CPU step that is not a GPU job's.
TUNER_CPU_KERNELS = "eager"
CPU_LIGER_REASON = (
    "Liger's kernels are Triton GPU kernels: on a CPU only Triton's interpreter runs them (RoPE and cross-entropy "
    "at about 1/25 of eager's speed, RMSNorm and SwiGLU not at all), which would time the interpreter, not the "
    "kernels; name liger in the list to run it anyway, or see the shipped H200 records"
)


def auto_kernels(value: str, device: str, cpu: str = CPU_AUTO_KERNELS) -> tuple[str, str]:
    """A kernel-backend list with "auto" resolved for ``device`` (a CUDA GPU: eager,liger; a CPU: ``cpu``), and
    the reason Liger is left out where it is ('' when nothing is)."""
    if value.strip().lower() != AUTO_KERNELS:
        return value, ""
    if device == "cpu":
        return cpu, CPU_LIGER_REASON
    return GPU_AUTO_KERNELS, ""


def cpu_skipped_switches(switches: Iterable[str], device: str) -> tuple[str, ...]:
    """The Liger switches Triton's CPU interpreter cannot run (none off a CPU)."""
    if device != "cpu":
        return ()
    return tuple(k for k in switches if k not in CPU_INTERPRETABLE_LIGER_KERNELS)


def switches_here(switches: Iterable[str], device: str) -> tuple[str, ...]:
    """The Liger switches this device runs, in the order given (all of them off a CPU)."""
    switches = tuple(switches)
    skipped = cpu_skipped_switches(switches, device)
    return tuple(k for k in switches if k not in skipped)


def backend_refusal(backend: str, switches: Sequence[str], device: str, parameter: str = "LIGER_KERNELS") -> str:
    """'' when a kernel backend can run here with the requested Liger ``switches``, else why not (a part's
    packages are missing or the device cannot run it, or none of the switches runs on this device)."""
    if status := backend_status(backend, device):
        return status
    if uses_liger_switches(backend) and not switches_here(switches, device):
        return f"none of {parameter}={','.join(switches)!r} runs on {device}"
    return ""


def backend_status(kernels: str, device: str) -> str:
    """'' when every part of a kernel backend can run on this device, else the first part's reason (its packages
    are missing, or the device cannot run it: fla without a CUDA GPU)."""
    backend = find_backend(kernels)
    if backend is None:
        return ""
    for name in backend.components:
        part = find_backend(name)
        why = part.status(device) if part is not None else ""
        if why:
            return why
    return ""


def attention_refusal(attention: str, device: str) -> str:
    """'' when an attention implementation can be tried here, else why it is left out (the attention table's)."""
    return attention_status(attention, device)


def broken_reasons(kernels: str, attention: str, broken: Mapping[str, str] | None) -> dict[str, str]:
    """Why a (kernel backend, attention) pair is left out by a doctor verdict: skipped-list key -> reason, one per
    broken part ("kernels liger+compile" when its liger part is broken); {} when nothing of it is broken."""
    broken = broken or {}
    backend = find_backend(kernels)
    parts = backend.components if backend is not None else (kernels,)
    reasons = {f"kernels {kernels}": f"kernels {p}" for p in parts if f"kernels {p}" in broken}
    if f"attention {attention}" in broken:
        reasons[f"attention {attention}"] = f"attention {attention}"
    return {key: f"the kernel doctor marks {path} broken: {broken[path]}" for key, path in reasons.items()}


def skip_broken(configs: Iterable[Any], broken: Mapping[str, str] | None) -> tuple[list[Any], dict[str, str]]:
    """The configs whose kernel backend (or any of its parts) and attention the doctor did not mark broken,
    and what was left out, keyed like the notebooks' skipped lists ("kernels liger+compile": why)."""
    kept, skipped = [], {}
    for config in configs:
        reasons = broken_reasons(config.kernels, config.attn_implementation, broken)
        skipped.update(reasons)
        if not reasons:
            kept.append(config)
    return kept, skipped


def family_refusal(model: str, attention: str, kernels: str, packed: bool, liger_kernels: Sequence[str] = ()) -> str:
    """'' when the model's family runs this attention, backend, packing and (for a backend that runs Liger) these
    Liger switches, or the model is of no known family."""
    family = family_of_model(model)
    if family is None:
        return ""
    switches = tuple(liger_kernels) if uses_liger_switches(kernels) else ()
    packing = packing_mode_of(model) if packed else ""
    return (
        family.refusal(attention, liger_kernels=switches)
        or family_kernel_refusal(family, kernels)
        or family.refusal(kernels=kernels, packing=packing)
    )


def refusal(
    kernels: str,
    attention: str,
    device: str,
    *,
    model: str,
    packed: bool,
    broken: Mapping[str, str] | None = None,
    liger_kernels: Sequence[str] = (),
) -> str:
    """'' when a backend and attention can run here for this model, else the first reason: the doctor's verdict,
    then the backend's own status on this device, then the attention's availability, then the model family's
    refusal."""
    doctor = broken_reasons(kernels, attention, broken)
    if doctor:
        return "; ".join(doctor.values())
    if status := backend_status(kernels, device):
        return f"kernels={kernels!r}: {status}"
    status = attention_refusal(attention, device)
    if status:
        return f"attn_implementation={attention!r}: {status}"
    return family_refusal(model, attention, kernels, packed, liger_kernels)
