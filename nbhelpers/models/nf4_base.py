"""A frozen base in NF4 (QLoRA): each frozen linear's weight as bitsandbytes' 4-bit NormalFloat, quantized once.

Every ``nn.Linear`` of a built model but the lm head (bitsandbytes' own loader leaves the output layer out too)
becomes ``bitsandbytes.nn.Linear4bit`` holding its weight as ``Params4bit`` (NF4, blocks of 64 weights, each
block's absmax quantized again to 8 bits in groups of 256: QLoRA's double quantization); then PEFT's
``prepare_model_for_kbit_training`` runs as PEFT's QLoRA guide has it (every other parameter upcast to fp32, all
frozen), without its gradient checkpointing (the step sets checkpointing itself). The matmuls compute in bf16 on a
GPU (QLoRA's ``bnb_4bit_compute_dtype``) and in the model's own dtype on a CPU (fp32 there).

Light at import: torch, bitsandbytes and PEFT load inside the functions.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from typing import Any

from .staged import linear_slots, module_to

BITSANDBYTES = ("bitsandbytes", "bitsandbytes")  # (import name, pip name)
BLOCK = 64  # weights per absmax block
ABSMAX_GROUP = 256  # blocks per fp32 scale of the second (double) quantization
# The 16 NF4 levels (QLoRA, Dettmers et al. 2023: quantiles of N(0, 1) normalised to [-1, 1]), as bitsandbytes'
# ``get_4bit_type("nf4")`` holds them (tests/models/test_frozen_base.py compares the two).
NF4_LEVELS = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)  # fmt: skip
# Round to nearest: a weight w of a block with absmax a lands at most half the widest gap between two levels away,
# in units of a (the widest gap is -1 to -0.696: 0.152 a).
NF4_HALF_GAP = max(b - a for a, b in zip(NF4_LEVELS, NF4_LEVELS[1:])) / 2
NO_4BIT_DEVICE = "bitsandbytes' 4-bit matmul needs a CUDA GPU, or a bitsandbytes whose CPU backend runs it"


def nf4_stored_bytes(out_features: int, in_features: int) -> int:
    """Bytes one NF4 weight of ``out_features x in_features`` keeps: two weights a byte, one 8-bit absmax per block of
    64, one fp32 scale per 256 blocks, the 8-bit code's 256 fp32 values, its fp32 offset and the 16 fp32 levels."""
    weights = out_features * in_features
    blocks = math.ceil(weights / BLOCK)
    return math.ceil(weights / 2) + blocks + 4 * math.ceil(blocks / ABSMAX_GROUP) + 4 * 256 + 4 + 4 * 16


@functools.lru_cache(maxsize=4)
def _runs_4bit(device: str) -> str:
    """'' when bitsandbytes quantizes and multiplies a small NF4 weight on ``device``, else what it raised."""
    import torch

    try:
        import bitsandbytes as bnb

        generator = torch.Generator().manual_seed(0)  # its own: a probe leaves the seeded global RNG untouched
        weight = torch.randn(32, 64, generator=generator).to(device)
        packed, state = bnb.functional.quantize_4bit(weight, blocksize=BLOCK, quant_type="nf4")
        x = torch.randn(2, 64, generator=generator).to(device).requires_grad_(True)
        bnb.matmul_4bit(x, packed.t(), quant_state=state)
    except Exception as error:  # noqa: BLE001 - any failure of the package's own path is the reason it cannot run
        return f"{type(error).__name__}: {error}"[:300]
    return ""


def nf4_status(device: str) -> str:
    """'' when an NF4 base can be made and run on ``device`` ("cpu" or "cuda"), else why not."""
    if importlib.util.find_spec(BITSANDBYTES[0]) is None:
        return f"missing package: {BITSANDBYTES[1]} is not installed (pip install 'nbhelpers[qlora]')"
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return f"{NO_4BIT_DEVICE}; torch sees no CUDA GPU"
    failed = _runs_4bit(device)
    return f"{NO_4BIT_DEVICE}; on this {device.upper()} it raised {failed}" if failed else ""


