"""A frozen base in float8: each frozen linear's weight as e4m3 with a row scale, made once (no weight gradient).

Which layers: every plain ``nn.Linear`` but the lm head whose dimensions are multiples of 16 (float8 GEMMs need
them); the rest stay in the weights' dtype. Where it runs: float8 GEMMs (``torch._scaled_mm`` with rowwise scales)
need an NVIDIA GPU of compute capability 8.9 or newer and a torch built for CUDA 12; elsewhere it is refused with
the reason. A CPU runs the emulation (:mod:`nbhelpers.models.float8_linear`) for tests only.

The rounding it costs, per element (e4m3: 3 mantissa bits; each row scaled so its largest value is 448): a value of
a normal magnitude is rounded to within 2^-4 of itself (half a unit in the last of 4 significant bits), one below
the smallest normal (2^-6 in scaled units) to within 2^-10 of the row's scale (half the subnormal spacing 2^-9).
:func:`rounding_bound` is that bound; :func:`matmul_bound` what it allows a product of two rounded operands.

Light at import: torch loads inside the functions.
"""

from __future__ import annotations

from typing import Any

from .staged import linear_slots, module_to

MIN_CAPABILITY = (8, 9)  # float8 tensor cores: Ada (8.9), Hopper (9.0) and newer
MIN_CUDA = 12  # torch's rowwise-scaled float8 GEMM is built for CUDA 12 and newer
DIMENSION_MULTIPLE = 16
E4M3_RELATIVE = 2.0**-4  # half a unit in the last place of e4m3's 1 + 3 significant bits
E4M3_SUBNORMAL = 2.0**-10  # half of e4m3's subnormal spacing 2^-9, in units of the row's scale
E4M3_MAX = 448.0
FLOAT8_BYTES = 1  # one e4m3 value per weight
SCALE_BYTES = 4  # one fp32 scale per output row
NO_FLOAT8_GEMM = (
    f"float8 GEMMs (torch._scaled_mm, rowwise scales) need an NVIDIA GPU of compute capability "
    f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (Ada, Hopper: L4, H100, H200) and torch built for CUDA "
    f"{MIN_CUDA}+"
)


def float8_stored_bytes(out_features: int, in_features: int) -> int:
    """Bytes one float8 weight of ``out_features x in_features`` keeps: a byte a weight and an fp32 scale a row."""
    return FLOAT8_BYTES * out_features * in_features + SCALE_BYTES * out_features


def float8_quantizes(out_features: int, in_features: int) -> bool:
    """Whether a linear layer of these dimensions is made float8 (both multiples of 16)."""
    return out_features % DIMENSION_MULTIPLE == 0 and in_features % DIMENSION_MULTIPLE == 0


def float8_status(device: str) -> str:
    """'' when float8 GEMMs can run on ``device``, else why not."""
    if device != "cuda":
        return f"{NO_FLOAT8_GEMM}; this is a {device.upper()} (tests emulate it there)"
    import torch

    if not torch.cuda.is_available():
        return f"{NO_FLOAT8_GEMM}; torch sees no CUDA GPU"
    if not hasattr(torch, "_scaled_mm"):
        return f"{NO_FLOAT8_GEMM}; this torch {torch.__version__} has no torch._scaled_mm"
    cuda = torch.version.cuda or "0"
    if int(cuda.split(".")[0]) < MIN_CUDA:
        return f"{NO_FLOAT8_GEMM}; this torch is built for CUDA {cuda}"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < MIN_CAPABILITY:
        return f"{NO_FLOAT8_GEMM}; this GPU is {major}.{minor}"
    return ""


def convert_frozen_float8(model: Any, emulate: bool = False, device: str | None = None) -> int:
    """Swap every plain ``nn.Linear`` of the model but its lm head, both dimensions multiples of 16, for a
    :class:`~nbhelpers.models.float8_linear.Float8FrozenLinear` (one at a time: each original weight is freed as it
    is replaced), each moved to ``device`` first where given (a model built on the host); returns how many.
    ``emulate`` only for tests on a CPU."""
    from .float8_linear import Float8FrozenLinear

    swapped = 0
    for parent, name in linear_slots(model):  # the originals are not held: each is freed as it is replaced
        child = getattr(parent, name)
        if float8_quantizes(child.out_features, child.in_features):
            moved = module_to(model, child, device) if device else child  # drawn there, for an undrawn build
            setattr(parent, name, Float8FrozenLinear(moved, emulate=emulate))
            del moved
            swapped += 1
        del child
    return swapped


def apply_float8(model: Any, device: str) -> Any:
    """The float8 frozen base on a built model: its eligible linears' weights in e4m3, run by float8 GEMMs. On a GPU
    the allocator's peak is reset once the base is converted: the bf16 model it was made from is not the step's."""
    import torch

    convert_frozen_float8(model, device=device)
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return model


def rounding_bound(values: Any, scale: Any) -> Any:
    """The most e4m3 rounding moves each element of ``values`` whose row scale (value of 1 in e4m3) is ``scale``:
    ``2^-4 |v| + 2^-10 scale`` (the first term bounds a normal value's rounding, the second a subnormal one's)."""
    return E4M3_RELATIVE * values.abs() + E4M3_SUBNORMAL * scale


def matmul_bound(a: Any, a_error: Any, b: Any, b_error: Any) -> Any:
    """How far ``â @ b̂`` may be from ``a @ b`` in exact arithmetic when each element of ``â`` is within ``a_error``
    of ``a`` and of ``b̂`` within ``b_error`` of ``b``: ``e_a (|b| + e_b) + |a| e_b``, elementwise bounds summed by
    the product, plus fp32's accumulation (K terms, each rounded to 2^-24: K 2^-24 |â||b̂|)."""
    terms = a_error @ (b.abs() + b_error) + a.abs() @ b_error
    accumulation = a.shape[-1] * 2.0**-24 * ((a.abs() + a_error) @ (b.abs() + b_error))
    return terms + accumulation
