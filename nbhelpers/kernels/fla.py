"""The fla backend: flash-linear-attention's chunk gated delta rule and a fused causal conv1d, bound into a
hybrid model's modeling module, both given the sequence boundaries of a packed row, and fla's fused gated
RMSNorm in place of each Gated DeltaNet layer's PyTorch one (one kernel instead of a dozen elementwise ones
that keep fp32 copies for backward: 14 bytes a value element saved, against 4).

The convolution is the ``causal-conv1d`` package's where it imports (given ``seq_idx``), else fla's own
Triton ``causal_conv1d`` through an adapter (given ``cu_seqlens``). transformers left the convolution on its
PyTorch fallback on the H200 (no causal-conv1d build), and that fallback ignores boundaries: a packed row's
sequences mixed there even with the fused delta rule. Before anything is bound, :func:`fla_refusal` checks
the environment: fla refuses its gated backward on Hopper with Triton >= 3.4 and < 3.7.1 (wrong results)
unless tilelang is installed. fla's kernels are Triton and do not run in Triton's CPU interpreter, so
without CUDA the backend is unavailable (the reference path keeps packed rows apart on a CPU).

Light at import: torch, fla and triton load inside the functions.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

from . import hybrid_paths as paths
from .packed_boundaries import PackedBoundaries, boundary_arguments, shared_boundaries, takes_chunk_indices
from .spec import BackendUnavailable

FLA_BACKEND = "fla"  # the backend's name in the table (nbhelpers.kernels.registry)
# Triton versions whose gated chunk backward is wrong on Hopper (fla/ops/common/chunk_o.py): [first, fixed).
BROKEN_TRITON_ON_HOPPER = ((3, 4, 0), (3, 7, 1))
HOPPER = (9, 0)
FUSED_GATED_NORM = "fused_gated_norm"  # the report key: every Gated DeltaNet output norm is fla's fused one
FLA_CHECKS: dict[str, str] = {
    "fla_delta_rule": "every Gated DeltaNet layer calls flash-linear-attention's chunk_gated_delta_rule, which "
    "gets the packed row's cu_seqlens (read off the modeling module's hook)",
    "fused_conv1d": "every Gated DeltaNet layer's causal conv1d is fused (the causal-conv1d package given seq_idx, "
    "or fla's causal_conv1d given cu_seqlens), not transformers' PyTorch fallback",
    FUSED_GATED_NORM: "every Gated DeltaNet layer's gated RMSNorm is fla's FusedRMSNormGated (its weight copied), "
    "not transformers' PyTorch module",
}


def version_tuple(text: str) -> tuple[int, ...]:
    """(3, 6, 0) from "3.6.0+git1234" (missing parts are 0)."""
    numbers = [int(n) for n in re.findall(r"\d+", text.split("+")[0])[:3]]
    return tuple(numbers + [0] * (3 - len(numbers)))


def fla_refusal(
    device: str,
    capability: tuple[int, int] | None,
    triton_version: str | None,
    has_fla: bool,
    has_tilelang: bool,
) -> str:
    """Why the fla backend cannot run correctly here ('' when it can), from injected facts.

    ``capability`` is the CUDA compute capability (None without CUDA); ``triton_version`` None when Triton
    is missing.
    """
    if not has_fla:
        return "missing package: flash-linear-attention is not importable (pip install flash-linear-attention)"
    if device != "cuda" or capability is None:
        return ("no GPU: fla's kernels are Triton and need a CUDA GPU (they do not run in Triton's CPU "
                "interpreter); on a CPU the reference path keeps packed rows apart")  # fmt: skip
    if triton_version is None:
        return "missing package: triton is not installed, and fla's kernels are Triton"
    first, fixed = BROKEN_TRITON_ON_HOPPER
    if capability[0] == HOPPER[0] and first <= version_tuple(triton_version) < fixed and not has_tilelang:
        return (
            f"fla's gated delta rule backward gives wrong results on Hopper (sm{capability[0]}{capability[1]}) "
            f"with Triton {triton_version} (>= {'.'.join(map(str, first))}, < {'.'.join(map(str, fixed))}), and "
            "fla refuses it: install tilelang (pip install tilelang) or Triton >= 3.7.1"
        )
    return ""


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def environment_facts(device: str) -> dict[str, Any]:
    """The facts :func:`fla_refusal` decides on, read from this process."""
    import torch

    capability = torch.cuda.get_device_capability() if device == "cuda" and torch.cuda.is_available() else None
    triton_version = None
    if importable("triton"):
        triton_version = getattr(importlib.import_module("triton"), "__version__", "0")
    return {"device": device, "capability": capability, "triton_version": triton_version,
            "has_fla": importable("fla"), "has_tilelang": importable("tilelang")}  # fmt: skip


def check_fla_environment(device: str) -> None:
    """BackendUnavailable saying why and what to install, when fla cannot run correctly here."""
    if reason := fla_refusal(**environment_facts(device)):
        raise BackendUnavailable(reason)


def fla_status(device: str) -> str:
    """The backend's status function: '' when fla can run correctly on ``device``, else why not."""
    return fla_refusal(**environment_facts(device))


