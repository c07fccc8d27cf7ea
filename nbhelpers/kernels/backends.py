"""Kernel backends applied and verified on the model instance.

What each backend is and does lives in the table (:mod:`nbhelpers.kernels.registry`). Liger's patch
rebinds module-level names for the whole process and cannot be undone: run each backend in its own
subprocess (the runner does), never in a notebook's kernel. Which backends a grid measures is
:mod:`nbhelpers.planning.kernel_grid`'s job; what their records show, :mod:`nbhelpers.analysis.kernel_diff`'s.
"""

from __future__ import annotations

from typing import Any

from nbhelpers.models.adapters import base_model_of
from nbhelpers.models.families import family_of_model_type

from .hybrid_paths import apply_reference
from .registry import ELEMENTARY_BACKENDS, REPORT_KEYS, family_kernel_refusal, kernel_backend
from .spec import LINEAR_ATTENTION, BackendUnavailable


def patch_report(model: Any) -> dict[str, bool]:
    """Which kernels are really replaced, read off the model instance and the names it calls.

    Every backend in the table reports its own keys; a kernel counts as replaced only when every place
    that runs it is replaced (see KERNEL_CHECKS). An adapter's wrapper (PEFT) is looked through: the kernels
    are read off the transformers model inside it, which the wrapper calls.
    """
    model = base_model_of(model)
    report = dict.fromkeys(REPORT_KEYS, False)
    for backend in ELEMENTARY_BACKENDS:
        report.update(backend.report(model))
    return report


def apply_backend(model: Any, kernels: str, liger_kernels: tuple[str, ...], device: str) -> dict[str, bool]:
    """Apply a backend of the table (e.g. 'eager', 'liger', 'compile', 'liger+compile'); the verified report.
    A hybrid's linear attention runs the reference path unless the backend takes it over (fla).
    On an adapter's wrapper (PEFT) it applies to the transformers model inside. BackendUnavailable, before anything
    is patched, when the model's family does not take the backend."""
    backend = kernel_backend(kernels)
    base = base_model_of(model)
    family = family_of_model_type(getattr(getattr(base, "config", None), "model_type", ""))
    if family is not None and (refusal := family_kernel_refusal(family, kernels)):
        raise BackendUnavailable(refusal)
    if backend.replaces and LINEAR_ATTENTION not in backend.replaces:
        # A hybrid's linear attention stays the baseline's (the PyTorch reference, packed rows sequence by sequence)
        # unless a part takes it over: not whatever transformers bound at import (fla where installed, or a fallback
        # that mixes or refuses packed rows), so a row's speed is its own parts'. Other models: nothing to do.
        apply_reference(base, liger_kernels, device)
    backend.apply(base, liger_kernels, device)
    report = patch_report(model)
    missing = sorted(k for k in backend.requested(liger_kernels) if not report.get(k))
    if missing:
        raise BackendUnavailable(f"patch did not replace: {', '.join(missing)} (verified on the model)")
    return report
