"""Padding-free attention through PyTorch's own FlashAttention varlen kernel, no flash-attn package needed.

``torch.nn.attention.varlen.varlen_attn`` (CUDA only) takes the tokens of many sequences laid end to end
with their cumulative boundaries, which is exactly a packed row. :func:`register` adds it to transformers
as ``attn_implementation="torch_varlen"``; the boundaries come from ``position_ids``, which restart at 0
at every sequence of a packed row, so no attention mask is built at all. A right-padded batch works too
(causal attention keeps real tokens from seeing the padding after them).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

VARLEN_ATTENTION = "torch_varlen"


def varlen_kernel() -> Any:
    """PyTorch's varlen attention function, or ImportError naming the torch version it needs."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as error:  # torch older than 2.9
        raise ImportError(f"attn_implementation={VARLEN_ATTENTION!r} needs torch >= 2.9 ({error})") from error
    return varlen_attn


def varlen_status(device: str) -> str:
    """'' when torch_varlen can run on ``device``, else why not."""
    try:
        varlen_kernel()
    except ImportError as error:
        return str(error)
    if device != "cuda":
        return "needs a CUDA GPU (PyTorch's varlen kernel is FlashAttention)"
    import torch

    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        return f"needs an Ampere or newer GPU for FlashAttention (this one is sm{major}{minor})"
    return ""


def sequence_boundaries(position_ids: Any) -> tuple[Any, int]:
    """Cumulative sequence starts (int32, length N+1) and the longest sequence, from restarting position ids.

    Every row is laid end to end, so each row's first token starts a sequence as well.
    """
    import torch

    flat = position_ids.reshape(-1)
    starts = flat == 0
    starts[:: position_ids.shape[-1]] = True
    start_index = torch.nonzero(starts).flatten()
    total = torch.tensor([flat.numel()], device=flat.device)
    cu_seqlens = torch.cat([start_index, total]).to(torch.int32)
    return cu_seqlens, int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


_last_boundaries: list[Any] = []  # [position_ids, (cu_seqlens, longest)] of the latest forward pass


def _boundaries_of_this_forward(position_ids: Any) -> tuple[Any, int]:
    """sequence_boundaries, computed once per forward pass: every layer receives the same position_ids tensor."""
    if _last_boundaries and _last_boundaries[0] is position_ids:
        return _last_boundaries[1]
    boundaries = sequence_boundaries(position_ids)
    _last_boundaries[:] = [position_ids, boundaries]
    return boundaries


@functools.lru_cache(maxsize=8)
def _kernel_options(kernel: Any) -> tuple[tuple[str, Any], bool]:
    """(causal keyword, takes enable_gqa) of this torch version's kernel: read once, not in every layer.

    Causal masking is ``window_size=(-1, 0)`` in newer torch and ``is_causal=True`` in 2.9-2.11.
    """
    names = inspect.signature(kernel).parameters
    if "window_size" in names:
        causal: tuple[str, Any] = ("window_size", (-1, 0))
    elif "is_causal" in names:
        causal = ("is_causal", True)
    else:
        raise TypeError("torch.nn.attention.varlen.varlen_attn takes neither window_size nor is_causal")
    return causal, "enable_gqa" in names


def half_precision(*tensors: Any) -> tuple[Any, ...]:
    """The tensors in the autocast dtype, as SDPA gets them under autocast; FlashAttention takes only fp16/bf16.

    Qwen3's q/k norms multiply by fp32 weights, so under bf16 autocast the query and key arrive in fp32.
    """
    import torch

    half = (torch.float16, torch.bfloat16)
    if all(t.dtype in half for t in tensors):
        return tensors
    device = tensors[0].device.type
    if torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) in half:
        dtype = torch.get_autocast_dtype(device)
        return tuple(t.to(dtype) for t in tensors)
    dtypes = ", ".join(sorted({str(t.dtype) for t in tensors}))
    raise ValueError(
        f"attn_implementation={VARLEN_ATTENTION!r} needs fp16 or bf16 (got {dtypes}): use dtype='bf16' (autocast)"
    )


def varlen_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    position_ids: Any = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """A transformers attention function: (batch, heads, seq, dim) in, (batch, seq, heads, dim) out."""
    if position_ids is None:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r} needs position_ids to find the sequences")
    if dropout:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r} supports no attention dropout (got {dropout})")
    if sliding_window is not None:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r} supports no sliding-window layers")
    batch, heads, length, head_dim = query.shape
    kernel = varlen_kernel()
    (causal_name, causal_value), takes_gqa = _kernel_options(kernel)
    extra: dict[str, Any] = {causal_name: causal_value}
    if key.shape[1] != heads:  # grouped-query attention
        if takes_gqa:
            extra["enable_gqa"] = True
        else:
            key = key.repeat_interleave(heads // key.shape[1], dim=1)
            value = value.repeat_interleave(heads // value.shape[1], dim=1)
    query, key, value = half_precision(query, key, value)
    cu_seqlens, longest = _boundaries_of_this_forward(position_ids)

    def tokens_first(t: Any) -> Any:
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], head_dim)

    out = kernel(
        tokens_first(query), tokens_first(key), tokens_first(value), cu_seqlens, cu_seqlens, longest, longest,
        scale=scaling, **extra,
    )  # fmt: skip
    return out.reshape(batch, length, heads, head_dim), None


def register() -> None:
    """Make ``attn_implementation="torch_varlen"`` known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention_forward)
