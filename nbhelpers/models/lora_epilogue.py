"""LoRA's scale and add inside the GEMM: each adapted linear's ``base(x) + B(A(x)) * scaling`` as one in-place
``addmm_`` into the base layer's output (cuBLAS adds into C in its epilogue), instead of PEFT's separate multiply
and add over the whole output, twice under activation recomputation, and the multiply again in the backward.

Profiled on the 27B hybrid with LoRA on an H100 (``benchmarks/gpu/hybrid/qwen3.8-27b-lora/profile/``): PEFT's scale
and add cost 546 ms of a 4.59 s step in 3,504 launches; Unsloth's step adds the LoRA product in the GEMM's epilogue.

Over a 4-bit base (QLoRA: PEFT's ``lora.bnb.Linear4bit`` around bitsandbytes' ``Linear4bit``) PEFT also clones the
base layer's output before the add ("defensively", for an output that is a view); the fused forward writes into
the base layer's own output, which its rows' flattening keeps from being a view, and falls back to PEFT's arithmetic
(a new tensor) where it is one, so the clone's full copy of each output goes too.

A layer falls back to PEFT's own forward for anything but plain LoRA with one active adapter: dropout, a variant
(DoRA), a LoRA bias, merged or disabled adapters, per-sample adapters, mixed dtypes without autocast, or a base
output the add cannot write into (not contiguous). The numbers are LoRA's: the product is accumulated in the GEMM's
fp32 and rounded once, where PEFT rounds the product, the scaled product and the sum each to the output's dtype.
"""

from __future__ import annotations

import types
from typing import Any

from .lora_function import FUNCTION_FORWARD, function_applies, lora_linear_function

FUSED_FORWARD = "_nbhelpers_fused_lora_epilogue"  # marks a layer whose forward this module replaced


def plain_lora(layer: Any, args: tuple, kwargs: dict) -> str | None:
    """The one active adapter of a plain LoRA call on ``layer``, or None where PEFT's own forward must run."""
    import torch

    if args or kwargs or layer.disable_adapters or layer.merged or len(layer.active_adapters) != 1:
        return None
    name = layer.active_adapters[0]
    if name not in layer.lora_A or name in layer.lora_variant or layer.lora_bias.get(name, False):
        return None
    if not isinstance(layer.lora_dropout[name], torch.nn.Identity):
        return None
    return name


def fused_forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """PEFT's LoRA forward (``lora.Linear``, ``lora.bnb.Linear4bit``) with the scaled product added by the GEMM into
    the base layer's output."""
    import torch

    name = plain_lora(self, args, kwargs)
    if name is None:
        return type(self).forward(self, x, *args, **kwargs)
    # Rows flattened before the base layer, so that its output is a tensor of its own: an in-place add into a view
    # of it would make autograd copy the whole output's gradient in the backward (CopySlices).
    rows = x.reshape(-1, x.shape[-1])
    result = self.base_layer(rows)
    lora_A, lora_B = self.lora_A[name], self.lora_B[name]
    hidden = lora_A(self._cast_input_dtype(rows, lora_A.weight.dtype))
    autocast = torch.is_autocast_enabled(result.device.type)
    if result._base is not None or (not autocast and not hidden.dtype == lora_B.weight.dtype == result.dtype):
        result = (result + lora_B(hidden) * self.scaling[name]).to(result.dtype)  # PEFT's arithmetic, its cast back
    else:  # under autocast the GEMM runs in the output's dtype, as lora_B's would: the small casts autocast makes
        result.addmm_(hidden.to(result.dtype), lora_B.weight.to(result.dtype).t(), alpha=self.scaling[name])
    return result.view(*x.shape[:-1], result.shape[-1])


def function_forward(self: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """PEFT's LoRA forward as one autograd function (:mod:`nbhelpers.models.lora_function`) where it computes the
    same; otherwise the fused forward (which falls back to PEFT's)."""
    name = plain_lora(self, args, kwargs)
    if name is None or not function_applies(self, name, x):
        return fused_forward(self, x, *args, **kwargs)
    rows = x.reshape(-1, x.shape[-1])
    lora_a, lora_b = self.lora_A[name].weight, self.lora_B[name].weight
    out = lora_linear_function().apply(rows, lora_a, lora_b, self.get_base_layer(), self.scaling[name])
    return out.view(*x.shape[:-1], out.shape[-1])


def fusable_layer_types() -> tuple[type, ...]:
    """PEFT's LoRA linears whose forward the fused one replaces: ``lora.Linear`` and, where bitsandbytes is installed,
    ``lora.bnb.Linear4bit`` (their other subclasses, 8-bit and torchao's, keep their own forwards)."""
    from peft.tuners.lora import Linear as LoraLinear

    try:
        from peft.tuners.lora import bnb
    except ImportError:  # a PEFT without its bitsandbytes module
        return (LoraLinear,)
    four_bit = getattr(bnb, "Linear4bit", None)  # defined only where bitsandbytes imports
    return (LoraLinear,) if four_bit is None else (LoraLinear, four_bit)


def fuse_lora_epilogues(model: Any, one_function: bool = False) -> int:
    """Give every PEFT LoRA linear of ``model`` (:func:`fusable_layer_types`) the fused forward, or with
    ``one_function`` the whole linear as one autograd function (per instance; the class is untouched); returns how
    many layers. Call it after ``get_peft_model`` (or after TRL's trainer wrapped the model)."""
    fusable = fusable_layer_types()
    layers = [m for m in model.modules() if type(m) in fusable]  # exact types: other subclasses have own forwards
    for layer in layers:
        layer.forward = types.MethodType(function_forward if one_function else fused_forward, layer)
        setattr(layer, FUSED_FORWARD, True)
        setattr(layer, FUNCTION_FORWARD, one_function)
    return len(layers)


def fused_layers(model: Any, one_function: bool = False) -> int:
    """How many layers of ``model`` run the fused forward, or with ``one_function`` the one autograd function (what
    a record reports)."""
    marker = FUNCTION_FORWARD if one_function else FUSED_FORWARD
    return sum(1 for m in model.modules() if getattr(m, marker, False))


__all__ = [
    "FUSED_FORWARD", "fusable_layer_types", "function_forward", "fuse_lora_epilogues", "fused_forward", "fused_layers",
    "plain_lora",
]  # fmt: skip
