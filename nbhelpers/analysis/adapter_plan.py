"""What fits one GPU with an adapter (LoRA): the largest token budget per step for a preset, by setting.

The memory planner (:mod:`nbhelpers.analysis.memory_plan`) predicts the bytes of one step; this module asks
it, for a frozen-base LoRA step of a preset, how many positions per step fit the GPU's capacity (the most
tokens of a token-budget step, or batch x max length of a padded one), for the settings worth comparing:
eager or Liger, with or without activation checkpointing.
"""

from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass
from typing import Any

from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.families import model_shape
from nbhelpers.models.loading import model_config
from nbhelpers.models.shape import ModelShape

from .memory_plan import GIB, H200_USABLE_GIB, MemorySettings, host_offload_bytes, plan_memory

TOKEN_STEP = 256  # token budgets are searched in multiples of this
MAX_TOKENS = 1 << 20


def largest_fitting_tokens(shape: ModelShape, settings: MemorySettings, step: int = TOKEN_STEP) -> int:
    """The most positions per GPU per step (a multiple of ``step``) whose planned step fits the capacity; 0 when
    not even ``step`` positions fit (the frozen base or the training state alone is too large)."""
    low, high = 0, MAX_TOKENS // step  # in units of ``step``: low fits (or is 0), high + 1 does not
    while low < high:
        middle = (low + high + 1) // 2
        if plan_memory(shape, dataclasses.replace(settings, tokens_per_gpu=middle * step)).fits:
            low = middle
        else:
            high = middle - 1
    return low * step


def lora_settings(
    tokens_per_gpu: int = 4096,
    rank: int = 16,
    targets: str = "all-linear",
    capacity_gib: float = H200_USABLE_GIB,
    frozen_base: str = "bf16",
) -> dict[str, MemorySettings]:
    """The LoRA settings worth comparing on one GPU: a frozen base (bf16, or ``frozen_base``'s format) under bf16
    autocast, eager or Liger (its RMSNorm and SwiGLU, plain or fused linear cross-entropy), checkpointing none,
    every 2nd layer, full, or full with each layer's input offloaded to the host."""
    base = MemorySettings(
        adapter="lora", lora_rank=rank, lora_targets=targets, weights="bf16", tokens_per_gpu=tokens_per_gpu,
        capacity_gib=capacity_gib, frozen_base=frozen_base,
    )  # fmt: skip
    liger = dataclasses.replace(base, fused_norm_mlp=True, loss="liger_ce")
    fused = dataclasses.replace(liger, loss="fused_linear_ce")
    return {
        "LoRA, eager": base,
        "LoRA, eager, checkpoint every 2nd layer": dataclasses.replace(base, checkpointing="every_k"),
        "LoRA, eager, full checkpointing": dataclasses.replace(base, checkpointing="full"),
        "LoRA, Liger (no fused linear CE)": liger,
        "LoRA, Liger, checkpoint every 2nd layer": dataclasses.replace(liger, checkpointing="every_k"),
        "LoRA, Liger, full checkpointing": dataclasses.replace(liger, checkpointing="full"),
        "LoRA, Liger with fused linear CE, full checkpointing": dataclasses.replace(fused, checkpointing="full"),
        "LoRA, Liger, offloaded checkpoints (inputs in host memory)": dataclasses.replace(
            liger, checkpointing="offload"),
    }


def lora_fit_frame(
    preset: str = "qwen3.8-27b",
    max_length: int = 2048,
    tokens_per_gpu: int = 4096,
    rank: int = 16,
    targets: str = "all-linear",
    capacity_gib: float = H200_USABLE_GIB,
    frozen_base: str = "bf16",
) -> Any:
    """One row per LoRA setting (:func:`lora_settings`) for a preset (or a folder or hub id: its config) on one
    GPU: the planned GiB at ``tokens_per_gpu`` by part, whether it fits, the largest token budget that fits, and
    the batch of ``max_length`` sequences that is (a padded step of batch x max_length positions)."""
    import pandas as pd

    shape = model_shape(model_config(preset))
    rows = []
    for name, setting in lora_settings(tokens_per_gpu, rank, targets, capacity_gib, frozen_base).items():
        plan = plan_memory(shape, setting)
        budget = largest_fitting_tokens(shape, setting)
        rows.append({
            "setting": name, "tokens_per_gpu": tokens_per_gpu, **{k: round(v, 2) for k, v in plan.gib().items()},
            "fits": plan.fits, "largest_token_budget": budget, f"largest_batch_x{max_length}": budget // max_length,
            "host_gib_at_largest": round(host_offload_bytes(shape, dataclasses.replace(
                setting, tokens_per_gpu=max(budget, 1))) / GIB, 2) if budget else 0.0,
        })  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.attrs.update(preset=preset, capacity_gib=capacity_gib, rank=rank, targets=targets, frozen_base=frozen_base)
    return frame


def lora_fit_sentence(frame: Any) -> str:
    """One sentence from :func:`lora_fit_frame`: the preset, the capacity and what fits with which setting."""
    attrs = frame.attrs
    fitting = frame[frame["largest_token_budget"] > 0]
    if fitting.empty:
        return f"{attrs['preset']} with LoRA r{attrs['rank']} fits {attrs['capacity_gib']:g} GiB in no setting."
    best = fitting.loc[fitting["largest_token_budget"].idxmax()]
    plain = frame.iloc[0]
    host = f" with {best['host_gib_at_largest']:,.1f} GiB of host memory" if best["host_gib_at_largest"] else ""
    return (
        f"{attrs['preset']} with LoRA r{attrs['rank']} ({attrs['targets']}) on {attrs['capacity_gib']:g} GiB: the "
        f"frozen base and adapter state take {plain['parameters'] + plain['gradients'] + plain['optimizer']:.1f} GiB; "
        f"{plain['setting']} fits {int(plain['largest_token_budget']):,} tokens a step, {best['setting']} "
        f"{int(best['largest_token_budget']):,}{host}."
    )


@dataclass(frozen=True, repr=False)
class LoraFit:
    """What fits one GPU with LoRA for a model (:func:`lora_fit_frame`) and its sentence; a notebook shows both."""

    frame: Any
    sentence: str

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.sentence)}</p>\n" + self.frame.to_html(index=False)

    def __repr__(self) -> str:
        return self.sentence + "\n" + self.frame.to_string(index=False)


def lora_fit_for(
    model: str,
    adapter: AdapterSettings,
    max_length: int,
    tokens_per_gpu: int,
    capacity_gib: float = H200_USABLE_GIB,
) -> LoraFit | None:
    """The LoRA fit of ``model`` with the adapter's rank and targets (a notebook's ADAPTER, LORA_RANK,
    LORA_TARGETS) on one GPU of ``capacity_gib``: :func:`lora_fit_frame` and :func:`lora_fit_sentence`, or None
    without an adapter (the whole model trains: the memory planner's full fine-tuning rows say what fits)."""
    if not adapter.active:
        return None
    frame = lora_fit_frame(
        model, max_length, tokens_per_gpu, adapter.rank, adapter.targets, capacity_gib, adapter.frozen_base
    )
    return LoraFit(frame, lora_fit_sentence(frame))
