"""docs/results.md's tables, written from the shipped records: every number in them is read from a record here.

    python -m nbhelpers.bench.tables            # rewrite the tables between their markers in docs/results.md
    python -m nbhelpers.bench.tables --check    # exit 1 naming each table that differs from its records

A table is a function of the records it names by (file, record id); its row labels are words, and where a label
carries a number (a token budget) that number is read from the record's configuration too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from nbhelpers.measure.engines import WORKBOOK
from nbhelpers.measure.store import RunRecord
from nbhelpers.resources import REPO_ROOT

from . import cells as c
from .capped_tables import (
    memory_caps_27b_24_offload_h100,
    memory_caps_27b_48_h100,
    memory_caps_27b_79_h100,
    memory_caps_27b_h100,
)
from .forward_tables import float8_cast_h100, lora_epilogue_h100, lora_function_h100
from .page import fill, markdown, stale

GPU = REPO_ROOT / "benchmarks" / "gpu"
PAGE = REPO_ROOT / "docs" / "results.md"
Table = Callable[[c.Shelf], str]

EPOCH = "qwen3-1.7b/padding-strategies-epoch/"
MACHINES = ("qwen3-1.7b/gpu-command/defaults-2c2a12f-machine-a/records.jsonl",
            "qwen3-1.7b/gpu-command/defaults-2c2a12f-machine-b/records.jsonl")  # fmt: skip
HEADLINE = "hybrid/qwen3.5-2b/fused-kernels/hybrid-headline-b4.jsonl"
LORA_27B = "hybrid/qwen3.8-27b-lora/fused-path/lora-27b.jsonl"
MFU_27B = "hybrid/qwen3.8-27b-lora/toward-35-mfu/"
WHOLE_27B = "hybrid/qwen3.8-27b-lora/gpu-command/whole-sequence/records.jsonl"
PARITY_27B = ("hybrid/qwen3.8-27b-lora/fused-path/lora-27b-parity.jsonl", "17546f4e6e0e")  # the fastest row's probe


def parity(record: RunRecord) -> str:
    """:func:`cells.parity`, and "not judged" for a peer's row (TRL's: no parity probe)."""
    return "not judged" if record.config.get("engine", WORKBOOK) != WORKBOOK else c.parity(record)


def padding_strategies(shelf: c.Shelf) -> str:
    base = shelf((EPOCH + "padding-epoch-default.jsonl", "3212bd252b72"))
    rows = (
        ("static pad to 2048, SDPA", "padding-epoch-default", "3212bd252b72", False),
        ("pad to longest, SDPA", "padding-epoch-default", "6bf5ed63f397", False),
        ("pad to a multiple of 8, SDPA", "padding-epoch-default", "a0d26fbd9af9", False),
        ("pad to longest, flex_attention", "padding-epoch-flex-rest-liger-packed", "af162cecaa36", False),
        ("length-grouped buckets, SDPA", "padding-epoch-default", "94aac8628381", False),
        ("length-grouped buckets, flex_attention", "padding-epoch-flex-rest-liger-packed", "4128321b974f", False),
        ("packed (padding-free), SDPA", "padding-epoch-default", "2af0192a32ea", False),
        ("packed, flex_attention", "padding-epoch-default", "4ff68885db21", False),
        ("packed, `torch_varlen`", "varlen-epoch-liger-no-flce", "ac7a0fcca256", True),
        ("token budget {}, SDPA", "padding-epoch-default", "a38085dbcffe", False),
        ("token budget {}, flex_attention", "token-budget-epoch-flex", "622fc277c1eb", False),
        ("token budget {}, `torch_varlen`", "token-budget-epoch-varlen", "17e1f54cb6e8", True),
    )  # fmt: skip
    table = []
    for label, file, record_id, best in rows:
        r = shelf((f"{EPOCH}{file}.jsonl", record_id))
        speed, vs = c.tok_s(r), c.ratio(r, base)
        table.append([label.format(c.budget(r)), c.bold(speed) if best else speed, c.bold(vs) if best else vs,
                      c.share(r, "padding_fraction", 0), c.gib(r), c.parity(r, reference=r is base)])  # fmt: skip
    return markdown(["strategy, attention", "real tok/s", "vs static SDPA", "padding", "peak GiB", "parity"], table)


def gpu_command(shelf: c.Shelf) -> str:
    ids = (  # baseline, the pick, TRL from the export, TRL defaults, TRL best flags, the convergence pair
        "d28dd746d369 e9f33b25d3a3 31e3d58f6f4b b659eb9c706c 6bdb24029078 adc6aa4a4112 9ef5fabe0536".split(),
        "cc179602eda8 c32d802ec352 83b15dfd71ff 7d2f263305f7 fab00d710eb8 3254691a5315 c8b56889a048".split(),
    )
    columns = []
    for file, run in zip(MACHINES, ids):
        base, pick, export, defaults, best, curve, curve_base = (shelf((file, i)) for i in run)
        pct = 100 * c.metric(export, "real_tokens_per_s") / c.metric(pick, "real_tokens_per_s")
        thin = sum(1 for r in shelf.records(file).values() if r.metrics.get("thin"))
        columns.append([
            f"{c.tok_s_interval(base)}, {c.timed_steps(base)} timed steps",
            f"{c.tok_s_interval(pick, emphasis=True)} = "
            f"{c.bold(c.ratio(pick, base))} {c.ratio_interval(pick, base)}, MFU {c.share(pick, 'mfu')}, "
            f"{c.timed_steps(pick)} timed steps",
            f"{c.tok_s(export)} = {c.bold(f'{pct:.1f}%')} of the pick, {c.timed_steps(export)} timed steps",
            f"{c.tok_s(defaults)} / {c.tok_s(best)} ({c.timed_steps(defaults)} and {c.timed_steps(best)} timed steps)",
            f"{c.curves(curve, curve_base)}, {len(c.metric(curve, 'losses'))} steps",
            str(thin) if thin else "none",
        ])  # fmt: skip
    labels = ("baseline (eager, static, SDPA)", "the pick: Liger without its fused linear CE + token budget + "
              "`torch_varlen`", "TRL's `SFTTrainer` from the export", "TRL defaults / best flags",
              "convergence pair (recommendation vs baseline)", "thin records")  # fmt: skip
    rows = [[label, *(column[i] for column in columns)] for i, label in enumerate(labels)]
    return markdown(["", "machine a", "machine b"], rows)


def frontier(shelf: c.Shelf) -> str:
    rows = (
        ("Qwen3-1.7B shape, batch 8 x 2048, bf16 weights + fp32 master state",
         "Liger's cross-entropy + regional compile", "qwen3-1.7b/bf16-master/cce-filter-off.jsonl", "e720950ce289",
         "c93ac094e793"),
        ("Qwen3-8B, batch 4 x 2048 (token budget {}), pure bf16", "float8 + Liger's cross-entropy + regional compile",
         "qwen3-8b/kernel-entries-token-budget/float8-padded-rows.jsonl", "510247da3d6f", "de8158728d45"),
        ("Qwen3-8B, the same, bf16 matmuls", "Liger's cross-entropy + regional compile",
         "qwen3-8b/kernel-entries-token-budget/bf16-matmuls-profiled.jsonl", "430966f4e942", "e06180befb7a"),
    )  # fmt: skip
    table = []
    for workload, row, file, record_id, base_id in rows:
        r, base = shelf((file, record_id)), shelf((file, base_id))
        tolerance = (r.metrics.get("parity") or {}).get("tolerance")
        table.append([workload.format(c.budget(r)), row, c.bold(c.tok_s_interval(r)), c.ratio(r, base),
                      c.share(r, "mfu"), f"{c.parity(r)} (tolerance {tolerance:g})"])  # fmt: skip
    return markdown(["workload", "best row", "real tok/s (95% interval)", "vs padded baseline", "MFU", "parity"], table)


def hybrid_headline(shelf: c.Shelf) -> str:
    base = shelf((HEADLINE, "512ddc549c14"))
    rows = (
        ("reference PyTorch path (no fla), static pad 2048", "512ddc549c14"), ("fla, static pad 2048", "8bb1a3be0790"),
        ("fla, packed with sequence boundaries", "0ec4960faf71"),
        ("fla + Liger (rms_norm, swiglu, cross_entropy), token budget {}", "d85e65793f3f"),
    )  # fmt: skip
    table = []
    for label, record_id in rows:
        r = shelf((HEADLINE, record_id))
        best = record_id == rows[-1][1]
        table.append([label.format(c.budget(r)), c.bold(c.tok_s(r)) if best else c.tok_s(r),
                      c.bold(c.ratio(r, base)) if best else c.ratio(r, base),
                      c.launches(r, None if r is base else base), c.gib(r), c.share(r, "mfu"),
                      c.parity(r)])  # fmt: skip
    headers = ["kernels, strategy", "real tok/s", "vs reference static", "launches/step", "peak GiB", "MFU", "parity"]
    return markdown(headers, table)


def lora(shelf: c.Shelf) -> str:
    rows = (
        ("27B: reference path, static, full", LORA_27B, "7ab7bd02eba2", None),
        ("27B: fla + Liger (fused linear CE), token budget {}, full", LORA_27B, "31535777d25b", None),
        ("27B: fla, token budget {}, full", LORA_27B, "2a66e9858818", None),
        ("27B: fla + Liger (fused linear CE), token budget {}, every 2nd layer", LORA_27B, "78046dba4e29", PARITY_27B),
        ("8B: eager, static, none", "qwen3-8b/lora/lora-8b.jsonl", "f4fb8b51d964", None),
        ("8B: Liger, token budget, `torch_varlen`, none", "qwen3-8b/lora/lora-8b.jsonl", "be4010580540", None),
        ("2B hybrid: reference path, static, none", "hybrid/qwen3.5-2b/lora/lora-2b.jsonl", "ffebc27b3b05", None),
        ("2B hybrid: fla + Liger (fused linear CE), token budget, none", "hybrid/qwen3.5-2b/lora/lora-2b.jsonl",
         "caa52fb51101", None),
    )  # fmt: skip
    table, base = [], None
    for label, file, record_id, rerun in rows:
        r = shelf((file, record_id))
        base = r if c.parity(r) == "reference" else base
        verdict = c.parity(r)
        if rerun is not None:  # judged again by the parity suite's own run of the same row
            verdict = f"{c.parity(shelf(rerun))} (probe rerun)"
        best = record_id == "78046dba4e29"
        table.append([label.format(c.budget(r)), c.bold(c.tok_s(r)) if best else c.tok_s(r),
                      c.bold(c.ratio(r, base, 1)) if best else c.ratio(r, base, 1), c.share(r, "mfu"),
                      c.launches(r), c.gib(r), c.timed_steps(r), verdict])  # fmt: skip
    headers = ["model: kernels, strategy, checkpointing", "real tok/s", "vs baseline", "LoRA MFU", "launches/step",
               "peak GiB", "timed steps", "parity"]  # fmt: skip
    return markdown(headers, table)


def lora_27b_rows(shelf: c.Shelf, rows: Sequence[tuple[str, str, str, bool]], first_step: bool) -> list[list[str]]:
    """Rows of the 27B against its baseline of ``lora-27b-mfu.jsonl``; launches against the profiled baseline's."""
    base = shelf((MFU_27B + "lora-27b-mfu.jsonl", "0427330a19f8"))
    profiled = shelf((LORA_27B, "7ab7bd02eba2"))
    table = []
    for label, file, record_id, best in rows:
        r = shelf((MFU_27B + file, record_id))
        if not r.ok:
            table.append([label.format(c.budget(r)), f"{c.failure(r)} (a failed record)", *[""] * (5 + first_step)])
            continue
        speed, vs = c.tok_s_interval(r), f"{c.ratio(r, base, 1)} {c.ratio_interval(r, base, 1)}"
        cells = [label.format(c.budget(r)), c.bold(speed) if best else speed, c.bold(vs) if best else vs,
                 c.bold(c.share(r, "mfu")) if best else c.share(r, "mfu"), c.launches(r, profiled), c.gib(r)]
        table.append([*cells, *([c.seconds(r)] if first_step else []), c.parity(r)])  # fmt: skip
    return table


