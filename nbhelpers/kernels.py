"""Kernel backends (eager, Liger, torch.compile) and a patch report verified on the model instance.

Liger's patch rebinds module-level names for the whole process and cannot be undone: run each
backend in its own subprocess (the runner does), never in a notebook's kernel.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

# Kernels that Triton's interpreter runs on a CPU (measured: RMSNorm and SwiGLU fail inside it).
CPU_INTERPRETABLE_LIGER_KERNELS = ("rope", "cross_entropy", "fused_linear_cross_entropy")


class BackendUnavailable(RuntimeError):
    """The requested kernel backend cannot run here (no Triton driver, unsupported model type, ...)."""


def liger_apply_function(model_type: str) -> Any:
    """Liger's patch function for a model type, or a clear error naming the supported types."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError as error:
        raise BackendUnavailable(f"missing package: liger-kernel is not importable ({error})") from error
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        supported = ", ".join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))
        raise BackendUnavailable(f"Liger has no patch for model_type={model_type!r}; supported: {supported}")
    return MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]


def check_triton_driver(device: str) -> None:
    """Liger's kernels are Triton: a GPU, or on a CPU the Triton interpreter (TRITON_INTERPRET=1)."""
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailable(
            "no Triton driver on CPU: Liger needs a GPU, or TRITON_INTERPRET=1 for the kernels the "
            f"interpreter runs ({', '.join(CPU_INTERPRETABLE_LIGER_KERNELS)})"
        )


def apply_liger(model: Any, switches: tuple[str, ...], device: str) -> None:
    """Patch a model instance with the chosen Liger kernels (switch names as in RunConfig)."""
    check_triton_driver(device)
    apply = liger_apply_function(model.config.model_type)
    accepted = set(inspect.signature(apply).parameters)
    options = {
        name: name in switches
        for name in ("rope", "rms_norm", "swiglu", "cross_entropy", "fused_linear_cross_entropy")
        if name in accepted
    }
    apply(model=model, **options)


def patch_report(model: Any) -> dict[str, bool]:
    """Which kernels are really replaced, read off the model instance and its modeling module."""
    report: dict[str, bool] = {}
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
        from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
    except ImportError:
        return {
            "rope": False,
            "rms_norm": False,
            "swiglu": False,
            "cross_entropy": False,
            "fused_linear_cross_entropy": False,
            "compile": _is_compiled(model),
        }
    base = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    layer = base.layers[0]
    modeling = sys.modules[type(model).__module__]

    def bound_to(method: Any, function: Any) -> bool:
        return getattr(method, "__func__", None) is function

    report["rope"] = getattr(modeling, "apply_rotary_pos_emb", None) is liger_rotary_pos_emb
    report["rms_norm"] = bound_to(base.norm.forward, LigerRMSNorm.forward) and bound_to(
        layer.input_layernorm.forward, LigerRMSNorm.forward
    )
    report["swiglu"] = bound_to(layer.mlp.forward, LigerSwiGLUMLP.forward) or isinstance(
        layer.mlp, LigerSwiGLUMLP
    )
    forward = getattr(model.forward, "__func__", None)
    report["fused_linear_cross_entropy"] = forward is not None and forward.__module__.startswith(
        "liger_kernel"
    )
    from transformers.loss.loss_utils import nn as loss_nn

    report["cross_entropy"] = loss_nn.functional.cross_entropy.__module__.startswith("liger_kernel")
    report["compile"] = _is_compiled(model)
    return report


def _is_compiled(model: Any) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None


def apply_backend(model: Any, kernels: str, liger_kernels: tuple[str, ...], device: str) -> dict[str, bool]:
    """Apply a backend ('eager', 'liger', 'compile', 'liger+compile') and return the verified report."""
    if "liger" in kernels:
        apply_liger(model, liger_kernels, device)
    if "compile" in kernels:
        model.compile()
    report = patch_report(model)
    wanted = set(liger_kernels) if "liger" in kernels else set()
    missing = sorted(k for k in wanted if not report.get(k))
    if missing:
        raise BackendUnavailable(f"Liger patch did not replace: {', '.join(missing)} (verified on the model)")
    return report
