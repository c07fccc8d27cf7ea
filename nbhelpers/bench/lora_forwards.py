"""Rows that differ only in their LoRA forward (``RunConfig.lora_epilogue``), each named in its label and profiled,
so that one job times the forwards on the same batches."""

from __future__ import annotations

from nbhelpers.measure.config import RunConfig

# Each LoRA forward as a row label names it (config.LORA_EPILOGUES).
LORA_FORWARD_NAMES = {"peft": "PEFT's scale and add", "fused": "scale and add in the GEMM",
                      "function": "each LoRA linear one autograd function"}  # fmt: skip


def epilogue_rows(pick: RunConfig, forwards: tuple[str, ...] = ("peft", "fused")) -> list[RunConfig]:
    """``pick`` with each LoRA forward of ``forwards`` in order (default: PEFT's scale and add, then in the GEMM);
    each profiled after its timed steps (elementwise time, launches)."""
    return [pick.replace(label=f"{pick.label}, {LORA_FORWARD_NAMES[f]}", lora_epilogue=f, profile=True)
            for f in forwards]  # fmt: skip


__all__ = ["LORA_FORWARD_NAMES", "epilogue_rows"]