def lora_27b_mfu(shelf: c.Shelf) -> str:
    rows = (
        ("{}, varlen, every 2nd layer, cast", "lora-27b-mfu.jsonl", "129a38c952d1", False),
        ("{}, SDPA, every 2nd layer, uncast", "lora-27b-mfu.jsonl", "60ad9639f9b5", False),
        ("{}, varlen, every 2nd layer, uncast", "lora-27b-mfu.jsonl", "56b55cf9115d", False),
        ("{}, varlen, every 3rd layer, uncast", "lora-27b-larger-steps.jsonl", "063bf17b6e12", True),
        ("{}, varlen, every 2nd layer, uncast", "lora-27b-larger-steps.jsonl", "51f39e0b4a0c", False),
        ("{}, varlen, none, uncast", "lora-27b-mfu.jsonl", "53c4fc55b156", False),
    )  # fmt: skip
    headers = ["fla + Liger, token budget, attention, checkpointing, PEFT's cast", "real tok/s (95% interval)",
               "vs baseline", "LoRA MFU", "launches/step", "peak GiB", "parity"]  # fmt: skip
    return markdown(headers, lora_27b_rows(shelf, rows, first_step=False))


def lora_27b_fused_norm(shelf: c.Shelf) -> str:
    rows = (
        ("{}, every 3rd layer", "lora-27b-fused-norm.jsonl", "0ee997d57f9a", False),
        ("{}, every 4th layer", "lora-27b-fused-norm.jsonl", "28e285611b47", True),
        ("{}, every 3rd layer", "lora-27b-fused-norm.jsonl", "5d9030a80915", False),
        ("{}, every 6th layer", "lora-27b-fused-norm.jsonl", "374f7c2f4fca", False),
    )  # fmt: skip
    headers = ["fla + Liger, varlen, uncast; token budget, checkpointing", "real tok/s (95% interval)", "vs baseline",
               "LoRA MFU", "launches/step", "peak GiB", "first step", "parity"]  # fmt: skip
    return markdown(headers, lora_27b_rows(shelf, rows, first_step=True))


