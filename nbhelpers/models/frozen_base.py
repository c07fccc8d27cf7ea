"""The table of frozen-base formats: how an adapter's frozen base stores and multiplies its linear weights.

"bf16" is the base as built (bf16 on a GPU, the step's fp32 on a CPU). "nf4" is QLoRA's: bitsandbytes' 4-bit
NormalFloat weights and PEFT's k-bit preparation (:mod:`nbhelpers.models.nf4_base`); "nf4_bf16" the same weights
with the rest of the base left as built, not upcast to fp32 (as Unsloth keeps a 4-bit base). "float8" stores each weight
once in e4m3 with a row scale and runs float8 GEMMs (:mod:`nbhelpers.models.float8_base`). Each entry says the
bytes a quantized linear keeps, which linears it quantizes, what the rest of the base is kept in, what it needs
and why it cannot run somewhere, how it is applied to a built model (before the adapter wraps it) and the parity
tolerance against the bf16 base, with the rounding it comes from. The memory planner reads the bytes
(:func:`frozen_base_bytes`), the adapter's wrap applies the entry, the doctor checks the packages and devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbhelpers.validation import ConfigError

from .float8_base import E4M3_RELATIVE, apply_float8, float8_quantizes, float8_status, float8_stored_bytes
from .linears import OUTPUT_LAYER, LinearModule, linear_modules
from .nf4_base import (
    BITSANDBYTES,
    NF4_HALF_GAP,
    apply_nf4,
    apply_nf4_bf16_rest,
    is_nf4_weight,
    nf4_status,
    nf4_stored_bytes,
    nf4_weight_count,
)
from .shape import ModelShape
from .staged import STAGED_DEVICE, is_undrawn, rest_to

BF16_BASE = "bf16"
NF4_BASE = "nf4"
NF4_BF16_REST_BASE = "nf4_bf16"
FLOAT8_BASE = "float8"
FROZEN_BYTES = {"fp32": 4, "bf16": 2}  # bytes a stored weight takes in the weights' dtype
BF16_ROUNDING = 2.0**-8  # half a unit in the last place of bf16's 8 significant bits


class FrozenBaseUnavailable(RuntimeError):
    """A frozen-base format cannot run here: its message says why (a missing package, no such GPU)."""


@dataclass(frozen=True)
class FrozenBase:
    """One format of the frozen base: its bytes, what it quantizes, what it needs, how it is applied, its parity."""

    name: str
    description: str
    stored_bytes: Callable[[int, int], int] | None  # (out, in) -> bytes of one quantized weight; None: as built
    quantizes: Callable[[int, int], bool]  # (out, in) -> whether a linear of these dimensions is quantized
    rest_fp32: bool  # the parameters it does not quantize are upcast to fp32 (PEFT's k-bit preparation)
    working_bytes: int  # bytes per weight of the one layer's copy a matmul makes (dequantized, or transposed)
    packages: tuple[str, ...]  # pip names it needs
    needs: str  # what it needs, in words
    status: Callable[[str], str]  # device type -> '' or why it cannot run there
    apply: Callable[[Any, str], Any]  # (built model, device type) -> the model with its base in this format
    parity_rtol: float  # first-step loss and gradient norm against the bf16 base, relative
    parity_basis: str  # where that number comes from
    # The decoder layers' saved activations against what the planner counts for the bf16 base (its fp32 residual
    # stream included, where ``rest_fp32``), set against measured peaks; 1.0: counted as they are.
    activation_factor: float = 1.0

    @property
    def quantized(self) -> bool:
        return self.stored_bytes is not None

    def bytes_per_parameter(self, out_features: int, in_features: int) -> float:
        """Bytes per weight of one quantized linear of these dimensions (scales and state included)."""
        if self.stored_bytes is None:
            raise ValueError(f"frozen_base={self.name!r} stores its weights as built (FROZEN_BYTES by dtype)")
        return self.stored_bytes(out_features, in_features) / (out_features * in_features)


def _as_built(model: Any, device: str) -> Any:
    return model


def _ready(device: str) -> str:
    return ""


# A first step at random initialisation: the loss and gradient norm are sums over many tokens of products of rounded
# weights, so they move by far less than one weight's worst case; the bounds below are one operand's worst case.
NF4_PARITY = 2 * NF4_HALF_GAP
FLOAT8_PARITY = 2 * E4M3_RELATIVE
NF4_QLORA = FrozenBase(
    name=NF4_BASE, description="QLoRA: bitsandbytes NF4 weights (blocks of 64, double-quantized absmax), "
        "PEFT's k-bit preparation, bf16 compute on a GPU",
    stored_bytes=nf4_stored_bytes, quantizes=lambda out, inp: True, rest_fp32=True, working_bytes=2,
    packages=(BITSANDBYTES[1],), needs="bitsandbytes; a CUDA GPU, or bitsandbytes' CPU backend",
    status=nf4_status, apply=apply_nf4, parity_rtol=NF4_PARITY,
    parity_basis=f"NF4 rounds each weight to one of 16 levels of its block of 64 scaled by the block's "
        f"absmax: at most {NF4_HALF_GAP:.3f} of the absmax away (half the widest gap, -1 to -0.696); the bound "
        f"is twice that ({NF4_PARITY:.3f}): the worst case of a weight of the block's size, with room for the "
        f"activations' bf16 rounding ({BF16_ROUNDING:.4f}) on a GPU",
    # bitsandbytes casts each NF4 linear's output back to its input's dtype, fp32 after the fp32 norms, so
    # more of a layer's saved tensors are fp32 than the residual stream alone: an H100 (2026-12-06) measured
    # 58.4 GiB for the eager 8B probe planned at 54.8 without this factor (62.4 with it), and capped Liger
    # rows ran out of memory at least 19% above their planned activations.
    activation_factor=1.2,
)  # fmt: skip
FROZEN_BASES: dict[str, FrozenBase] = {
    base.name: base
    for base in (
        FrozenBase(
            name=BF16_BASE, description="the base as built: bf16 on a GPU (fp32 in a CPU's fp32 step)",
            stored_bytes=None, quantizes=lambda out, inp: False, rest_fp32=False, working_bytes=0, packages=(),
            needs="nothing", status=_ready, apply=_as_built, parity_rtol=0.0,
            parity_basis="the reference the quantized bases are compared with",
        ),
        NF4_QLORA,
        dataclasses.replace(
            NF4_QLORA, name=NF4_BF16_REST_BASE, description="NF4 weights as QLoRA's, the rest of the base "
            "(embeddings, head, norms) left as built, bf16 on a GPU: no k-bit upcast, the residual stream stays bf16",
            rest_fp32=False, apply=apply_nf4_bf16_rest, activation_factor=1.0,
            parity_basis=f"the NF4 weights' rounding, as for nf4 ({NF4_PARITY:.3f}); the rest is the bf16 base's own",
        ),
        FrozenBase(
            name=FLOAT8_BASE, description="float8 e4m3 weights with a row scale, made once; float8 GEMMs for the "
            "forward and the input gradient (torch._scaled_mm), no weight gradient",
            stored_bytes=float8_stored_bytes, quantizes=float8_quantizes, rest_fp32=False, working_bytes=1,
            packages=(), needs="an NVIDIA GPU of compute capability 8.9+ and torch built for CUDA 12+",
            status=float8_status, apply=apply_float8, parity_rtol=FLOAT8_PARITY,
            parity_basis=f"e4m3 has 3 mantissa bits: each weight, and each activation or output gradient it "
            f"multiplies, is rounded to within {E4M3_RELATIVE:g} of itself (2^-4); a product of two rounded operands "
            f"to within about twice that, {FLOAT8_PARITY:g}, the bound",
        ),
    )
}  # fmt: skip
FROZEN_BASE_NAMES = tuple(FROZEN_BASES)


def check_frozen_base(name: Any, adapter_active: bool) -> None:
    """ConfigError naming ``frozen_base`` for a name the table lacks, or a quantized base without an adapter."""
    if not isinstance(name, str) or name not in FROZEN_BASES:
        raise ConfigError("frozen_base", name, f"one of {', '.join(FROZEN_BASE_NAMES)}")
    if name != BF16_BASE and not adapter_active:
        raise ConfigError("frozen_base", name, f"{BF16_BASE!r} without an adapter (a quantized base does not train: "
                          "set adapter='lora')")  # fmt: skip


def frozen_base_refusal(name: str, device: str) -> str:
    """'' when the format runs on ``device`` ("cpu" or "cuda"), else ``frozen_base=...: why`` (a step checks it
    before loading data or weights, so its failed record says why at once)."""
    why = FROZEN_BASES[name].status(device)
    return f"frozen_base={name!r}: {why}" if why else ""


def apply_frozen_base(model: Any, name: str, device: str | None = None) -> Any:
    """The built model with its frozen base in the format ``name`` on ``device`` (default: the device a host build
    was made for, else where its parameters are), refused with :class:`FrozenBaseUnavailable` and the reason where
    the format cannot run. A model on another device than ``device`` (a model loaded on the CPU for a GPU that holds
    only its quantized form) has each linear quantized onto ``device``, then the rest moved there."""
    base = FROZEN_BASES[name]
    if not base.quantized:
        return model
    here = next(model.parameters()).device.type
    target = device or getattr(model, STAGED_DEVICE, None) or here
    if why := frozen_base_refusal(name, target):
        raise FrozenBaseUnavailable(why)
    undrawn = is_undrawn(model)  # a host build whose weights are drawn on the device, module by module
    model = base.apply(model, target)
    return rest_to(model, target) if target != here or undrawn else model


def quantized_linears(shape: ModelShape, name: str) -> list[LinearModule]:
    """The linear modules of a shape the format quantizes: every one but the lm head that its rule takes."""
    base = FROZEN_BASES[name]
    chosen = [m for m in linear_modules(shape) if m.path != OUTPUT_LAYER]
    return [m for m in chosen if base.quantizes(m.out_features, m.in_features)]


def frozen_base_bytes(shape: ModelShape, name: str, weights: str) -> int:
    """Bytes of a frozen base of ``shape``: the quantized linears as the format stores them, every other parameter
    in fp32 (where the format upcasts the rest) or the weights' dtype (``weights``: "bf16" or "fp32"). The build
    itself holds the base as built first (``adapters.training_state_bytes`` is what a build is refused by)."""
    base = FROZEN_BASES[name]
    if base.stored_bytes is None:
        return shape.total_parameters * FROZEN_BYTES[weights]
    chosen = quantized_linears(shape, name)
    stored = sum(base.stored_bytes(m.out_features, m.in_features) * m.count for m in chosen)
    rest = shape.total_parameters - sum(m.weights for m in chosen)
    return stored + rest * (4 if base.rest_fp32 else FROZEN_BYTES[weights])


def working_copy_bytes(shape: ModelShape, name: str) -> int:
    """The largest copy one quantized linear's matmul makes of its weight (nf4: the bf16 dequantized weight; float8:
    the transposed weight of the input gradient's GEMM); 0 for the base as built."""
    chosen = quantized_linears(shape, name)
    widest = max((m.out_features * m.in_features for m in chosen), default=0)
    return widest * FROZEN_BASES[name].working_bytes


