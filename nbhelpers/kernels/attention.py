"""The table of attention implementations: the one place that knows each ``attn_implementation`` by name.

Each entry says whether it can run on a device (and why not), whether it keeps the sequences of a packed
row apart from ``position_ids`` alone, the hook that makes it known to transformers before a model is
built, and the lines exported code needs for it. Light at import: RunConfig reads
:data:`ATTENTION_IMPLEMENTATIONS`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .attention_probes import probe_flash_attention_2, probe_flex_attention, probe_sdpa, probe_varlen
from .varlen_attention import VARLEN_ATTENTION, varlen_status
from .varlen_attention import register as register_varlen_attention

DEFAULT_ATTENTION = "sdpa"  # RunConfig's default, and the one preferred where several could serve


def runs_anywhere(device: str) -> str:
    """'' : the implementation can be tried on any device (a failure is a measured result)."""
    return ""


def flash_attention_2_status(device: str) -> str:
    """'' when the flash-attn package is installed and the device is a CUDA GPU, else why not."""
    if importlib.util.find_spec("flash_attn") is None:
        return "not installed: the flash-attn package is missing"
    if device != "cuda":
        return "needs a CUDA GPU"
    return ""


@dataclass(frozen=True)
class AttentionImplementation:
    """One ``attn_implementation``: where it runs, what it does with a packed row, how to set it up."""

    name: str
    summary: str
    status: Callable[[str], str] = runs_anywhere  # device type -> '' when it can be tried there, else why not
    keeps_packed_apart: bool = False  # keeps a packed row's sequences apart from position_ids alone (no mask)
    register: Callable[[], None] | None = None  # makes the name known to transformers before a model is built
    setup_code: tuple[str, ...] = ()  # lines exported code runs before from_pretrained
    packages: tuple[str, ...] = ()  # distributions it needs beyond torch and transformers, as pip names them
    probe: Callable[[str], list[Any]] | None = None  # its correctness probe (None: it is the reference)


ATTENTION_TABLE: dict[str, AttentionImplementation] = {
    entry.name: entry
    for entry in (
        AttentionImplementation("eager", "transformers' matmul-softmax-matmul in PyTorch operators"),
        AttentionImplementation(
            DEFAULT_ATTENTION, "torch's scaled_dot_product_attention (a mask for packed rows)", probe=probe_sdpa,
        ),
        # flex_attention is not left out on a CPU: its forward runs and its backward fails, and that
        # failure is a measurement result that the runner records.
        AttentionImplementation(
            "flex_attention", "FlexAttention: a compiled BlockMask that skips fully masked blocks",
            keeps_packed_apart=True, probe=probe_flex_attention,
        ),
        AttentionImplementation(
            "flash_attention_2", "the flash-attn package's FlashAttention 2 (varlen on packed rows)",
            status=flash_attention_2_status, keeps_packed_apart=True, packages=("flash-attn",),
            probe=probe_flash_attention_2,
        ),
        AttentionImplementation(
            VARLEN_ATTENTION, "PyTorch's own FlashAttention varlen kernel (torch >= 2.9, CUDA), no flash-attn",
            status=varlen_status, keeps_packed_apart=True, register=register_varlen_attention, probe=probe_varlen,
            setup_code=(
                "from nbhelpers.kernels.varlen_attention import register",
                "",
                f'register()  # attn_implementation="{VARLEN_ATTENTION}": PyTorch\'s FlashAttention varlen kernel',
            ),
        ),
    )
}  # fmt: skip
ATTENTION_IMPLEMENTATIONS = tuple(ATTENTION_TABLE)  # the values RunConfig.attn_implementation allows


def attention_status(name: str, device: str = "cpu") -> str:
    """'' when an attention implementation can be tried here, else why it is left out."""
    entry = ATTENTION_TABLE.get(name)
    return entry.status(device) if entry is not None else ""


def keeps_packed_apart(name: str) -> bool:
    """Whether the implementation keeps a packed row's sequences apart from position_ids alone."""
    entry = ATTENTION_TABLE.get(name)
    return entry is not None and entry.keeps_packed_apart


def prepare_attention(name: str) -> None:
    """Make ``name`` known to transformers where it needs registering (idempotent); nothing otherwise."""
    entry = ATTENTION_TABLE.get(name)
    if entry is not None and entry.register is not None:
        entry.register()


def attention_setup_code(name: str) -> tuple[str, ...]:
    """The lines exported code runs before loading a model with this implementation (often none)."""
    entry = ATTENTION_TABLE.get(name)
    return entry.setup_code if entry is not None else ()


def half_precision_sdpa_guard(device: str, dtype: str) -> Any:
    """A context for a training step: on a CPU without AVX-512, SDPA in bf16 or fp16 runs on its math backend.

    torch's fused CPU attention packs half-precision blocks with AVX-512 instructions and raises ("pack_vnni2 is
    only supported when avx512 is supported") on CPUs without them (most laptops, and ATEN_CPU_CAPABILITY=default);
    the math backend computes the same attention there. Elsewhere (a GPU, fp32, an AVX-512 CPU) nothing changes."""
    import contextlib

    import torch

    if device != "cpu" or dtype == "fp32" or "AVX512" in torch.backends.cpu.get_cpu_capability():
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)