def lora_27b_notebooks(shelf: c.Shelf) -> str:
    base = shelf((WHOLE_27B, "fb59cac08aae"))
    rows = (
        ("reference path, static (the baseline)", "fb59cac08aae"), ("fla + Liger, static", "72c5ba199172"),
        ("reference path, token budget {}", "4ffe95325835"),
        ("fla + Liger, token budget {} (the tuner's pick)", "3ce74664ce8d"),
        ("TRL `SFTTrainer` from the export of the pick", "fa843b470f1a"),
    )  # fmt: skip
    table = []
    for label, record_id in rows:
        r = shelf((WHOLE_27B, record_id))
        best = record_id == "3ce74664ce8d"
        vs = c.ratio(r, base) + (f" {c.ratio_interval(r, base)}" if best else "")
        table.append([label.format(c.budget(r)), c.tok_s_interval(r, emphasis=best), c.bold(vs) if best else vs,
                      c.timed_steps(r), c.share(r, "mfu"),
                      c.launches(r), c.gib(r), "reference" if r is base else parity(r)])  # fmt: skip
    headers = ["configuration", "real tok/s (95% interval)", "vs baseline", "timed steps", "MFU", "launches/step",
               "peak GiB", "parity"]  # fmt: skip
    return markdown(headers, table)


