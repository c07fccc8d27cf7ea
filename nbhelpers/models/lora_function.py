"""A LoRA linear as one autograd function: the frozen GEMM, both adapter GEMMs and LoRA's scaled add in one forward
and one backward, instead of PEFT's module calls and the autograd nodes of each op between them.

Profiled on the 27B hybrid with LoRA over a 4-bit base under a 24 GiB cap on an H100
(``benchmarks/gpu/hybrid/qwen3.8-27b-lora/memory-caps/epilogue-and-trl/``): at 3,241 real tokens a step, 29% of the
traced step was idle between 27,447 launches, the host's launches setting the pace; Unsloth's 4-bit step holds the
frozen GEMM and both adapter GEMMs of a projection in one autograd function and launches fewer kernels.

Forward (``out = base(x) + scale * (x A^T) B^T``): the base layer's own forward (bitsandbytes' 4-bit GEMM or
``F.linear``), ``h = x A^T``, then the product added by the GEMM into the output (``addmm_``). Backward: the frozen
weight's input gradient (the 4-bit weight dequantized again, as bitsandbytes' backward does), the adapter path's
input gradient added by its GEMM into it, and both adapter gradients: five GEMMs, two rank-wide scales, no pass over
the output but the GEMMs'. What it saves: the input rows and ``h`` (tokens x rank); the frozen weight is read again.

Used only where PEFT's forward would compute the same: plain LoRA with one active adapter (the rule of
:func:`nbhelpers.models.lora_epilogue.plain_lora`), a frozen base weight, and either bf16 autocast or one dtype for
the input, the adapters and the output. Anything else runs PEFT's forward.
"""

from __future__ import annotations

from typing import Any

FUNCTION_FORWARD = "_nbhelpers_lora_function"  # marks a layer whose forward is the one autograd function


def frozen_weight(base_layer: Any, dtype: Any) -> Any:
    """The base layer's weight as a dense ``(out, in)`` matrix of ``dtype``: a 4-bit weight (bitsandbytes'
    ``Params4bit``) dequantized, a dense one cast."""
    weight = base_layer.weight
    state = getattr(weight, "quant_state", None)
    if state is None:
        return weight.to(dtype)
    import bitsandbytes.functional as bnb_functional

    return bnb_functional.dequantize_4bit(weight.data.view(-1, 1), state).to(dtype)


def _lora_function() -> Any:
    import torch

    class LoraLinearFunction(torch.autograd.Function):
        """``base_layer(x) + scale * (x A^T) B^T`` for 2-D ``x`` (rows x in); gradients for ``x``, ``A`` and ``B``."""

        @staticmethod
        def forward(ctx: Any, x: Any, lora_a: Any, lora_b: Any, base_layer: Any, scale: float) -> Any:
            out = base_layer(x)  # no autograd here: bitsandbytes' inference GEMM or F.linear, autocast as ambient
            dtype = out.dtype
            a, b = lora_a.to(dtype), lora_b.to(dtype)
            hidden = torch.mm(x.to(dtype), a.t())
            out.addmm_(hidden, b.t(), alpha=scale)
            ctx.save_for_backward(x, hidden, a, b)
            ctx.base_layer, ctx.scale = base_layer, scale
            ctx.dtypes = (x.dtype, lora_a.dtype, lora_b.dtype)
            return out

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            x, hidden, a, b = ctx.saved_tensors
            x_dtype, a_dtype, b_dtype = ctx.dtypes
            grad = grad.to(a.dtype)
            grad_hidden = torch.mm(grad, b).mul_(ctx.scale)  # rows x rank: the scale applied where it is narrow
            grad_x = None
            if ctx.needs_input_grad[0]:
                grad_x = torch.mm(grad, frozen_weight(ctx.base_layer, grad.dtype))
                grad_x.addmm_(grad_hidden, a)  # the adapter path's input gradient, added by its GEMM
                grad_x = grad_x.to(x_dtype)
            grad_a = torch.mm(grad_hidden.t(), x.to(grad.dtype)).to(a_dtype)
            grad_b = torch.mm(grad.t(), hidden).mul_(ctx.scale).to(b_dtype)  # out x rank
            return grad_x, grad_a, grad_b, None, None

    return LoraLinearFunction


_FUNCTION: Any = None


def lora_linear_function() -> Any:
    """The autograd function (made once, on first use: torch is imported then)."""
    global _FUNCTION
    if _FUNCTION is None:
        _FUNCTION = _lora_function()
    return _FUNCTION


def function_applies(layer: Any, name: str, x: Any) -> bool:
    """Whether the one function computes what PEFT's forward of ``layer`` (adapter ``name``) would on ``x``: a frozen
    base without bias gradients, and bf16 autocast or one dtype for the input, the adapters and the base's output."""
    import torch

    base = layer.get_base_layer()
    if base.weight.requires_grad or (getattr(base, "bias", None) is not None and base.bias.requires_grad):
        return False
    lora_a, lora_b = layer.lora_A[name].weight, layer.lora_B[name].weight
    if torch.is_autocast_enabled(x.device.type):
        return True
    out_dtype = getattr(base, "compute_dtype", None) or base.weight.dtype
    return x.dtype == lora_a.dtype == lora_b.dtype == out_dtype


__all__ = ["FUNCTION_FORWARD", "frozen_weight", "function_applies", "lora_linear_function"]
