"""The new kernel entries (torchao float8, Cut Cross-Entropy) at the GPU command's workload, with parity.

Usage: python benchmarks/gpu_next25_suite.py GROUP [GROUP ...] --out DIR [--model qwen3-1.7b]
Groups:
  alone   eager, static padding, SDPA (the baseline, the parity reference of every group), then each new entry
          alone at the same padding (``--entries`` names some of them);
  best    each new entry with the best padding (token budget of batch x length, torch_varlen), beside today's pick
          (Liger without its fused linear cross-entropy) as the bar to beat;
  curve   50 steps of the float8 entry and of the baseline kernels on the padded baseline's plan, each step on a
          batch not trained on before: the loss curves compared by
          float8's precision class (nbhelpers.kernels.float8.FLOAT8_CURVE), the verdict as a record of kind
          "convergence-verdict".
The workload is the GPU command's (scripts/run_workbook_gpu.sh defaults, notebook 03): batch 8 x 2048, 32 samples,
one timed epoch, fp32 weights under bf16 autocast. Records append to DIR/<group>.jsonl as each configuration ends
(a stop keeps what was measured), console lines to DIR/logs/<group>.log. An entry that cannot run here (a CPU, a GPU
below compute capability 8.9, a package missing) is a failed record with its reason: nothing crashes. On a CPU
``--model qwen3-tiny --batch-size 2 --max-length 128`` rehearses the script in a few minutes (at 8 x 2048 the
tiny preset's 152k-vocabulary logits alone take 10 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path

from gpu_suite import NO_FLCE, measure_group, one_isolated

from nbhelpers.analysis.convergence import compare_curves
from nbhelpers.data.strategies import STRATEGIES
from nbhelpers.kernels.registry import curve_tolerance
from nbhelpers.machine import resolve_device
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.curve_samples import samples_for_steps
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.measure.worker import failed_record
from nbhelpers.models.families import MODEL_PRESETS
from nbhelpers.planning.device import refusal

NOTEBOOK = "benchmarks/gpu_next25_suite.py"

WORKLOAD = dict(
    run_name="h200-next25", batch_size=8, max_length=2048, num_samples=32, timing="epoch", kernels="eager",
    padding="static", attn_implementation="sdpa", timeout_s=540,
)  # fmt: skip
NEW_ALONE = ("float8", "float8+compile", "float8_rowwise+compile", "cce", "cce+compile")
# With the best padding, compiled entries compile per decoder layer: a token budget's rows change length every step,
# and the whole model compiled recompiles per length (on an H200 "compile, pad to longest" timed out at 300 s).
NEW_BEST = (
    "float8+regional_compile", "liger+float8", "cce", "liger+cce", "cce+regional_compile", "liger+float8+cce",
    "float8+cce+regional_compile",
)  # fmt: skip
CURVE_BACKEND = "float8+regional_compile"
CURVE_STEPS = 50


def liger_switches(kernels: str) -> tuple[str, ...]:
    """Liger's switches for an entry: today's pick's set, without its cross-entropy beside Cut Cross-Entropy."""
    from nbhelpers.kernels.registry import liger_switches_for

    return liger_switches_for(kernels, NO_FLCE) or NO_FLCE


def alone(base: RunConfig, entries: tuple[str, ...] = NEW_ALONE) -> list[RunConfig]:
    configs = [base.replace(label="baseline: eager, static, sdpa")]
    return configs + [
        base.replace(label=f"{k}, static, sdpa", kernels=k, liger_kernels=liger_switches(k)) for k in entries
    ]


def best(base: RunConfig) -> list[RunConfig]:
    padded = base.replace(padding="token_budget", token_budget=base.batch_size * base.max_length,
                          attn_implementation="torch_varlen")  # fmt: skip
    configs = [padded.replace(label="eager, token budget, torch_varlen"),  # what each entry bought is over it
               padded.replace(label="liger (no fused linear CE), token budget, torch_varlen", kernels="liger",
                              liger_kernels=NO_FLCE)]  # fmt: skip
    return configs + [
        padded.replace(label=f"{k}, token budget, torch_varlen", kernels=k, liger_kernels=liger_switches(k))
        for k in NEW_BEST
    ]


