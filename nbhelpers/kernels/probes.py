"""Correctness probes: a fused kernel's forward and backward against its reference on small tensors.

:func:`compare_kernels` is the one comparison every probe uses: the same inputs (fresh leaf copies for each
side), the same upstream gradient, then the output and every input's gradient compared within a stated
tolerance (``|fused - reference| <= atol + rtol * |reference|``). A fused kernel that raises is a failed
probe too. Each backend's probe (in its own module) and each attention implementation's probe
(:mod:`nbhelpers.kernels.attention_probes`) returns a list of :class:`ProbeResult`. Light at import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

PASS = "pass"
FAIL = "fail"  # outside the tolerance, or the fused kernel raised
NOT_RUNNABLE = "not runnable here"  # the kernel needs what this machine lacks (a CUDA GPU): no verdict
PROBE_STATUSES = (PASS, FAIL, NOT_RUNNABLE)
NO_CUDA = "no CUDA GPU"


@dataclass(frozen=True)
class ProbeResult:
    """One probed kernel: pass, fail or not runnable here, with the worst difference and the tolerance."""

    kernel: str
    status: str
    detail: str = ""
    max_abs_diff: float | None = None
    rtol: float | None = None
    atol: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_runnable(kernel: str, why: str) -> ProbeResult:
    """The result of a probe that cannot run on this machine (never an error: there is no verdict)."""
    return ProbeResult(kernel, NOT_RUNNABLE, why)


def _leaves(inputs: Sequence[Any]) -> list[Any]:
    """Detached copies of the inputs; floating-point tensors require a gradient."""
    import torch

    copies = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if value.is_floating_point():
                value.requires_grad_(True)
        copies.append(value)
    return copies


def _first_tensor(output: Any) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output


def compare_kernels(
    kernel: str,
    fused: Callable[..., Any],
    reference: Callable[..., Any],
    inputs: Sequence[Any],
    rtol: float,
    atol: float,
    seed: int = 0,
    norm_rtol: float | None = None,
    input_names: Sequence[str] = (),
) -> ProbeResult:
    """Run ``fused`` and ``reference`` forward and backward on the same inputs; pass when the output and every
    floating-point input's gradient agree within ``atol + rtol * |reference|`` and, with ``norm_rtol``, when each
    row's (last dimension's) difference has a norm within ``norm_rtol`` of that row's norm in the reference: a
    kernel that leaves out many small terms stays inside an elementwise ``atol`` but not inside this (at a
    near-uniform softmax CCE's gradient filter zeroes whole rows of the lm head's gradient, each of them tiny).

    ``input_names`` name the inputs in a failure's detail ("gradient of the lm head"); unnamed ones are numbered
    ("gradient of input 2"). A tuple output is compared on its first element. The backward pass uses one seeded
    random upstream gradient for both sides, so a kernel whose backward is wrong fails even when its forward is
    right.
    """
    import torch

    if rtol < 0 or atol < 0 or (norm_rtol is not None and norm_rtol < 0):
        raise ValueError(f"rtol={rtol}, atol={atol}, norm_rtol={norm_rtol}: tolerances must be >= 0")
    if len(input_names) > len(inputs):
        raise ValueError(f"input_names={list(input_names)}: more names than the {len(inputs)} inputs")
    ref_inputs, fused_inputs = _leaves(inputs), _leaves(inputs)
    ref_out = _first_tensor(reference(*ref_inputs))
    generator = torch.Generator(device="cpu").manual_seed(seed)
    upstream = torch.randn(ref_out.shape, generator=generator, dtype=torch.float32).to(ref_out.device, ref_out.dtype)
    ref_out.backward(upstream)
    try:
        fused_out = _first_tensor(fused(*fused_inputs))
        fused_out.backward(upstream.to(fused_out.dtype))
    except Exception as error:  # noqa: BLE001 - a fused kernel that raises is a failed probe, with its message
        return ProbeResult(kernel, FAIL, f"the fused kernel raised {type(error).__name__}: {error}"[:500])
    pairs = [("output", fused_out, ref_out)]
    pairs += [
        (f"gradient of {input_names[i] if i < len(input_names) else f'input {i}'}", f.grad, r.grad)
        for i, (f, r) in enumerate(zip(fused_inputs, ref_inputs))
        if isinstance(r, torch.Tensor) and r.grad is not None
    ]
    worst, failures = 0.0, []
    for name, got, want in pairs:
        if got is None or got.shape != want.shape:
            failures.append(f"{name}: {'missing' if got is None else f'shape {tuple(got.shape)}'}")
            continue
        got, want = got.detach().float(), want.detach().float()
        diff = (got - want).abs()
        worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        if not torch.isfinite(got).all() or bool((diff > atol + rtol * want.abs()).any()):
            failures.append(f"{name}: max |diff| {float(diff.max()):.3g}")
        elif norm_rtol is not None and (rows := _worst_row(diff, want)) > norm_rtol:
            failures.append(f"{name}: a row's |diff| / |reference| {rows:.3g}")
    bounds = f"rtol {rtol:g}, atol {atol:g}" + (f", norm_rtol {norm_rtol:g}" if norm_rtol is not None else "")
    if failures:
        return ProbeResult(kernel, FAIL, f"outside {bounds}: " + "; ".join(failures), worst, rtol, atol)
    return ProbeResult(kernel, PASS, f"output and {len(pairs) - 1} gradients within {bounds}", worst, rtol, atol)


def _worst_row(diff: Any, want: Any) -> float:
    """The largest ratio of a row's difference norm to its reference norm (rows along the last dimension; a row that
    is zero in the reference must be zero in the kernel too)."""
    import torch

    last = want.shape[-1] if want.dim() else 1
    diff_rows, want_rows = diff.reshape(-1, last).norm(dim=-1), want.reshape(-1, last).norm(dim=-1)
    ratios = torch.where(want_rows > 0, diff_rows / want_rows.clamp(min=1e-30), diff_rows * torch.inf)
    return float(torch.nan_to_num(ratios, nan=0.0).max()) if ratios.numel() else 0.0


def rms_norm_reference(x: Any, weight: Any, eps: float = 1e-6) -> Any:
    """RMSNorm as transformers' Qwen3 computes it (fp32 variance), the reference of fused RMSNorm kernels."""
    import torch

    variance = x.float().pow(2).mean(-1, keepdim=True)
    return weight * (x.float() * torch.rsqrt(variance + eps)).to(x.dtype)


def swiglu_reference(gate: Any, up: Any) -> Any:
    """silu(gate) * up, the reference of fused SwiGLU kernels."""
    import torch

    return torch.nn.functional.silu(gate) * up


def cross_entropy_reference(logits: Any, labels: Any) -> Any:
    """Mean cross-entropy ignoring label -100, the reference of fused cross-entropy kernels."""
    import torch

    return torch.nn.functional.cross_entropy(logits.float(), labels, ignore_index=-100)


def packed_attention_reference(query: Any, key: Any, value: Any, sequence_ids: Any, scale: float) -> Any:
    """Causal attention within each sequence of a packed row, computed plainly in fp32.

    ``query``/``key``/``value`` are (batch, heads, tokens, head_dim); ``sequence_ids`` (tokens,) says which
    sequence each token belongs to. Returns (batch, heads, tokens, head_dim) in the query's dtype.
    """
    import torch

    tokens = query.shape[-2]
    causal = torch.ones(tokens, tokens, dtype=torch.bool, device=query.device).tril()
    same = sequence_ids[:, None] == sequence_ids[None, :]
    scores = (query.float() @ key.float().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~(causal & same), float("-inf"))
    return (scores.softmax(-1) @ value.float()).to(query.dtype)
