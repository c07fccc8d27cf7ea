"""Padding-free attention through PyTorch's own FlashAttention varlen kernel, no flash-attn package needed.

``torch.nn.attention.varlen.varlen_attn`` (CUDA only) takes the tokens of many sequences laid end to end
with their cumulative boundaries, which is exactly a packed row. :func:`register` adds it to transformers
as ``attn_implementation="torch_varlen"``. Like flash-attention's varlen path, it unpads: transformers hands it
the 2D padding mask (``flash_attention_mask``, registered for this name; ``None`` when no row is padded), the
pad positions are dropped, every row's first real token and every ``position_ids == 0`` start a sequence
(a packed row's sequences restart their positions), the kernel runs on the real tokens only, and the pad
positions of the output are zeros. So padded rows (left or right), packed rows and a batch of several rows
all work, and a pad never reaches the kernel.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

VARLEN_ATTENTION = "torch_varlen"
# What transformers passes an attention function for packed rows (its flash-attention path's names).
BOUNDARY_KWARGS = ("cu_seq_lens_q", "max_length_q")


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


def sequence_boundaries(position_ids: Any, keep: Any = None) -> tuple[Any, int]:
    """Cumulative sequence starts (int32, length N+1) and the longest sequence, over the kept tokens.

    ``position_ids`` (batch, length) restart at 0 at every packed sequence; ``keep`` (batch, length, bool) marks
    the real tokens (None: all). Every row is laid end to end, so each row's first kept token starts a
    sequence as well; N counts kept tokens only.
    """
    import torch

    if keep is None:
        keep = torch.ones(position_ids.shape, dtype=torch.bool, device=position_ids.device)
    keep = keep.bool()
    before = torch.cumsum(keep.int(), dim=-1) - keep.int()  # kept tokens before each position of its row
    starts = ((position_ids == 0) | (before == 0)) & keep
    start_index = torch.nonzero(starts[keep]).flatten()
    total = torch.tensor([int(keep.sum())], device=position_ids.device)
    cu_seqlens = torch.cat([start_index, total]).to(torch.int32)
    if cu_seqlens.numel() < 2:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r}: the batch holds no real token")
    return cu_seqlens, int((cu_seqlens[1:] - cu_seqlens[:-1]).max())


def _token_layout(position_ids: Any, attention_mask: Any, batch: int, length: int) -> tuple[Any, Any, int]:
    """(indices of the real tokens in the flattened batch or None when every token is real, cu_seqlens, longest).

    ``attention_mask`` is the 2D padding mask (batch, length) that ``flash_attention_mask`` passes on, or None.
    ``position_ids`` may come as (1, length) for a batch of several rows: it is expanded.
    """
    import torch

    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(
            f"attn_implementation={VARLEN_ATTENTION!r} needs a 2D padding mask, got shape "
            f"{tuple(attention_mask.shape)}: call nbhelpers.kernels.varlen_attention.register() before loading"
        )
    if position_ids is None:
        position_ids = torch.arange(length, device=attention_mask.device if attention_mask is not None else None)
    position_ids = position_ids.reshape(-1, length).expand(batch, length)
    keep = attention_mask.bool() if attention_mask is not None else None
    cu_seqlens, longest = sequence_boundaries(position_ids, keep)
    indices = torch.nonzero(keep.reshape(-1)).flatten() if keep is not None and not bool(keep.all()) else None
    return indices, cu_seqlens, longest


_last_layout: list[Any] = []  # [position_ids, attention_mask, batch, layout] of the latest forward pass


def _layout_of_this_forward(position_ids: Any, attention_mask: Any, batch: int, length: int) -> tuple[Any, Any, int]:
    """_token_layout, computed once per forward pass: every layer receives the same position_ids and mask."""
    if (
        _last_layout
        and _last_layout[0] is position_ids
        and _last_layout[1] is attention_mask
        and _last_layout[2] == (batch, length)
    ):
        return _last_layout[3]
    layout = _token_layout(position_ids, attention_mask, batch, length)
    _last_layout[:] = [position_ids, attention_mask, (batch, length), layout]
    return layout


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
    if position_ids is None and attention_mask is None:
        raise ValueError(
            f"attn_implementation={VARLEN_ATTENTION!r} needs position_ids or a padding mask to find the sequences"
        )
    if dropout:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r} supports no attention dropout (got {dropout})")
    if sliding_window is not None:
        raise ValueError(f"attn_implementation={VARLEN_ATTENTION!r} supports no sliding-window layers")
    batch, heads, length, head_dim = query.shape
    kernel = varlen_kernel()
    (causal_name, causal_value), takes_gqa = _kernel_options(kernel)
    given = kwargs.get(BOUNDARY_KWARGS[0])
    extra: dict[str, Any] = {causal_name: causal_value}
    if key.shape[1] != heads:  # grouped-query attention
        if takes_gqa:
            extra["enable_gqa"] = True
        else:
            key = key.repeat_interleave(heads // key.shape[1], dim=1)
            value = value.repeat_interleave(heads // value.shape[1], dim=1)
    query, key, value = half_precision(query, key, value)
    if given is not None and attention_mask is None:  # worked out before the layers (install_boundaries_hook)
        indices, cu_seqlens, longest = None, given, kwargs[BOUNDARY_KWARGS[1]]
    else:
        indices, cu_seqlens, longest = _layout_of_this_forward(position_ids, attention_mask, batch, length)

    def tokens_first(t: Any) -> Any:
        flat = t.transpose(1, 2).reshape(batch * length, t.shape[1], head_dim)
        return flat if indices is None else flat.index_select(0, indices)

    out = kernel(
        tokens_first(query), tokens_first(key), tokens_first(value), cu_seqlens, cu_seqlens, longest, longest,
        scale=scaling, **extra,
    )  # fmt: skip
    if indices is not None:  # pads get zeros: no real token attends to them, and their labels are -100
        full = out.new_zeros(batch * length, heads, head_dim)
        out = full.index_copy(0, indices, out)
    return out.reshape(batch, length, heads, head_dim), None


def boundary_kwargs(position_ids: Any) -> dict[str, Any]:
    """The keyword arguments that hand an unpadded batch's sequence boundaries to every attention call, as
    transformers' own flash-attention path takes them: ``cu_seq_lens_q/k`` and ``max_length_q/k``."""
    cu_seqlens, longest = sequence_boundaries(position_ids.reshape(position_ids.shape[0], -1))
    return dict(zip(BOUNDARY_KWARGS + ("cu_seq_lens_k", "max_length_k"), (cu_seqlens, longest) * 2))


