"""The torch.compile backend: the model's call compiled by Inductor, and the report that verifies it."""

from __future__ import annotations

from typing import Any

COMPILE_BACKEND = "compile"  # the backend's name in the table (nbhelpers.kernels.registry)
COMPILE_CHECKS = {"compile": "model.compile() set the module's compiled call (model._compiled_call_impl)"}


def apply_compile(model: Any, switches: tuple[str, ...], device: str) -> None:
    """Compile the model's call in place (``nn.Module.compile``); it compiles on the first step."""
    model.compile()


def compile_report(model: Any) -> dict[str, bool]:
    """Whether model.compile() set the module's compiled call."""
    return {"compile": getattr(model, "_compiled_call_impl", None) is not None}


def requested_compile(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report key torch.compile must see replaced."""
    return tuple(COMPILE_CHECKS)


def probe_compile(device: str) -> list[Any]:
    """torch.compile of an RMSNorm against the same function run eagerly, forward and backward (fp32)."""
    import torch

    from .probes import compare_kernels, rms_norm_reference

    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(4, 64, generator=generator).to(device)
    weight = torch.randn(64, generator=generator).to(device)
    compiled = torch.compile(rms_norm_reference, dynamic=False)
    return [compare_kernels("torch.compile rms_norm", compiled, rms_norm_reference, [x, weight], 1e-4, 1e-5)]
