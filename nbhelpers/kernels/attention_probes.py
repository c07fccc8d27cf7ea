"""Correctness probes of the attention implementations: one packed row of three sequences, the implementation's
kernel against :func:`nbhelpers.kernels.probes.packed_attention_reference` (causal attention within each
sequence, fp32), forward and backward. The attention table (:mod:`nbhelpers.kernels.attention`) names each
implementation's probe. Light at import: torch loads inside the functions.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from .probes import NO_CUDA, ProbeResult, compare_kernels, not_runnable, packed_attention_reference
from .varlen_attention import VARLEN_ATTENTION, varlen_attention_forward, varlen_status

LENGTHS = (5, 7, 4)  # the sequences of the probe's packed row
HEADS, HEAD_DIM = 2, 16


def packed_row(device: str, dtype_name: str = "float32") -> dict[str, Any]:
    """The probe's inputs: query/key/value (1, heads, tokens, head_dim), position_ids restarting per sequence,
    sequence ids and cumulative boundaries (int32), seeded."""
    import torch

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator(device="cpu").manual_seed(0)
    tokens = sum(LENGTHS)
    q, k, v = (torch.randn(1, HEADS, tokens, HEAD_DIM, generator=generator).to(device, dtype) for _ in range(3))
    sequence_ids = torch.cat([torch.full((n,), i) for i, n in enumerate(LENGTHS)]).to(device)
    position_ids = torch.cat([torch.arange(n) for n in LENGTHS])[None].to(device)
    bounds = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return {"q": q, "k": k, "v": v, "sequence_ids": sequence_ids, "position_ids": position_ids, "cu_seqlens": bounds,
            "scale": HEAD_DIM**-0.5}  # fmt: skip


def _reference(row: dict[str, Any]) -> Any:
    def reference(q: Any, k: Any, v: Any) -> Any:
        return packed_attention_reference(q, k, v, row["sequence_ids"], row["scale"])

    return reference


def probe_sdpa(device: str) -> list[ProbeResult]:
    """torch's scaled_dot_product_attention given the block-diagonal causal mask of the packed row (fp32)."""
    import torch

    row = packed_row(device)
    same = row["sequence_ids"][:, None] == row["sequence_ids"][None, :]
    mask = same & torch.ones_like(same).tril()

    def sdpa(q: Any, k: Any, v: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=row["scale"])

    return [compare_kernels("sdpa, packed row", sdpa, _reference(row), [row["q"], row["k"], row["v"]], 1e-4, 1e-5)]


def probe_varlen(device: str) -> list[ProbeResult]:
    """The workbook's torch_varlen attention function (PyTorch's FlashAttention varlen kernel), bf16, CUDA only."""
    if why := varlen_status(device):
        return [not_runnable(VARLEN_ATTENTION, why)]
    row = packed_row(device, "bfloat16")

    def varlen(q: Any, k: Any, v: Any) -> Any:
        out, _ = varlen_attention_forward(None, q, k, v, None, scaling=row["scale"], position_ids=row["position_ids"])
        return out.transpose(1, 2)  # (batch, tokens, heads, dim) -> the reference's layout

    inputs = [row["q"], row["k"], row["v"]]
    return [compare_kernels(f"{VARLEN_ATTENTION}, packed row", varlen, _reference(row), inputs, 2e-2, 2e-2)]


def probe_flash_attention_2(device: str) -> list[ProbeResult]:
    """flash-attn's varlen function on the packed row's boundaries, bf16, CUDA only."""
    if importlib.util.find_spec("flash_attn") is None:
        return [not_runnable("flash_attention_2", "the flash-attn package is not installed")]
    if device != "cuda":
        return [not_runnable("flash_attention_2", f"{NO_CUDA}: FlashAttention 2 runs on CUDA only")]
    from flash_attn import flash_attn_varlen_func

    row = packed_row(device, "bfloat16")
    longest = max(LENGTHS)

    def flash(q: Any, k: Any, v: Any) -> Any:
        tokens_first = [t[0].transpose(0, 1) for t in (q, k, v)]  # (tokens, heads, dim)
        out = flash_attn_varlen_func(*tokens_first, row["cu_seqlens"], row["cu_seqlens"], longest, longest,
                                     softmax_scale=row["scale"], causal=True)  # fmt: skip
        return out.transpose(0, 1)[None]

    inputs = [row["q"], row["k"], row["v"]]
    return [compare_kernels("flash_attention_2, packed row", flash, _reference(row), inputs, 2e-2, 2e-2)]


def probe_flex_attention(device: str) -> list[ProbeResult]:
    """FlexAttention with the packed row's block mask, compiled, CUDA only (it has no CPU backward)."""
    if device != "cuda":
        return [not_runnable("flex_attention", f"{NO_CUDA}: FlexAttention has no backward on a CPU")]
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    row = packed_row(device)
    ids = row["sequence_ids"]

    def keep(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (ids[q_idx] == ids[kv_idx]) & (q_idx >= kv_idx)

    tokens = ids.numel()
    block_mask = create_block_mask(keep, None, None, tokens, tokens, device=device)
    compiled = torch.compile(flex_attention, dynamic=False)

    def flex(q: Any, k: Any, v: Any) -> Any:
        return compiled(q, k, v, block_mask=block_mask, scale=row["scale"])

    inputs = [row["q"], row["k"], row["v"]]
    return [compare_kernels("flex_attention, packed row", flex, _reference(row), inputs, 1e-3, 1e-4)]
