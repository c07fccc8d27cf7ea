"""docs/results.md's tables of rows that differ only in LoRA's forward (PEFT's, the product in the GEMM, one autograd
function per LoRA linear), each pair from one job on the same batches."""

from __future__ import annotations

from collections.abc import Sequence

from . import cells as c
from .page import markdown

LORA_EPILOGUE_H100 = (
    ("1.7B", "in the GEMM, added into a view", "qwen3-1.7b/lora-epilogue/view-copies/pick.jsonl",
     ("6ede9e90b613", "65394662e999")),
    ("1.7B", "in the GEMM, added into its own output", "qwen3-1.7b/lora-epilogue/own-output/pick.jsonl",
     ("5f47ca9431f1", "13a536cf5a53")),
    ("8B", "in the GEMM, added into a view", "qwen3-8b/lora-epilogue/view-copies/pick.jsonl",
     ("4ac0efb295f3", "734abaedcaa8")),
    ("8B", "in the GEMM, added into its own output", "qwen3-8b/lora-epilogue/own-output/pick.jsonl",
     ("08505d35a22b", "f332fb3d33e8")),
    ("27B hybrid, every layer recomputed", "in the GEMM, added into its own output",
     "hybrid/qwen3.8-27b-lora/lora-epilogue/own-output/pick.jsonl", ("0f933be4a6f4", "1cae7dbda480")),
)  # fmt: skip
EPILOGUE_CATEGORIES = ("GEMM", "elementwise", "memcpy/memset")


def forward_pairs(shelf: c.Shelf, pairs: Sequence[tuple[str, str, str, tuple[str, str]]], reference: str,
                  title: str) -> str:  # fmt: skip
    """Pairs of rows from one job on the same batches that differ only in LoRA's forward: the ``reference`` form's
    record first, then the other form's, with their speed and where their traced step's time went."""
    table = []
    for model, form, file, ids in pairs:
        before, after = (shelf((file, record_id)) for record_id in ids)
        for name, r in ((reference, before), (form, after)):
            vs = "1.00x" if r is before else f"{c.ratio(r, before)} {c.ratio_interval(r, before)}"
            table.append([f"{model}: {name}", c.tok_s_interval(r), vs, f"{c.metric(r, 'trace_wall_us') / 1e3:,.0f}",
                          f"{c.metric(r, 'trace_busy_us') / 1e3:,.0f}",
                          *(c.category_ms(r, category) for category in EPILOGUE_CATEGORIES),
                          f"{c.metric(r, 'trace_launches_per_step'):,.0f}", c.timed_steps(r)])  # fmt: skip
    headers = [title, "real tok/s (95% interval)", f"vs {reference}, same job", "traced step ms", "GPU busy ms",
               *(f"{name} ms" for name in EPILOGUE_CATEGORIES), "launches", "timed steps"]  # fmt: skip
    return markdown(headers, table)


def lora_epilogue_h100(shelf: c.Shelf) -> str:
    """PEFT's LoRA scale and add against each fused form (its add in place on a view, then into the base layer's own
    output), each pair from one job on the same batches."""
    return forward_pairs(shelf, LORA_EPILOGUE_H100, "PEFT's scale and add",
                         "model: LoRA's scale and add (r16, all-linear, Liger, `torch_varlen`)")  # fmt: skip


# Each LoRA linear as one autograd function against LoRA's product in the GEMM (`lora_epilogue` "function", "fused")
LORA_FUNCTION_H100 = (
    ("8B, NF4 base, 24 GiB, every 2nd layer recomputed", "each LoRA linear one autograd function",
     "qwen3-8b/memory-caps/24-gib-function.jsonl", ("ef6a181ebe87", "88bf36ca1509")),
    ("27B hybrid, NF4 base, 24 GiB, every layer recomputed", "each LoRA linear one autograd function",
     "hybrid/qwen3.8-27b-lora/memory-caps/48-gib-and-24-gib-function/24-gib-function.jsonl",
     ("e189fa761439", "2e26cf55b69c")),
)  # fmt: skip


def lora_function_h100(shelf: c.Shelf) -> str:
    """LoRA's product in the GEMM against each LoRA linear as one autograd function, one job, the same batches."""
    return forward_pairs(shelf, LORA_FUNCTION_H100, "the product in the GEMM",
                         "model: LoRA's forward (r16, all-linear, Liger, `torch_varlen`)")  # fmt: skip
