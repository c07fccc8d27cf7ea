"""The frozen float8 linear layer: its weight in float8 e4m3 with one fp32 scale per output row, made once.

Forward ``y = x W^T`` and input gradient ``dx = dy W`` are float8 GEMMs (``torch._scaled_mm``, rowwise scales, bf16
out) whose other operand, the activation or the output gradient, is cast to e4m3 per row (token) at each call: on a
GPU by one compiled function (:func:`fused_rowwise_e4m3`: the row maximum and the cast read the bf16 operand once),
where the eager ops made and read fp32 copies of it six times (``NBHELPERS_FLOAT8_CAST=eager`` keeps those).
For ``dx`` the weight's row scales fold into ``dy`` before its cast (``dy W = (dy * s) W_q``), so one float8 copy of
the weight serves both; the backward's GEMM reads it transposed, a copy of one layer's weight that lives for that
matmul alone (on a GPU one compiled kernel makes it, as it does the cast). The weight gets no gradient.
``emulate=True`` computes the same rounded operands' product in fp32 by dequantizing (a CPU, tests): the numbers a
GPU's GEMM makes, up to its accumulation order and bf16 output.

Why not torchao: its float8 training (``convert_to_float8_training``, the ``float8`` kernel backend) keeps each
weight in bf16 and casts it again every step, for a weight that trains; a frozen base needs the weight stored once
in e4m3 (half the bytes) with only the input gradient, which this layer does over ``torch._scaled_mm``.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch

from .float8_cast import CASTS, cast_mode

CASTS_FUSED = CASTS[0]  # the compiled cast
E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0  # the largest finite e4m3 value: each row's absolute maximum is scaled to it
SCALE_FLOOR = 1e-12  # an all-zero row keeps a positive scale


def _rowwise_e4m3(tensor: torch.Tensor, column_scale: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    values = tensor.float()
    if column_scale is not None:
        values = values * column_scale
    scale = values.abs().amax(dim=-1, keepdim=True).clamp(min=SCALE_FLOOR) / E4M3_MAX
    return (values / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


@functools.cache
def fused_rowwise_e4m3() -> Any:
    """:func:`_rowwise_e4m3` compiled (dynamic shapes: a step's token count changes): the fp32 copy, the scaling,
    the row maximum and the cast in two kernels that read the activation once, where eager runs six over fp32
    copies of it, for every float8 GEMM's activation and output gradient."""
    return torch.compile(_rowwise_e4m3, dynamic=True)


@functools.cache
def _fused_on_gpu() -> bool:
    """This process's cast on a GPU, read once (:func:`cast_mode`): not once per GEMM on the step's hot path."""
    return cast_mode() == CASTS_FUSED


def _compiled(tensor: torch.Tensor, fused: bool | None) -> bool:
    """Whether ``tensor``'s cast or copy runs compiled: ``fused`` where given, else on a GPU unless the process's
    cast is "eager"."""
    return (tensor.is_cuda and _fused_on_gpu()) if fused is None else fused


def rowwise_e4m3(tensor: torch.Tensor, column_scale: torch.Tensor | None = None,
                 fused: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``tensor`` (..., K), times ``column_scale`` (K,) where given, as e4m3 values and one fp32 scale per row (shape
    (..., 1)): ``q * scale`` ~ ``tensor * column_scale``. ``fused`` (default: on a GPU, unless :func:`cast_mode` says
    "eager") runs the compiled cast."""
    return (fused_rowwise_e4m3() if _compiled(tensor, fused) else _rowwise_e4m3)(tensor, column_scale)


def _column_major(weight: torch.Tensor) -> torch.Tensor:
    return weight.t().contiguous().t()


@functools.cache
def fused_column_major() -> Any:
    """:func:`_column_major` compiled: the e4m3 weight's transposed copy for the backward's GEMM as one tiled kernel
    (on an H100 Qwen3-8B's float8 base added 47 ms and 498 launches a step of elementwise kernels: by their count two
    per backward GEMM, this copy and its unit scales)."""
    return torch.compile(_column_major, dynamic=True)


def column_major(weight: torch.Tensor, fused: bool | None = None) -> torch.Tensor:
    """``weight`` (N, K) copied so that it is read down its columns (``torch._scaled_mm``'s second operand), by the
    compiled copy where the cast is fused (:func:`rowwise_e4m3`'s rule)."""
    return (fused_column_major() if _compiled(weight, fused) else _column_major)(weight)


@functools.lru_cache(maxsize=64)
def unit_scales(columns: int, device: torch.device) -> torch.Tensor:
    """A (1, ``columns``) fp32 row of ones on ``device``, made once (the backward GEMM's second scale)."""
    return torch.ones(1, columns, device=device, dtype=torch.float32)


def scaled_matmul(a: torch.Tensor, a_scale: torch.Tensor, b: torch.Tensor, b_scale: torch.Tensor,
                  emulate: bool) -> torch.Tensor:  # fmt: skip
    """``(a * a_scale) @ (b * b_scale)`` of e4m3 ``a`` (M, K, row-major) and ``b`` (K, N, column-major), scales (M, 1)
    and (1, N): ``torch._scaled_mm`` with bf16 out, or in fp32 from the dequantized operands (``emulate``)."""
    if emulate:
        with torch.autocast(a.device.type, enabled=False):
            return (a.float() * a_scale) @ (b.float() * b_scale)
    return torch._scaled_mm(a, b, scale_a=a_scale, scale_b=b_scale, out_dtype=torch.bfloat16)


class _LastActivationCast:
    """The last activation cast in the forward, kept for the next GEMM that reads the same tensor unchanged (a
    layer's q, k and v projections read one input, its gate and up projections another): one cast, not three. It
    holds the activation weakly, and its e4m3 copy only while the activation lives."""

    def __init__(self) -> None:
        self.clear()

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.compiler.is_compiling() or x.is_inference():  # a compiled graph keeps no Python state between
            return rowwise_e4m3(x.reshape(-1, x.shape[-1]))  # calls; an inference tensor has no version to check
        if self.cast is None or self.source() is not x or self.version != x._version:
            self.clear()
            self.cast = rowwise_e4m3(x.reshape(-1, x.shape[-1]))
            self.source, self.version = weakref.ref(x, self._freed), x._version
        return self.cast

    def _freed(self, source: Any) -> None:
        if source is self.source:  # a later activation's reference is left alone
            self.clear()

    def clear(self) -> None:
        self.source: Any = lambda: None
        self.version = -1
        self.cast: tuple[torch.Tensor, torch.Tensor] | None = None


activation_e4m3 = _LastActivationCast()  # holds one activation and its e4m3 copy until the next cast


def frozen_forward(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
    """``x W^T`` for an e4m3 weight (N, K) with row scales (N,): x cast per row to e4m3 (once for the GEMMs that
    read the same ``x`` one after another), one float8 GEMM."""
    x_q, x_scale = activation_e4m3(x)
    y = scaled_matmul(x_q, x_scale, weight.t(), scale.view(1, -1), emulate)
    return y.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])


def frozen_input_grad(dy: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
    """``dy W`` for the weight of :func:`frozen_forward`: ``(dy * s) W_q``, dy's product cast per row to e4m3."""
    g_q, g_scale = rowwise_e4m3(dy.reshape(-1, dy.shape[-1]), scale.view(1, -1))
    dx = scaled_matmul(g_q, g_scale, column_major(weight), unit_scales(weight.shape[1], weight.device), emulate)
    return dx.to(dy.dtype).reshape(*dy.shape[:-1], weight.shape[1])


class FrozenFloat8Matmul(torch.autograd.Function):
    """``x W^T`` with a frozen e4m3 weight: a gradient for ``x`` only; saves the weight and its scales, no input."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
        ctx.save_for_backward(weight, scale)
        ctx.emulate = emulate
        return frozen_forward(x, weight, scale, emulate)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        weight, scale = ctx.saved_tensors
        dx = frozen_input_grad(dy, weight, scale, ctx.emulate) if ctx.needs_input_grad[0] else None
        return dx, None, None, None


@torch.library.custom_op("nbhelpers::frozen_float8_matmul", mutates_args=())
def frozen_float8_matmul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
    """:class:`FrozenFloat8Matmul` as one operator that a compiled graph calls without tracing into it: dynamo failed
    to trace the function in a compiled decoder layer that is not recomputed. Eager steps keep the function."""
    return frozen_forward(x, weight, scale, emulate)


@torch.library.custom_op("nbhelpers::frozen_float8_input_grad", mutates_args=())
def frozen_float8_input_grad(dy: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                             emulate: bool) -> torch.Tensor:  # fmt: skip
    """:func:`frozen_input_grad` as one operator, the backward of :func:`frozen_float8_matmul`."""
    return frozen_input_grad(dy, weight, scale, emulate)


@frozen_float8_matmul.register_fake
def _matmul_shape(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
    return x.new_empty(*x.shape[:-1], weight.shape[0])


@frozen_float8_input_grad.register_fake
def _input_grad_shape(dy: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, emulate: bool) -> torch.Tensor:
    return dy.new_empty(*dy.shape[:-1], weight.shape[1])


def _save_frozen(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    _, weight, scale, emulate = inputs
    ctx.save_for_backward(weight, scale)
    ctx.emulate = emulate


def _frozen_backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
    weight, scale = ctx.saved_tensors
    dx = frozen_float8_input_grad(dy, weight, scale, ctx.emulate) if ctx.needs_input_grad[0] else None
    return dx, None, None, None


frozen_float8_matmul.register_autograd(_frozen_backward, setup_context=_save_frozen)


class Float8FrozenLinear(torch.nn.Linear):
    """A frozen ``nn.Linear`` whose weight is e4m3 with fp32 row scales (``weight_scale``), quantized once from the
    layer it replaces. ``compute_dtype`` (the replaced weight's dtype) is what PEFT makes its adapters in before
    casting them to fp32, as it does beside bitsandbytes' layers. Keep it out of ``model.to(dtype)``: that would
    cast the float8 weight too."""

    def __init__(self, linear: torch.nn.Linear, emulate: bool = False) -> None:
        torch.nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.compute_dtype = linear.weight.dtype
        self.emulate = emulate
        with torch.no_grad():
            weight, scale = rowwise_e4m3(linear.weight.detach())
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.register_buffer("weight_scale", scale.view(-1))
        bias = linear.bias
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        matmul = frozen_float8_matmul if torch.compiler.is_compiling() else FrozenFloat8Matmul.apply
        y = matmul(x, self.weight, self.weight_scale, self.emulate)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def dequantized(self) -> torch.Tensor:
        """The weight this layer multiplies by, in fp32 (its e4m3 values times their row scales)."""
        return self.weight.float() * self.weight_scale.view(-1, 1)

    def extra_repr(self) -> str:
        mode = "emulated" if self.emulate else "torch._scaled_mm"
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3 rowwise, {mode}"


def float8_layers(model: Any) -> int:
    """How many of the model's linears are :class:`Float8FrozenLinear` (a float8 frozen base's)."""
    return sum(isinstance(m, Float8FrozenLinear) for m in model.modules())