def nf4_compute_dtype(model: Any, device: str) -> Any:
    """bf16 on a GPU (QLoRA's compute dtype), else the dtype the model was built in (fp32 on a CPU)."""
    import torch

    return torch.bfloat16 if device == "cuda" else next(model.parameters()).dtype


def nf4_linear(linear: Any, compute_dtype: Any) -> Any:
    """A ``Linear4bit`` holding ``linear``'s weight in NF4 (double-quantized absmax), on the weight's device."""
    import bitsandbytes as bnb
    import torch

    weight = linear.weight
    layer = bnb.nn.Linear4bit(
        linear.in_features, linear.out_features, bias=linear.bias is not None, compute_dtype=compute_dtype,
        compress_statistics=True, quant_type="nf4", quant_storage=torch.uint8, device="meta",
    )  # fmt: skip
    layer.weight = bnb.nn.Params4bit(weight.data, requires_grad=False, blocksize=BLOCK, compress_statistics=True,
                                     quant_type="nf4", quant_storage=torch.uint8, module=layer)  # fmt: skip
    if linear.bias is not None:
        layer.bias = torch.nn.Parameter(linear.bias.data, requires_grad=False)
    return layer.to(weight.device)  # Params4bit quantizes when it is moved (its first .to)


def quantize_nf4(model: Any, device: str) -> int:
    """Swap every plain ``nn.Linear`` of the model but its lm head for an NF4 ``Linear4bit``, one at a time (the
    original weight is freed as each is replaced); returns how many. Marks the model as transformers marks a
    4-bit load (``is_loaded_in_4bit``), so PEFT wraps the layers with its bitsandbytes LoRA layers."""
    compute_dtype = nf4_compute_dtype(model, device)
    slots = linear_slots(model)
    for parent, name in slots:  # each quantized on the device (a staged build), its original freed as it goes
        setattr(parent, name, nf4_linear(module_to(model, getattr(parent, name), device), compute_dtype))
    model.is_loaded_in_4bit = True
    return len(slots)


def apply_nf4(model: Any, device: str) -> Any:
    """QLoRA's frozen base on a built model: its linears in NF4 (:func:`quantize_nf4`), then PEFT's k-bit
    preparation (the other parameters in fp32, everything frozen; no gradient checkpointing from it). On a GPU the
    allocator's peak is reset once the base is quantized: the bf16 model it was made from is not the step's."""
    from peft import prepare_model_for_kbit_training

    quantize_nf4(model, device)
    return _peak_reset(prepare_model_for_kbit_training(model, use_gradient_checkpointing=False), device)


def apply_nf4_bf16_rest(model: Any, device: str) -> Any:
    """An NF4 base without PEFT's k-bit upcast: its linears in NF4 (:func:`quantize_nf4`), every other parameter
    (embeddings, head, norms) frozen in the dtype it was built in (bf16 on a GPU), as Unsloth keeps a 4-bit base.
    On a GPU the allocator's peak is reset once the base is quantized."""
    quantize_nf4(model, device)
    return _peak_reset(model.requires_grad_(False), device)


def _peak_reset(model: Any, device: str) -> Any:
    """``model``, the GPU allocator's cache emptied and its peak reset: the bf16 model the base was made from is not
    the step's."""
    import torch

    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return model


def is_nf4_weight(tensor: Any) -> bool:
    """Whether a parameter is a quantized ``Params4bit`` (its ``numel`` counts packed bytes, not weights)."""
    return getattr(tensor, "quant_state", None) is not None and type(tensor).__name__ == "Params4bit"


def nf4_weight_count(tensor: Any) -> int:
    """The weights a quantized ``Params4bit`` stands for (its original shape's size)."""
    return math.prod(tensor.quant_state.shape)