def stored_weight_count(tensor: Any) -> int:
    """The weights a parameter holds: its ``numel``, or for a packed 4-bit ``Params4bit`` the weights it stands for."""
    return nf4_weight_count(tensor) if is_nf4_weight(tensor) else int(tensor.numel())


def frozen_base_tolerance(name: str) -> tuple[float, str] | None:
    """The parity tolerance (relative, basis) of a quantized base against the bf16 base; None for the bf16 base or
    a name the table lacks (an older record's)."""
    base = FROZEN_BASES.get(name)
    return (base.parity_rtol, base.parity_basis) if base is not None and base.quantized else None


def _tensor_bytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size()) if tensor is not None else 0


def _quant_state_bytes(state: Any) -> int:
    """Bytes of a bitsandbytes ``QuantState``: absmax, code, offset and the nested state of a double quantization."""
    nested = state.state2 if getattr(state, "nested", False) else None
    own = _tensor_bytes(state.absmax) + _tensor_bytes(state.code) + _tensor_bytes(getattr(state, "offset", None))
    return own + (_quant_state_bytes(nested) if nested is not None else 0)


def frozen_stored_bytes(model: Any) -> int:
    """Bytes the model's frozen parameters hold as stored (shared tensors once): packed 4-bit weights with their
    quantization state, float8 weights with their row scales (``weight_scale``), the rest in their dtype. What a
    record keeps as ``frozen_base_bytes``; :func:`frozen_base_bytes` predicts it from a shape."""
    seen: set[int] = set()
    total = 0
    for parameter in model.parameters():
        if parameter.requires_grad or id(parameter) in seen:
            continue
        seen.add(id(parameter))
        total += _tensor_bytes(parameter)
        if is_nf4_weight(parameter):
            total += _quant_state_bytes(parameter.quant_state)
    return total + sum(_tensor_bytes(getattr(m, "weight_scale", None)) for m in model.modules())