# The H100 job beside the tools people pick (benchmarks/gpu/NOTES.md, 2026-12-06): per model, the pick, Unsloth,
# TRL's defaults ("without the workbook") and TRL's best flags on the same samples, in one job.
PEERS_H100 = (
    ("1.7B", "qwen3-1.7b/lora-peers/unsloth.jsonl", ("c07d8940fb19", "ed3f90b57eba", "b61b574d928f", "9fbdee6818d2")),
    ("8B", "qwen3-8b/lora-peers/unsloth.jsonl", ("abc18171d390", "2493bfd15aa5", "f26b1988a59b", "e31b8446dcd7")),
)  # fmt: skip
PEER_ROWS_H100 = (
    "the workbook's pick: Liger without its fused linear CE, token budget {}, `torch_varlen`",
    "Unsloth: `FastLanguageModel`, its LoRA, its checkpointing, packing",
    "TRL `SFTTrainer` at its defaults (without the workbook)",
    "TRL's best flags: padding-free + Liger, no checkpointing",
)
CAPS_H100 = ("qwen3-8b/memory-caps/best.jsonl", "068059f88265 01a5c710cf2e 02c2fa560f99 9de3da616258 5b975bc13d07 "
             "707998db4873 3f327d32c30c 4b64c6272929 14619f089bf1".split())  # fmt: skip


# The hybrids in a later job (2026-12-06): its device time ended during the 2B's TRL rows, so the 2B has two.
PEERS_HYBRID_H100 = (
    ("27B", "hybrid/qwen3.8-27b-lora/lora-peers/unsloth.jsonl",
     ("cd599e3e9663", "8cc996f39642", "a9fb6c018ae9", "1a976108889b")),
    ("2B", "hybrid/qwen3.5-2b/lora-peers/unsloth.jsonl", ("ef8f35bff8f8", "d4253dfde95e", None, None)),
)  # fmt: skip
PEER_ROWS_HYBRID_H100 = (
    "the workbook's pick: fla + Liger, token budget {}, `torch_varlen`, {}",
    "Unsloth: `FastModel` (compiled modeling, its fla kernels), its LoRA, its checkpointing, packing",
    "TRL `SFTTrainer` at its defaults, fla installed (without the workbook)",
    "TRL's best flags: padding-free + Liger, no checkpointing",
)