def _add_boundaries(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Forward pre-hook of the decoder stack: an unpadded torch_varlen batch gets its boundaries once, here."""
    position_ids, mask = kwargs.get("position_ids"), kwargs.get("attention_mask")
    unpadded = mask is None or (mask.dim() == 2 and bool(mask.all()))
    implementation = getattr(getattr(module, "config", None), "_attn_implementation", "")
    if implementation == VARLEN_ATTENTION and position_ids is not None and unpadded:
        kwargs = kwargs | boundary_kwargs(position_ids) | {"attention_mask": None}
    return args, kwargs


def install_boundaries_hook(model: Any) -> bool:
    """Work a torch_varlen batch's sequence boundaries out once per forward pass, before the decoder layers, and
    pass them down as keyword arguments, so a compiled layer holds no data-dependent step (no graph break, no
    recompile per batch). Padded batches keep the per-layer path. Whether the hook was installed (torch_varlen)."""
    inner = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    if getattr(model.config, "_attn_implementation", "") != VARLEN_ATTENTION or getattr(inner, "_varlen_hook", None):
        return False
    inner._varlen_hook = inner.register_forward_pre_hook(_add_boundaries, with_kwargs=True)
    return True


def register() -> None:
    """Make ``attn_implementation="torch_varlen"`` known to transformers (idempotent), with flash-attention's
    mask function, so the attention receives the 2D padding mask (None when no row is padded)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(VARLEN_ATTENTION, varlen_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(VARLEN_ATTENTION, flash_attention_mask)
