"""Qwen3-8B shape on 1 and 2 H200s under FSDP2: the workbook's best configuration against plain FSDP2.

Usage (on the 2-GPU machine; NCCL's NVLink multicast off, as that machine sets):
    NCCL_NVLS_ENABLE=0 python benchmarks/gpu_fsdp_suite.py plain best --out DIR
Groups: plain (SDPA, eager kernels, a packed row of 8,192 tokens per GPU, bf16 weights: the reference
measured by hand before the workbook had FSDP2), best (torch_varlen, Liger without the fused linear
cross-entropy, token budgets per GPU, with and without activation checkpointing), hybrid (a slice of the
27B hybrid's width with fewer layers, when the hybrid family's preset named by --hybrid-model exists).
Each configuration runs under torchrun through the runner (one process per GPU) and its merged record
appends to DIR/<group>.jsonl as it lands (records written like benchmarks/gpu_suite.py: same report line,
same store); at the end the script prints each 2-GPU record's scaling efficiency against its 1-GPU record
and the memory planner's prediction beside every measured peak. Sized to finish in about 8 minutes.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gpu_suite import NO_FLCE, report

from nbhelpers.analysis.memory_plan import planned_vs_measured
from nbhelpers.analysis.records import gpu_count, record_label, scaling_efficiency
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_isolated
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.models.families import is_preset

MODEL = "qwen3-8b"
BASE = dict(
    run_name="h200x2-fsdp", model=MODEL, dtype="bf16", batch_size=64, max_length=2048, num_samples=1024,
    padding="token_budget", token_budget=8192, steps=5, warmup=2, sharding="fsdp2", timeout_s=280,
)  # fmt: skip


def groups(hybrid_model: str) -> dict[str, list[RunConfig]]:
    base = RunConfig(**BASE)
    plain = base.replace(attn_implementation="sdpa", kernels="eager")
    best = base.replace(attn_implementation="torch_varlen", kernels="liger", liger_kernels=NO_FLCE)
    budget16 = best.replace(token_budget=16384, activation_checkpointing="every_k", checkpoint_every=2)
    table = {
        "plain": [plain.replace(label=f"plain FSDP2, sdpa, 8k tokens per GPU, {n} GPU", gpus=n) for n in (1, 2)],
        "best": [
            best.replace(label=f"varlen + liger (no flce), 8k tokens per GPU, {n} GPU", gpus=n, profile=n == 2)
            for n in (1, 2)
        ] + [
            budget16.replace(label=f"varlen + liger, 16k per GPU, checkpoint every 2nd layer, {n} GPU", gpus=n)
            for n in (1, 2)
        ],  # fmt: skip
        "hybrid": [],
    }
    if hybrid_model and is_preset(hybrid_model):
        slice_ = best.replace(model=hybrid_model, attn_implementation="sdpa", kernels="eager", num_samples=512)
        table["hybrid"] = [slice_.replace(label=f"{hybrid_model}, 8k per GPU, 2 GPU", gpus=2)]
    return table


def _same_but_gpus(a: RunRecord, b: RunRecord) -> bool:
    skip = {"gpus", "label", "group"}
    return {k: v for k, v in a.config.items() if k not in skip} == {k: v for k, v in b.config.items() if k not in skip}


def scaling_lines(records: list[RunRecord]) -> list[str]:
    """Each multi-GPU record's scaling efficiency against the 1-GPU record of the same configuration."""
    lines = []
    singles = [r for r in records if r.ok and gpu_count(r) == 1]
    for record in records:
        if not record.ok or gpu_count(record) == 1:
            continue
        ref = next((s for s in singles if _same_but_gpus(s, record)), None)
        per_gpu = record.metrics["real_tokens_per_s_per_gpu"]
        text = f"{record_label(record)}: {per_gpu:,.0f} tok/s per GPU, MFU {record.metrics['mfu']:.1%}"
        if ref is not None:
            text += f", scaling efficiency {scaling_efficiency(record, ref):.1%} against {record_label(ref)!r}"
        lines.append(text)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("groups", nargs="+", choices=("plain", "best", "hybrid"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--hybrid-model", default="", help="the hybrid family's preset of the 27B width, fewer layers")
    args = parser.parse_args()
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    table = groups(args.hybrid_model)
    measured: list[RunRecord] = []
    for name in args.groups:
        if not table[name]:
            print(f"[{name}] nothing to run: --hybrid-model {args.hybrid_model!r} is not a preset", flush=True)
        store = RunStore(out / f"{name}.jsonl")
        log = out / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        for config in table[name]:
            start = time.perf_counter()
            record = run_isolated(config, notebook=f"benchmarks/gpu_fsdp_suite.py {name}")
            record.config["group"] = name
            store.append(record)
            measured.append(record)
            line = report(name, record, time.perf_counter() - start)
            if record.ok:
                metrics = record.metrics
                line += f" per-GPU GiB={metrics['peak_memory_gib_per_gpu']}"
                line += f" comm/step us={metrics.get('communication_per_step_us')}"
            print(line, flush=True)
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
    for line in scaling_lines(measured):
        print(line, flush=True)
    frame = planned_vs_measured(measured)
    if len(frame):
        columns = ["label", "gpus", "tokens_per_gpu", "planned_gib", "measured_gib", "error"]
        print(frame[columns].to_string(), flush=True)


if __name__ == "__main__":
    main()