def recomputed(record: RunRecord) -> str:
    """The record's recomputation in words: ``every layer recomputed``, ``every 4th layer``, ``none recomputed``."""
    cfg = record.config
    k = cfg.get("checkpoint_every")
    return {"full": "every layer recomputed", "none": "none recomputed"}.get(
        cfg["activation_checkpointing"], f"every {k}{'nd' if k == 2 else 'rd' if k == 3 else 'th'} layer")


def peer_table(shelf: c.Shelf, groups: tuple, labels: tuple[str, ...]) -> str:
    """Per model, the pick, Unsloth, TRL's defaults and TRL's best flags with each rate over TRL's defaults and over
    Unsloth; a row whose record failed says why, and a model whose job ended first leaves its missing rows out."""
    table = []
    for model, file, ids in groups:
        pick, unsloth, without, trl_best = (shelf((file, i)) if i else None for i in ids)
        for label, r in zip(labels, (pick, unsloth, without, trl_best)):
            if r is None:
                continue
            name = f"{model}: {label.format(c.budget(r), recomputed(r))}"
            if not r.ok:
                table.append([name, f"failed: {c.failure(r)}", "", "", "", "", ""])
                continue
            best = r is pick
            vs_without = c.ratio(r, without) if without is not None else "not measured"
            vs_unsloth = c.ratio(r, unsloth)
            table.append([name, c.tok_s_interval(r, emphasis=best), c.bold(vs_without) if best else vs_without,
                          c.bold(vs_unsloth) if best else vs_unsloth, c.share(r, "mfu"), c.gib(r),
                          c.timed_steps(r)])  # fmt: skip
    headers = ["model: row", "real tok/s (95% interval)", "vs without the workbook", "vs Unsloth", "MFU", "peak GiB",
               "timed steps"]  # fmt: skip
    return markdown(headers, table)


def lora_peers_h100(shelf: c.Shelf) -> str:
    return peer_table(shelf, PEERS_H100, PEER_ROWS_H100)


def lora_peers_hybrid_h100(shelf: c.Shelf) -> str:
    return peer_table(shelf, PEERS_HYBRID_H100, PEER_ROWS_HYBRID_H100)


DELTA_RULE_COMPILE_H100 = (
    ("27B", "hybrid/qwen3.8-27b-lora/flashqla/pick.jsonl",
     ("8a21e75c2277", "d0b556f92230", "bcf7d5bf2ebc", "5ba9465b019d")),
    ("2B", "hybrid/qwen3.5-2b/regional-compile/unsloth.jsonl", ("d0635be13534", "c60d6e6df7bf", None, None)),
)  # fmt: skip
DELTA_RULE_COMPILE_ROWS = (
    "fla's delta rule",
    "fla's delta rule, decoder layers compiled one by one",
    "FlashQLA's delta rule",
    "FlashQLA's delta rule, decoder layers compiled one by one",
)


def delta_rule_compile_h100(shelf: c.Shelf) -> str:
    """Per model, the pick with each delta rule, uncompiled and compiled layer by layer, over the pick's rate."""
    table = []
    for model, file, ids in DELTA_RULE_COMPILE_H100:
        pick = shelf((file, ids[0]))
        for label, record_id in zip(DELTA_RULE_COMPILE_ROWS, ids):
            if record_id is None:
                continue
            r = shelf((file, record_id))
            vs = "1.00x" if r is pick else f"{c.ratio(r, pick)} {c.ratio_interval(r, pick)}"
            table.append([f"{model}: {label}", c.tok_s_interval(r, emphasis=r is pick), vs,
                          c.seconds(r), c.gib(r), c.timed_steps(r)])  # fmt: skip
    headers = ["model: row (fla + Liger, token budget 16,384, `torch_varlen`)", "real tok/s (95% interval)",
               "vs fla's, uncompiled", "first step", "peak GiB", "timed steps"]  # fmt: skip
    return markdown(headers, table)


