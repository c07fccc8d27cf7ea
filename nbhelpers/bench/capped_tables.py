"""docs/results.md's tables of the 27B with LoRA under memory caps of 24, 48 and 79 GiB (a smaller GPU on an H100):
each row's rate over each reference measured at that cap (transformers' reference path, Unsloth, TRL's defaults),
its peak and planned memory; a failed row says why."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from nbhelpers.kernels.registry import BASELINE_BACKEND
from nbhelpers.measure.engines import WORKBOOK
from nbhelpers.measure.store import RunRecord

from . import cells as c
from .page import markdown

CAPS_27B = "hybrid/qwen3.8-27b-lora/memory-caps/"  # each cap's records, in a subfolder per job

# The 27B under a 24 GiB cap (2026-12-06, three jobs on H100s): the first (fbd1d8f) ran every row; its 4-bit builds
# ran out of memory while quantizing (each replaced bf16 linear was kept to the end); the second (6d4fdbe, fixed) ran
# the workbook's 4-bit row alone; the third (0755032-10da335, one machine) TRL's two rows, then the 4-bit row with
# LoRA's product in the GEMM and with PEFT's forward, then the first again with a profiled step. Same samples: 38,889
# real tokens in each workbook and Unsloth row's 12 timed steps (TRL: the same 32 samples, two epochs of 8 steps).
CAPS_27B_24_ROWS = (
    ("the workbook's pick: NF4 linears, the rest bf16, fla + Liger, `torch_varlen`, LoRA's product in the GEMM "
     "(third job)", "epilogue-and-trl/24-gib-epilogue", "95fd0390211a"),
    ("the same, PEFT's scale, clone and add (third job)", "epilogue-and-trl/24-gib-epilogue", "7d8a39c3d45c"),
    ("the pick again, one step profiled after its timed ones (third job)", "epilogue-and-trl/24-gib-profile",
     "97a19671e0b5"),
    ("PEFT's forward, second job", "freed-as-replaced/24-gib-workbook", "5f4619409027"),
    ("PEFT's forward, first job (the originals kept while quantizing)", "originals-held/24-gib", "2d6770e06417"),
    ("Unsloth: `FastLanguageModel`, `load_in_4bit`, its LoRA, its checkpointing, packing (first job)",
     "originals-held/24-gib", "790b677bbf78"),
    ("TRL `SFTTrainer` at its defaults on the same 4-bit base (third job)", "epilogue-and-trl/24-gib-trl",
     "5bd31ec88d78"),
    ("TRL's best flags on the same 4-bit base (third job)", "epilogue-and-trl/24-gib-trl", "d2a723154556"),
    ("transformers' reference path, bf16 base", "originals-held/24-gib", "033770dd304b"),
    ("fla + Liger, bf16 base", "originals-held/24-gib", "169687c9ed79"),
    ("fla + Liger, NF4 base with PEFT's fp32 upcast", "originals-held/24-gib", "dbb649a0f479"),
    ("fla + Liger, float8 base", "originals-held/24-gib", "7d6ce5d2dc4d"),
)  # fmt: skip


# The 27B under a 48 GiB cap (2026-12-07, one job on an H100, c2ba40f): the workbook's rows and the planner's refusals,
# then TRL's rows on the same 4-bit base; Unsloth's row failed at once (its wheels were not carried in that call).
CAPS_27B_48_ROWS = (
    ("the workbook's pick: NF4 linears, the rest bf16, fla + Liger, `torch_varlen`, LoRA's product in the GEMM",
     "48-gib-and-24-gib-function/48-gib-workbook", "082fcf010c83"),
    ("fla + Liger, NF4 base with PEFT's fp32 upcast", "48-gib-and-24-gib-function/48-gib-workbook", "dbe35ef10982"),
    ("fla + Liger, float8 base", "48-gib-and-24-gib-function/48-gib-workbook", "b76ea03a15ba"),
    ("Unsloth: `FastLanguageModel`, `load_in_4bit`, its LoRA, its checkpointing, packing (second job, another H100)",
     "48-gib-unsloth/48-gib-peers", "73e28ec0e8ad"),
    ("TRL `SFTTrainer` at its defaults on the same 4-bit base", "48-gib-and-24-gib-function/48-gib-peers",
     "1ff468974e7d"),
    ("the same, second job", "48-gib-unsloth/48-gib-peers", "e584cf125571"),
    ("TRL's best flags on the same 4-bit base", "48-gib-and-24-gib-function/48-gib-peers", "c4217b962f1f"),
    ("transformers' reference path, bf16 base", "48-gib-and-24-gib-function/48-gib-workbook", "b00edf31dfae"),
    ("fla + Liger, bf16 base", "48-gib-and-24-gib-function/48-gib-workbook", "7dd90d544b97"),
)  # fmt: skip


# The 27B under a 79 GiB cap (2026-12-07, one H100, 1f083ad): two jobs on one machine, 79-gib-tokens (the 4-bit row
# at 4,096 tokens with every 4th layer recomputed, the planner's pick then, and at 16,384 with every layer) and
# 79-gib-workbook (the workbook's rows and the reference path); Unsloth's and TRL's rows at this cap (79-gib-peers)
# were not run.
CAPS_27B_79_ROWS = (
    ("the workbook's pick: NF4 linears, the rest bf16, fla + Liger, `torch_varlen`, LoRA's product in the GEMM, every "
     "layer recomputed (as the planner now picks it)", "79-gib-tokens/79-gib-tokens", "7cd850d038e2"),
    ("the same at 4,096 tokens, every 4th layer recomputed (the planner's pick before)", "79-gib-tokens/79-gib-tokens",
     "e572f77777a6"),
    ("the same, second job", "79-gib-workbook/79-gib-workbook", "ed98b7e90297"),
    ("fla + Liger, bf16 base, every layer recomputed", "79-gib-workbook/79-gib-workbook", "1370e12fef2c"),
    ("fla + Liger, float8 base, every 2nd layer recomputed", "79-gib-workbook/79-gib-workbook", "7539501f87ba"),
    ("fla + Liger, NF4 base with PEFT's fp32 upcast, every 2nd layer recomputed", "79-gib-workbook/79-gib-workbook",
     "f5c85afdba89"),
    ("transformers' reference path, bf16 base, static rows, every layer recomputed", "79-gib-workbook/79-gib-workbook",
     "04d3ae7759e8"),
)  # fmt: skip


# The 27B under a 24 GiB cap with each layer's input offloaded to the host (2026-12-07, one job on an H100, cb792d0):
# the 4-bit row at the planner's 12,288 tokens offloaded, at the 4,096 measured before with every layer recomputed on
# the GPU (profiled) and offloaded, the pair on 128 samples; then Unsloth on the 32 samples at 12,288 tokens a step.
# A second job (one H100, 0c4c252): the pick on 128 samples with the prefetch and without (both profiled), then Unsloth
# on those 128 samples. A third job (one H100, a7c5792): the pick on those samples with fla's boundaries shared and made
# per call, both profiled.
CAPS_27B_24_OFFLOAD_ROWS = (
    ("the workbook's pick: NF4 linears, the rest bf16, fla + Liger, `torch_varlen`, LoRA's product in the GEMM, each "
     "layer's input offloaded to the host, 12,288 tokens", "24-gib-offload/24-gib-offload", "7ddd8f3ee5c3"),
    ("Unsloth at the same 12,288 tokens a step: `FastLanguageModel`, `load_in_4bit`, its LoRA, its checkpointing "
     "(which offloads too), packing", "24-gib-offload/24-gib-offload-unsloth", "910ad29995f5"),
    ("the same 4-bit row at 4,096 tokens, every layer recomputed, inputs kept on the GPU (as measured before)",
     "24-gib-offload/24-gib-offload", "0679c9d9601a"),
    ("the same at 4,096 tokens, inputs offloaded", "24-gib-offload/24-gib-offload", "ea53ed5bc6bc"),
    ("the pick on 128 samples", "24-gib-offload/24-gib-offload", "07907f3584d7"),
    ("4,096 tokens, inputs on the GPU, on 128 samples", "24-gib-offload/24-gib-offload", "eb4d5296333f"),
    ("the pick on 128 samples, second job: each input's copy back started under the layer after it (prefetch)",
     "24-gib-offload-128/24-gib-offload-prefetch", "f68c28dff2c0"),
    ("the same, each input copied back when the recompute asks for it", "24-gib-offload-128/24-gib-offload-prefetch",
     "157b82a95219"),
    ("Unsloth on the 128 samples at 12,288 tokens a step, second job", "24-gib-offload-128/24-gib-offload-unsloth-128",
     "032c1fba5f84"),
    ("the pick on 128 samples, third job: fla's boundaries built once a row and shared by every layer (the default)",
     "24-gib-offload-fla-boundaries/24-gib-offload-fla-boundaries", "6dfde9203613"),
    ("the same, fla's boundaries made in each call (as in every job before)",
     "24-gib-offload-fla-boundaries/24-gib-offload-fla-boundaries", "d312d8a743c6"),
)  # fmt: skip


REFERENCES = (  # the rows a cap's rates are shown against, where the cap's table has them measured
    ("the reference path",
     lambda r: r.config.get("engine", WORKBOOK) == WORKBOOK and r.config["kernels"] == BASELINE_BACKEND),
    ("Unsloth", lambda r: r.config.get("engine") == "unsloth"),
    ("TRL's defaults", lambda r: r.config.get("engine") == "trl_defaults"),
)  # fmt: skip


def same_samples(record: RunRecord, reference: RunRecord) -> bool:
    """Whether two rows trained on the same samples (a rate divides by another only then)."""
    return (record.config.get("num_samples"), record.config.get("seed")) == (
        reference.config.get("num_samples"), reference.config.get("seed"))  # fmt: skip


def capped_27b_table(shelf: c.Shelf, labelled: Sequence[tuple[str, str, str]], cap_gib: int) -> str:
    """The 27B with LoRA under one cap: each row's rate over each reference the cap's rows measured (the first
    measured row of each kind on the row's samples), peak and planned memory; a failed row says why (the planner's
    refusals name its peak)."""
    from nbhelpers.analysis.memory_plan import planned_vs_measured

    rows = [(label, shelf((f"{CAPS_27B}{file}.jsonl", i))) for label, file, i in labelled]
    measured = [r for _, r in rows if r.ok]
    references = [(name, test) for name, test in REFERENCES if any(test(r) for r in measured)]

    def reference_for(record: RunRecord, test: Callable[[RunRecord], bool]) -> RunRecord | None:
        """The first measured row of a reference's kind on the record's samples."""
        return next((r for r in measured if test(r) and same_samples(record, r)), None)

    table = []
    for label, r in rows:
        if not r.ok:
            refused = re.search(r"the memory planner puts this step's peak at ([\d.]+) GiB", r.reason)
            why = f"refused: planned peak {refused.group(1)} GiB" if refused else f"failed: {c.failure(r)}"
            table.append([label, why, *[""] * (len(references) + 3), c.budget(r), ""])
            continue
        pick = r is rows[0][1]
        workbook = r.config.get("engine", WORKBOOK) == WORKBOOK
        planned = planned_vs_measured([r])["planned_gib"].iloc[0] if workbook else None
        ratios = [c.ratio(r, reference) if (reference := reference_for(r, test)) else "" for _, test in references]
        table.append([label, c.tok_s_interval(r, emphasis=pick), *(c.bold(x) if pick and x else x for x in ratios),
                      c.share(r, "mfu"), c.gib(r), "" if planned is None else f"{planned:.1f}", c.budget(r),
                      c.timed_steps(r)])  # fmt: skip
    headers = [f"row ({cap_gib} GiB cap, LoRA r16 all-linear)", "real tok/s (95% interval)",
               *(f"vs {name}" for name, _ in references), "MFU", "peak GiB", "planned GiB", "token budget",
               "timed steps"]  # fmt: skip
    return markdown(headers, table)


def memory_caps_27b_h100(shelf: c.Shelf) -> str:
    """The 27B with LoRA under 24 GiB, three jobs."""
    return capped_27b_table(shelf, CAPS_27B_24_ROWS, 24)


def memory_caps_27b_48_h100(shelf: c.Shelf) -> str:
    """The 27B with LoRA under 48 GiB, two jobs (Unsloth's row in the second)."""
    return capped_27b_table(shelf, CAPS_27B_48_ROWS, 48)


def memory_caps_27b_79_h100(shelf: c.Shelf) -> str:
    """The 27B with LoRA under 79 GiB, two jobs on one machine (the peers' rows not yet run)."""
    return capped_27b_table(shelf, CAPS_27B_79_ROWS, 79)


def memory_caps_27b_24_offload_h100(shelf: c.Shelf) -> str:
    """The 27B with LoRA under 24 GiB with offloaded checkpoints beside Unsloth at the same tokens, two jobs."""
    return capped_27b_table(shelf, CAPS_27B_24_OFFLOAD_ROWS, 24)
