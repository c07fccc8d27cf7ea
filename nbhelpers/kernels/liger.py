"""The Liger backend: Triton kernels patched into a model instance, and the report that verifies them.

Liger's patch rebinds module-level names for the whole process and cannot be undone: run it in its own
subprocess (the runner does), never in a notebook's kernel. Light at import: liger_kernel and torch are
imported inside the functions.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from typing import Any

from nbhelpers.models.loading import modeling_module

from .spec import BackendUnavailable

LIGER_BACKEND = "liger"  # the backend's name in the table (nbhelpers.kernels.registry)
# Liger's switches, as RunConfig.liger_kernels names them (the keyword arguments of Liger's patch functions).
LIGER_KERNELS = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy", "cross_entropy")
# The default switch set: Liger's plain cross-entropy, not its fused linear cross-entropy, which this project
# measured slower on packed rows (benchmarks/gpu/NOTES.md: every chunk adds into the whole fp32 gradient of the
# output weight). The fused one stays selectable by name.
DEFAULT_LIGER_KERNELS = ("rope", "rms_norm", "swiglu", "cross_entropy")
# Kernels that Triton's interpreter runs on a CPU (measured: RMSNorm and SwiGLU fail inside it).
CPU_INTERPRETABLE_LIGER_KERNELS = ("rope", "cross_entropy", "fused_linear_cross_entropy")
# Without CUDA, Liger's Triton kernels run in Triton's interpreter.
LIGER_CPU_ENV = {"TRITON_INTERPRET": "1"}

# What liger_report checks for each switch, on the model instance and the names it calls at run time.
LIGER_CHECKS: dict[str, str] = {
    "rope": "the modeling module's apply_rotary_pos_emb (attention looks it up at call time) is Liger's "
    "liger_rotary_pos_emb",
    "rms_norm": "every *RMSNorm module of the model (final norm; each layer's input, post-attention, q and k "
    "norms) runs LigerRMSNorm.forward (or a family's Liger RMSNorm variant)",
    "swiglu": "every decoder layer's mlp runs LigerSwiGLUMLP.forward (or a family's Liger SwiGLU variant)",
    "fused_linear_cross_entropy": "model.forward is Liger's lce_forward (the lm head and the loss fused; "
    "no full logits tensor)",
    "cross_entropy": "torch.nn.functional.cross_entropy (what transformers' loss calls) is Liger's cross-entropy",
}


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


def liger_status(device: str) -> str:
    """'' when Liger's packages are importable here, else why it cannot run (the driver is checked when applied)."""
    for package, name in (("liger_kernel", "liger-kernel"), ("triton", "triton")):
        if importlib.util.find_spec(package) is None:
            return f"missing package: {name} is not installed"
    return ""


def probe_liger(device: str) -> list[Any]:
    """Liger's RMSNorm, SwiGLU, cross-entropy and fused linear cross-entropy against PyTorch, forward and backward,
    in bf16 on a CUDA GPU; not runnable without one (RMSNorm and SwiGLU fail in Triton's CPU interpreter)."""
    from .probes import (
        NO_CUDA,
        compare_kernels,
        cross_entropy_reference,
        not_runnable,
        rms_norm_reference,
        swiglu_reference,
    )

    if device != "cuda":
        return [not_runnable(LIGER_BACKEND, f"{NO_CUDA}: Liger's Triton kernels need one (RMSNorm and SwiGLU fail "
                             "in Triton's CPU interpreter)")]  # fmt: skip
    import torch
    from liger_kernel.transformers import functional as liger

    generator = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape: int, dtype: Any = torch.bfloat16) -> Any:
        return torch.randn(*shape, generator=generator).to(device, dtype)

    hidden, vocab, tokens = 256, 1024, 64
    x, weight, gate, up = rand(tokens, hidden), rand(hidden), rand(tokens, 512), rand(tokens, 512)
    logits, head = rand(tokens, vocab, dtype=torch.float32), rand(vocab, hidden)
    labels = torch.randint(0, vocab, (tokens,), generator=generator).to(device)
    labels[:8] = -100  # prompt tokens: ignored by the loss

    def flce_reference(h: Any, w: Any, y: Any) -> Any:
        return cross_entropy_reference(h @ w.t(), y)

    return [
        compare_kernels("rms_norm", lambda a, w: liger.liger_rms_norm(a, w, 1e-6, in_place=False),
                        rms_norm_reference, [x, weight], 2e-2, 2e-2),
        compare_kernels("swiglu", liger.liger_swiglu, swiglu_reference, [gate, up], 2e-2, 2e-2),
        compare_kernels("cross_entropy", liger.liger_cross_entropy, cross_entropy_reference, [logits, labels],
                        1e-4, 1e-5),
        compare_kernels("fused_linear_cross_entropy", liger.liger_fused_linear_cross_entropy, flce_reference,
                        [x, head, labels], 2e-2, 2e-2),
    ]  # fmt: skip