PROFILE_27B_H100 = ("hybrid/qwen3.8-27b-lora/profile/unsloth.jsonl", ("519bdf5ff73e", "df5e5296212a"))
PROFILE_CATEGORIES = ("GEMM", "elementwise", "memcpy/memset", "Triton/Liger", "linear attention")


def profile_27b_h100(shelf: c.Shelf) -> str:
    """The 27B's pick and Unsloth, one step each traced after the timed ones: where the time of a step goes."""
    file, ids = PROFILE_27B_H100
    table = []
    for record_id in ids:
        r = shelf((file, record_id))
        table.append(["the workbook's pick" if r.config.get("engine", WORKBOOK) == WORKBOOK else "Unsloth",
                      c.tok_s_interval(r), f"{c.metric(r, 'trace_wall_us') / 1e3:,.0f}",
                      f"{c.metric(r, 'trace_busy_us') / 1e3:,.0f}", c.share(r, "trace_idle_share"),
                      f"{c.metric(r, 'trace_launches_per_step'):,.0f}",
                      *(c.category_ms(r, name) for name in PROFILE_CATEGORIES)])  # fmt: skip
    headers = ["row (27B LoRA r16, 16,384 tokens a step)", "real tok/s (95% interval)", "traced step ms",
               "kernels busy ms", "idle", "launches", *(f"{name} ms" for name in PROFILE_CATEGORIES)]  # fmt: skip
    return markdown(headers, table)


def memory_caps_h100(shelf: c.Shelf) -> str:
    from nbhelpers.analysis.memory_plan import planned_vs_measured

    file, ids = CAPS_H100
    table = []
    for record_id in ids:
        r = shelf((file, record_id))
        cfg = r.config
        kind = cfg["activation_checkpointing"]
        checkpointing = recomputed(r) if kind == "every_k" else kind
        row = [f"{cfg['gpu_memory_gib']:g}", cfg["frozen_base"], c.budget(r), checkpointing]
        if not r.ok:
            table.append([*row, f"failed: {c.failure(r)}", "", "", ""])
            continue
        planned = float(planned_vs_measured([r])["planned_gib"].iloc[0])
        table.append([*row, c.tok_s_interval(r), c.share(r, "mfu"), c.gib(r), f"{planned:.1f}"])
    headers = ["cap GiB", "frozen base", "token budget", "checkpointing", "real tok/s (95% interval)", "MFU",
               "peak GiB", "planned GiB"]  # fmt: skip
    return markdown(headers, table)


TABLES: dict[str, Table] = {
    "padding-strategies": padding_strategies, "gpu-command-defaults": gpu_command, "frontier-best-rows": frontier,
    "hybrid-headline": hybrid_headline, "lora": lora, "lora-27b-toward-35-mfu": lora_27b_mfu,
    "lora-27b-fused-norm": lora_27b_fused_norm, "lora-27b-notebooks": lora_27b_notebooks,
    "lora-peers-h100": lora_peers_h100, "lora-peers-hybrid-h100": lora_peers_hybrid_h100,
    "memory-caps-h100": memory_caps_h100, "delta-rule-compile-h100": delta_rule_compile_h100,
    "profile-27b-unsloth-h100": profile_27b_h100, "lora-epilogue-h100": lora_epilogue_h100,
    "lora-function-h100": lora_function_h100, "float8-cast-h100": float8_cast_h100,
    "memory-caps-27b-h100": memory_caps_27b_h100, "memory-caps-27b-48-h100": memory_caps_27b_48_h100,
    "memory-caps-27b-79-h100": memory_caps_27b_79_h100,
    "memory-caps-27b-24-offload-h100": memory_caps_27b_24_offload_h100,
}  # fmt: skip


def render(root: Path = GPU) -> dict[str, str]:
    """Every table of docs/results.md, from the records under ``root``."""
    shelf = c.Shelf(root)
    return {name: table(shelf) for name, table in TABLES.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbhelpers.bench.tables", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on a table unlike its records")
    parser.add_argument("--page", type=Path, default=PAGE)
    args = parser.parse_args(argv)
    text, tables = args.page.read_text(encoding="utf-8"), render()
    if args.check:
        differ = stale(text, tables)
        for name in differ:
            print(f"{args.page}: table {name} differs from its records (python -m nbhelpers.bench.tables)")
        return 1 if differ else 0
    args.page.write_text(fill(text, tables), encoding="utf-8")
    print(f"wrote {len(tables)} tables into {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