def probe_fla(device: str) -> list[Any]:
    """fla's chunk gated delta rule against transformers' PyTorch reference (the function transformers' Qwen3.5
    hook wraps), forward and backward, bf16, with the q/k L2 norm in the kernel as the model calls it; fla's fused
    gated RMSNorm against transformers' Qwen3.5 module (bf16, within bf16's rounding)."""
    from .probes import NO_CUDA, compare_kernels, not_runnable

    if device != "cuda":
        return [not_runnable("chunk_gated_delta_rule", f"{NO_CUDA}: fla's Triton kernels do not run in Triton's "
                             "CPU interpreter")]  # fmt: skip
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5

    reference_rule = paths.reference_function(modeling_qwen3_5, "torch_chunk_gated_delta_rule")
    tokens, dim = 128, 64
    rand = bf16_randn(device)
    query, key, value, g, beta = delta_rule_inputs(rand, tokens, dim, torch.bfloat16)
    fused = fla_delta_rule()

    rule = compare_kernels("chunk_gated_delta_rule", with_qk_norm(fused), with_qk_norm(reference_rule),
                           [query, key, value, g, beta], 5e-2, 5e-2)  # fmt: skip
    norm = modeling_qwen3_5.Qwen3_5RMSNormGated(dim).to(device, torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_(rand(dim).float().abs() + 0.5)
    fused_norm = fused_gated_norm(norm)
    gated = compare_kernels("fused_gated_norm", fused_norm, norm, [rand(tokens, dim), rand(tokens, dim)], 2e-2, 2e-2)
    return [rule, gated]


def bf16_randn(device: str) -> Any:
    """``rand(*shape)``: seeded standard-normal bf16 tensors on ``device`` (drawn on the CPU, the same everywhere)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(0)
    return lambda *shape: torch.randn(*shape, generator=generator).to(device, torch.bfloat16)


def delta_rule_inputs(rand: Any, tokens: int, dim: int, gate_dtype: Any) -> tuple[Any, ...]:
    """A probe's (query, key, value, g, beta) for one sequence of ``tokens`` over 2 heads of ``dim``: g a log decay
    below 0 in ``gate_dtype``, beta in (0, 1), bf16."""
    import torch

    batch, heads = 1, 2
    query, key, value = (rand(batch, tokens, heads, dim) for _ in range(3))
    g = -torch.nn.functional.softplus(rand(batch, tokens, heads).float()).to(gate_dtype)
    beta = torch.sigmoid(rand(batch, tokens, heads).float()).to(torch.bfloat16)
    return query, key, value, g, beta


def with_qk_norm(rule: Any) -> Any:
    """``rule(q, k, v, g, beta)`` with the q/k L2 norm in the kernel, as the model calls it (the probes' form)."""
    return lambda q, k, v, gate, b: rule(q, k, v, gate, b, use_qk_l2norm_in_kernel=True)


def delta_rule_hook(chunk_rule: Any, implementation: str, boundaries: PackedBoundaries | None = None) -> Any:
    """A chunk gated delta rule taking fla's arguments (fla's, FlashQLA's) behind the reference's signature, tagged
    ``implementation`` for the per-layer report; cu_seqlens passed on (as int64), with ``boundaries``' chunk
    indices where given (fla's rule: built once per row, not once per layer)."""
    chunks = takes_chunk_indices(chunk_rule)

    def delta_rule(query: Any, key: Any, value: Any, g: Any, beta: Any, chunk_size: int = 64,
                   initial_state: Any = None, output_final_state: bool = False,
                   use_qk_l2norm_in_kernel: bool = False, cu_seqlens: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        return chunk_rule(
            query, key, value, g=g, beta=beta, initial_state=initial_state, output_final_state=output_final_state,
            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, **boundary_arguments(boundaries, cu_seqlens, chunks),
        )  # fmt: skip

    return paths.tag(delta_rule, implementation, paths.KEEPS_APART)


def fla_delta_rule() -> Any:
    """fla's chunk gated delta rule behind the reference's signature; cu_seqlens and their chunk indices (shared
    with the convolution, :func:`shared_boundaries`) passed on."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    return delta_rule_hook(chunk_gated_delta_rule, paths.FLA_DELTA_RULE, shared_boundaries())


def fla_conv() -> Any:
    """fla's Triton causal_conv1d behind transformers' ``causal_conv1d_fn`` signature ([B, D, T] in and out), given
    the row's boundaries and their chunk indices (shared with the delta rule, :func:`shared_boundaries`)."""
    try:
        from fla.modules.causal_conv1d import causal_conv1d
    except ImportError:  # older layout
        from fla.modules.convolution import causal_conv1d
    boundaries, chunks = shared_boundaries(), takes_chunk_indices(causal_conv1d)

    def conv(hidden_states: Any, weight: Any, bias: Any = None, activation: str | None = None,
             cu_seq_lens_q: Any = None, seq_idx: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        import torch

        bounds = cu_seq_lens_q
        if bounds is None and seq_idx is not None:
            bounds = torch.tensor(paths.boundaries_of(seq_idx=seq_idx), device=hidden_states.device)
        out, _ = causal_conv1d(hidden_states.transpose(1, 2), weight=weight, bias=bias, activation=activation,
                               **boundary_arguments(boundaries, bounds, chunks))  # fmt: skip
        return out.transpose(1, 2)

    return paths.tag(conv, paths.FLA_CONV, paths.KEEPS_APART)


def package_conv() -> Any:
    """The causal-conv1d package's kernel behind ``causal_conv1d_fn``'s signature, given seq_idx.

    Its seq_idx path needs channel-last input, so [B, D, T] is laid out with D contiguous first.
    """
    from causal_conv1d import causal_conv1d_fn

    def conv(hidden_states: Any, weight: Any, bias: Any = None, activation: str | None = None,
             cu_seq_lens_q: Any = None, seq_idx: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        import torch

        if seq_idx is None and cu_seq_lens_q is not None:
            lengths = (cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]).long()
            seq_idx = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)[None]
        if seq_idx is not None:
            hidden_states = hidden_states.transpose(1, 2).contiguous().transpose(1, 2)
            seq_idx = seq_idx.to(torch.int32).contiguous()
        return causal_conv1d_fn(hidden_states, weight, bias, seq_idx=seq_idx, activation=activation)

    return paths.tag(conv, paths.CAUSAL_CONV1D_PACKAGE, paths.SEQ_IDX)


def fused_conv() -> Any:
    """The causal-conv1d package's kernel where it imports, else fla's."""
    return package_conv() if importable("causal_conv1d") else fla_conv()


def fused_gated_norm(norm: Any) -> Any:
    """fla's ``FusedRMSNormGated`` with the weight, epsilon, device and dtype of transformers' gated RMSNorm
    (``norm(x, gate) = rmsnorm(x) * weight * silu(gate)``), its weight trained or frozen as the original's."""
    import torch
    from fla.modules import FusedRMSNormGated

    weight = norm.weight
    fused = FusedRMSNormGated(weight.numel(), eps=norm.variance_epsilon, activation="swish", device=weight.device,
                              dtype=weight.dtype)  # fmt: skip
    with torch.no_grad():
        fused.weight.copy_(weight)
    fused.weight.requires_grad_(weight.requires_grad)
    return fused


def use_fused_gated_norms(model: Any, make: Any = None) -> int:
    """Put ``make(norm)`` (default :func:`fused_gated_norm`, fla's) in place of every Gated DeltaNet layer's
    PyTorch gated RMSNorm (``linear_attn.norm``, transformers' module); returns how many were replaced."""
    make = make or fused_gated_norm
    modeling = paths.hybrid_modeling(model)
    if modeling is None:
        return 0
    replaced = 0
    for name, module in list(model.named_modules()):
        norm = getattr(module, "norm", None)
        if name.split(".")[-1] != "linear_attn" or norm is None:
            continue
        if paths.describe_norm(norm, modeling.__name__) == paths.TORCH:
            module.norm = make(norm)
            replaced += 1
    return replaced


def use_fla(model: Any, conv: bool = True) -> None:
    """Bind fla's delta rule (and, with ``conv``, the fused convolution) into a hybrid's modeling module, and put
    fla's fused gated RMSNorm in every Gated DeltaNet layer.

    ``conv=False`` leaves the convolution on transformers' bare PyTorch reference: what transformers runs on
    a machine without causal-conv1d, which mixes a packed row's sequences (a path for the contamination proof).
    """
    modeling = paths.hybrid_modeling(model)
    if modeling is None:
        raise BackendUnavailable(
            f"model_type={getattr(model.config, 'model_type', '?')!r} has no Gated DeltaNet layers for fla to patch"
        )
    paths.use_reference(model, keep_apart=())
    paths.bind(modeling, "torch_chunk_gated_delta_rule", fla_delta_rule())
    if conv:
        paths.bind(modeling, "causal_conv1d_fn", fused_conv())
    use_fused_gated_norms(model)


def apply_fla(model: Any, switches: tuple[str, ...], device: str) -> None:
    """The backend's apply function: the environment check first, then fla bound into the model's module."""
    check_fla_environment(device)
    use_fla(model)


def fla_report(model: Any) -> dict[str, bool]:
    """Which of fla's kernels really run, read off the modeling module, layer by layer (see FLA_CHECKS)."""
    rows = paths.linear_layers(model)
    fused_convs = (paths.FLA_CONV, paths.CAUSAL_CONV1D_PACKAGE)
    return {
        "fla_delta_rule": bool(rows) and all(
            r["delta_rule"] == paths.FLA_DELTA_RULE and r["delta_rule_boundaries"] in paths.HONOURS_BOUNDARIES
            for r in rows
        ),
        "fused_conv1d": bool(rows) and all(
            r["conv"] in fused_convs and r["conv_boundaries"] in paths.HONOURS_BOUNDARIES for r in rows
        ),
        FUSED_GATED_NORM: bool(rows) and all(r["gated_norm"] == paths.FLA_GATED_NORM for r in rows),
    }  # fmt: skip


def requested_fla(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report keys fla must see replaced, whatever the Liger switches."""
    return tuple(FLA_CHECKS)