PROBE_SHAPE = (128, 256)  # (out, in) of the probe's linear layer: whole NF4 blocks, float8's multiples of 16


def probe_error(name: str, device: str, seed: int = 0) -> float:
    """The doctor's check of a quantized format: one random linear layer's output in the format against the same
    layer in fp32, as the largest difference over the largest output (relative); the table's ``parity_rtol``
    bounds it (one weight's worst rounding, relative to its block or row)."""
    import torch

    from .float8_linear import Float8FrozenLinear
    from .nf4_base import nf4_compute_dtype, nf4_linear

    generator = torch.Generator().manual_seed(seed)
    out_features, in_features = PROBE_SHAPE
    linear = torch.nn.Linear(in_features, out_features, bias=False).to(device)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(PROBE_SHAPE, generator=generator).to(device))
    x = torch.randn(8, in_features, generator=generator).to(device)
    with torch.no_grad():
        want = linear(x)
    if name in (NF4_BASE, NF4_BF16_REST_BASE):  # the same NF4 linears; the rest of the base is not in the probe
        layer = nf4_linear(linear, nf4_compute_dtype(linear, device))
    elif name == FLOAT8_BASE:
        layer = Float8FrozenLinear(linear, emulate=device != "cuda")
    else:
        raise ValueError(f"frozen_base={name!r}: allowed are {NF4_BASE}, {NF4_BF16_REST_BASE}, {FLOAT8_BASE}")
    with torch.no_grad():
        got = layer(x.to(torch.bfloat16) if device == "cuda" else x).float()
    return float((got - want).abs().max() / want.abs().max())
