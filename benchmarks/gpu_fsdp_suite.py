"""Qwen3-8B shape on 1 and 2 H200s under FSDP2: the workbook's best configuration against plain FSDP2.

Usage (on the 2-GPU machine; NCCL's NVLink multicast off, as that machine sets):
    NCCL_NVLS_ENABLE=0 python benchmarks/gpu_fsdp_suite.py plain best --out DIR
    python benchmarks/gpu_fsdp_suite.py plain best --rehearse --out DIR   # the same path on a CPU: 2 gloo ranks
Groups: plain (SDPA, eager kernels, a packed row of 8,192 tokens per GPU, bf16 weights: the reference
measured by hand before the workbook had FSDP2), best (torch_varlen, Liger without the fused linear
cross-entropy, token budgets per GPU, with and without activation checkpointing), hybrid (a slice of the
27B hybrid's width with fewer layers, when the hybrid family's preset named by --hybrid-model exists).
Each configuration runs under torchrun through the runner (one process per GPU) and its merged record
appends to DIR/<group>.jsonl as it lands (records written like benchmarks/gpu_suite.py: same report line,
same store); at the end the script prints each 2-GPU record's scaling efficiency against its 1-GPU record
and the memory planner's prediction beside every measured peak. Sized to finish in about 8 minutes.
``--rehearse`` runs every configuration of the groups at a CPU's sizes (the tiny preset, two gloo ranks; Liger's
interpretable kernels only, in fp32, SDPA for torch_varlen), so the script is proven end to end before GPU time is spent
on it; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from gpu_suite import NO_FLCE, report

from nbhelpers.analysis.memory_plan import planned_vs_measured
from nbhelpers.analysis.records import gpu_count, record_label, scaling_efficiency
from nbhelpers.kernels.liger import CPU_INTERPRETABLE_LIGER_KERNELS
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_isolated
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.models.families import is_preset

MODEL = "qwen3-8b"
BASE = dict(
    run_name="h200x2-fsdp", model=MODEL, dtype="bf16", batch_size=64, max_length=2048, num_samples=1024,
    padding="token_budget", token_budget=8192, steps=5, warmup=2, sharding="fsdp2", timeout_s=280,
)  # fmt: skip


# --rehearse: the same configurations at a CPU's sizes (token budgets scaled by the same 1/64).
REHEARSAL = dict(model="qwen3-tiny", device="cpu", batch_size=8, max_length=64, num_samples=32,
                 token_budget=128, steps=2, warmup=1, timeout_s=300)  # fmt: skip


def groups(hybrid_model: str, rehearse: bool = False) -> dict[str, list[RunConfig]]:
    base = RunConfig(**(BASE | (REHEARSAL if rehearse else {})))
    plain = base.replace(attn_implementation="sdpa", kernels="eager")
    best = base.replace(attn_implementation="torch_varlen", kernels="liger", liger_kernels=NO_FLCE)
    if rehearse:  # On a CPU Liger runs in Triton's interpreter: only some of its kernels run there, and its rope
        # gives NaN on bf16 tensors (fp32 weights then); torch_varlen (flash attention) does not run at all (SDPA).
        switches = tuple(k for k in NO_FLCE if k in CPU_INTERPRETABLE_LIGER_KERNELS)
        best = best.replace(attn_implementation="sdpa", liger_kernels=switches, dtype="auto")
    budget16 = best.replace(token_budget=2 * base.token_budget, activation_checkpointing="every_k", checkpoint_every=2)
    per_gpu, per_gpu16 = _tokens(base.token_budget), _tokens(budget16.token_budget)
    table = {
        "plain": [plain.replace(label=f"plain FSDP2, sdpa, {per_gpu} tokens per GPU, {n} GPU", gpus=n) for n in (1, 2)],
        "best": [
            best.replace(label=f"varlen + liger (no flce), {per_gpu} tokens per GPU, {n} GPU", gpus=n, profile=n == 2)
            for n in (1, 2)
        ] + [
            budget16.replace(label=f"varlen + liger, {per_gpu16} per GPU, checkpoint every 2nd layer, {n} GPU", gpus=n)
            for n in (1, 2)
        ],  # fmt: skip
        "hybrid": [],
    }
    if hybrid_model and is_preset(hybrid_model):
        slice_ = best.replace(model=hybrid_model, attn_implementation="sdpa", kernels="eager",
                              num_samples=min(512, base.num_samples))  # fmt: skip
        table["hybrid"] = [slice_.replace(label=f"{hybrid_model}, {per_gpu} per GPU, 2 GPU", gpus=2)]
    return table


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n % 1024 == 0 else f"{n:,}"


def _same_but_gpus(a: RunRecord, b: RunRecord) -> bool:
    skip = {"gpus", "label", "group", "profile"}  # a profiled 2-GPU run still scales against its unprofiled 1-GPU one
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
    parser.add_argument("--rehearse", action="store_true", help="the same path on a CPU at tiny sizes (2 gloo ranks)")
    args = parser.parse_args()
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    table = groups(args.hybrid_model, args.rehearse)
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
