"""docs/results.md's tables of rows from one job on the same batches that differ in one part of the step: LoRA's
forward (PEFT's, the product in the GEMM, one autograd function per LoRA linear), or the float8 base's cast."""

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


def same_job_rows(shelf: c.Shelf, file: str, labelled: Sequence[tuple[str, str]],
                  categories: Sequence[str]) -> list[list[str]]:  # fmt: skip
    """Rows of one job on the same batches, the first the reference: each one's speed, its ratio to the first, and
    where its traced step's time went (``categories``' kernel time, launches)."""
    records = [(label, shelf((file, record_id))) for label, record_id in labelled]
    first = records[0][1]
    return [[label, c.tok_s_interval(r), "1.00x" if r is first else f"{c.ratio(r, first)} {c.ratio_interval(r, first)}",
             f"{c.metric(r, 'trace_wall_us') / 1e3:,.0f}", f"{c.metric(r, 'trace_busy_us') / 1e3:,.0f}",
             *(c.category_ms(r, category) for category in categories),
             f"{c.metric(r, 'trace_launches_per_step'):,.0f}", c.timed_steps(r)]
            for label, r in records]  # fmt: skip


def same_job_headers(title: str, reference: str, categories: Sequence[str]) -> list[str]:
    return [title, "real tok/s (95% interval)", f"vs {reference}, same job", "traced step ms", "GPU busy ms",
            *(f"{name} ms" for name in categories), "launches", "timed steps"]  # fmt: skip


def forward_pairs(shelf: c.Shelf, pairs: Sequence[tuple[str, str, str, tuple[str, str]]], reference: str,
                  title: str) -> str:  # fmt: skip
    """Pairs of rows from one job on the same batches that differ only in LoRA's forward: the ``reference`` form's
    record first, then the other form's, with their speed and where their traced step's time went."""
    table = [row for model, form, file, (before, after) in pairs
             for row in same_job_rows(shelf, file, ((f"{model}: {reference}", before), (f"{model}: {form}", after)),
                                      EPILOGUE_CATEGORIES)]  # fmt: skip
    return markdown(same_job_headers(title, reference, EPILOGUE_CATEGORIES), table)


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


# The float8 frozen base's per-row cast of each GEMM's other operand: compiled, and the eager ops it replaced; two
# jobs on H100s, each against its own bf16 row: 9f8f51c (the cast compiled), 1f083ad (the backward's transposed weight
# copy compiled too, one cast for the GEMMs that read one activation)
FLOAT8_CAST_H100 = (
    ("qwen3-8b/float8-cast/fused-and-eager/fused-and-eager.jsonl", (
        ("bf16 base", "1999d9229b80"), ("float8 base, the cast compiled (9f8f51c)", "a88e46cf7b28"),
        ("float8 base, the eager cast", "9d3d0098d4f5"))),
    ("qwen3-8b/float8-cast/transposed-copy-and-shared-cast/fused-and-eager.jsonl", (
        ("bf16 base, second job", "e4eca8187962"),
        ("float8 base, the cast and the transposed copy compiled, one cast per activation (1f083ad)", "9b2d2f82abbd"),
        ("float8 base, the eager cast, second job", "07d749f037ca"))),
)  # fmt: skip
FLOAT8_CAST_CATEGORIES = ("GEMM", "elementwise", "Triton/Liger")


def float8_cast_h100(shelf: c.Shelf) -> str:
    """Qwen3-8B's best LoRA row over the bf16 base and over the float8 base with each cast, each job's rows against
    its own bf16 row."""
    return markdown(same_job_headers("Qwen3-8B LoRA r16 (Liger, `torch_varlen`, 79 GiB cap): frozen base",
                                     "the bf16 base", FLOAT8_CAST_CATEGORIES),
                    [row for file, labelled in FLOAT8_CAST_H100
                     for row in same_job_rows(shelf, file, labelled, FLOAT8_CAST_CATEGORIES)])  # fmt: skip