def curve_pair(base: RunConfig) -> list[RunConfig]:
    """The float8 entry and the baseline kernels, 50 steps each on the padded baseline's plan (static padding,
    SDPA), no warm-up, each step on a batch not seen before: a token budget's plan of the default dataset holds
    only 24 batches, and a curve that repeats batches learns them by heart (on 2026-12-03, over one batch
    repeated, both losses fell below 0.1, where relative differences mean nothing)."""
    steps = base.replace(timing="steps", steps=CURVE_STEPS, warmup=0, profile=False, kernels="eager")
    steps = steps.replace(num_samples=samples_for_steps(steps, CURVE_STEPS + 1))
    return [
        steps.replace(label=f"curve: {CURVE_BACKEND}", kernels=CURVE_BACKEND),
        steps.replace(label="curve: eager (baseline kernels, same plan and attention)"),
    ]


def measure_here(config: RunConfig, device: str, extra_env: dict[str, str]) -> list[RunRecord]:
    """One configuration in its own process, or, where it cannot run here, a failed record with the reason (the
    planner's refusal: no process is started for it)."""
    why = refusal(config.kernels, config.attn_implementation, device, model=config.model,
                  packed=STRATEGIES[config.padding].packed, liger_kernels=config.liger_kernels)  # fmt: skip
    if why:
        return [failed_record(config, why, NOTEBOOK)]
    return one_isolated(config, notebook=NOTEBOOK, extra_env=extra_env)


def curve_verdict(records: list[RunRecord], out: Path) -> None:
    """Compare the two curves by the float8 entry's precision class; one JSON line with the verdict."""
    recommended, baseline = records
    tolerance = curve_tolerance(CURVE_BACKEND)
    if not (recommended.ok and baseline.ok):
        verdict = {"status": "not compared", "reason": recommended.reason or baseline.reason}
    else:
        result = compare_curves(recommended.metrics.get("losses", []), baseline.metrics.get("losses", []), tolerance)
        verdict = {"status": "pass" if result.passed else "fail", "summary": result.summary(),
                   "max_step_rel_diff": result.max_step_rel_diff, "max_smoothed_rel_diff": result.max_smoothed_rel_diff,
                   "mean_rel_diff": result.mean_rel_diff, "tolerance": tolerance.__dict__}  # fmt: skip
    line = {"kind": "convergence-verdict", "backend": CURVE_BACKEND, "steps": CURVE_STEPS, **verdict}
    with open(out / "curve-verdict.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")
    print(f"[curve] {CURVE_BACKEND} vs baseline: {line['status']} {verdict.get('summary', verdict.get('reason'))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("groups", nargs="+", choices=("alone", "best", "curve"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen3-1.7b", choices=tuple(MODEL_PRESETS), metavar="PRESET")
    parser.add_argument("--batch-size", type=int, default=WORKLOAD["batch_size"])  # smaller for a CPU rehearsal
    parser.add_argument("--max-length", type=int, default=WORKLOAD["max_length"])
    parser.add_argument("--entries", default=",".join(NEW_ALONE), help="the alone group's entries, comma-separated")
    parser.add_argument("--timeout-s", type=int, default=WORKLOAD["timeout_s"],
                        help="each configuration's limit; whole-model compile on empty caches compiles twice (the "
                             "timed model and the parity probe's rebuilt one)")  # fmt: skip
    args = parser.parse_args()
    if args.timeout_s <= 0:
        parser.error(f"--timeout-s: {args.timeout_s} is not a positive number of seconds")
    entries = tuple(e for e in args.entries.split(",") if e)
    if unknown := [e for e in entries if e not in NEW_ALONE]:
        parser.error(f"--entries: {', '.join(unknown)} not among {', '.join(NEW_ALONE)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["NBHELPERS_RUNS"] = str(out)
    cache = Path(os.environ.get("NBHELPERS_KERNEL_CACHE", "/tmp/nbh-kernel-cache"))
    env = {"TRITON_CACHE_DIR": str(cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}
    shape = {"batch_size": args.batch_size, "max_length": args.max_length, "timeout_s": args.timeout_s}
    base = RunConfig(model=args.model, **(WORKLOAD | shape))
    measure = partial(measure_here, device=resolve_device("auto"), extra_env=env)
    reference = None  # the baseline record: every group's parity reference
    for group in args.groups:
        start = time.perf_counter()
        if group == "curve":
            records = [measure(c)[0] for c in curve_pair(base)]
            store = RunStore(out / "curve.jsonl")
            for record in records:
                record.kind = "convergence"
                store.append(record)
            curve_verdict(records, out)
            continue
        configs = alone(base, entries) if group == "alone" else best(base)
        if reference is None and group == "best":
            configs = alone(base)[:1] + configs  # measure the baseline first: the parity reference
        measured = measure_group(group, configs, out, measure, parity=True, reference=reference)
        reference = reference or next((r for r in measured if r.ok), None)
        print(f"[{group}] {len(configs)} configurations in {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