def check_triton_driver(device: str) -> None:
    """Liger's kernels are Triton: a GPU with Triton, or on a CPU the interpreter (TRITON_INTERPRET=1)."""
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailable("missing package: triton is not installed, and Liger's kernels are Triton")
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
    ignored = sorted(set(switches) - accepted)
    if ignored:
        raise BackendUnavailable(
            f"Liger's patch for model_type={model.config.model_type!r} has no switch for: {', '.join(ignored)}"
        )
    options = {name: name in switches for name in LIGER_KERNELS if name in accepted}
    apply(model=model, **options)


def _runs_liger_class(method: Any, base: type, module: str) -> bool:
    """The bound method is ``base.forward`` or the forward of another Liger class of ``module`` (a family's
    own variant, such as LigerRMSNormForQwen3Next or LigerQwen3MoeSwiGLUMLP for Qwen3.5)."""
    function = getattr(method, "__func__", None)
    if function is None:
        return False
    return function is base.forward or getattr(function, "__module__", "") == module


def _base_model(model: Any) -> Any:
    return getattr(model, getattr(model, "base_model_prefix", "model"), model)


def _rms_norm_modules(model: Any) -> list[Any]:
    """The model's plain RMSNorm modules: the family's own class, or the Liger class that replaced it (a model
    built after Liger swapped the class, e.g. LigerRMSNormForQwen3Next); gated norms are not Liger's."""
    names = (type(m).__name__ for m in model.modules())
    return [m for m, name in zip(model.modules(), names) if "RMSNorm" in name and "Gated" not in name]


def liger_report(model: Any) -> dict[str, bool]:
    """Which Liger kernels really run, read off the model instance and the names it calls (see LIGER_CHECKS).

    A kernel counts as replaced only when every place that runs it is replaced; without liger-kernel
    installed, none is.
    """
    report = dict.fromkeys(LIGER_KERNELS, False)
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
        from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
    except ImportError:
        return report
    modeling = modeling_module(model)
    report["rope"] = getattr(modeling, "apply_rotary_pos_emb", None) is liger_rotary_pos_emb
    norms = _rms_norm_modules(model)
    report["rms_norm"] = bool(norms) and all(
        _runs_liger_class(m.forward, LigerRMSNorm, LigerRMSNorm.__module__) for m in norms
    )
    mlps = [layer.mlp for layer in getattr(_base_model(model), "layers", []) if hasattr(layer, "mlp")]
    report["swiglu"] = bool(mlps) and all(
        _runs_liger_class(m.forward, LigerSwiGLUMLP, LigerSwiGLUMLP.__module__) for m in mlps
    )
    forward = getattr(model.forward, "__func__", None)
    report["fused_linear_cross_entropy"] = forward is not None and forward.__module__.startswith("liger_kernel")
    import torch

    loss = getattr(torch.nn.functional.cross_entropy, "__module__", "") or ""
    report["cross_entropy"] = loss.startswith("liger_kernel")
    return report


def requested_liger_kernels(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report keys Liger must see replaced: the switches that are on."""
    return tuple(switches)


def liger_kernel_config(switches: tuple[str, ...]) -> dict[str, Any]:
    """TrainingArguments' ``liger_kernel_config``: every Liger switch, on or off as measured."""
    on = set(switches)
    return {"liger_kernel_config": {name: name in on for name in LIGER_KERNELS}}
