"""Where one measured configuration's wall time goes: the process's start and imports, and each phase.

Usage: python benchmarks/row_cost.py [--model qwen3-1.7b] [--batch-size 8] [--max-length 2048] [--num-samples 32]
       [--rows eager:static:sdpa,liger:token_budget:torch_varlen] [--no-profile] [--out FILE]

Each row (kernels:padding:attention) runs as notebook 03's grid runs it (its own subprocess, epoch timing, the
parity probe after timing). Printed per row: the process's wall time (``metrics.process_s``), each phase
(``metrics.phase_s``: data, build, first step, untimed, timed, profile, parity probe) and what no phase covers
(the interpreter's start, the imports, CUDA's start, writing the record). Before the rows, the cost of a bare
start is timed on its own: a child that imports what the worker imports and touches the device. Records go to
runs/row-cost/; --out also writes the rows as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_isolated
from nbhelpers.measure.store import RunStore

RUN_NAME = "row-cost"
BARE_START = (
    "import torch, transformers, nbhelpers.measure.worker, nbhelpers.measure.step;"
    "torch.zeros(1, device='cuda' if torch.cuda.is_available() else 'cpu').sum().item()"
)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3-tiny")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--num-samples", type=int, default=8)
    parser.add_argument("--rows", default="eager:static:sdpa", help="comma list of kernels:padding:attention")
    parser.add_argument("--no-profile", action="store_true", help="measure without the profiled step")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows here (JSON lines)")
    return parser.parse_args()


def bare_start_s() -> float:
    """Seconds for a child that only imports the worker's modules and touches the device."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", BARE_START], check=True)
    return time.perf_counter() - started


def main() -> None:
    args = parse()
    bare = bare_start_s()
    print(f"bare start (interpreter + imports + device): {bare:.1f} s")
    base = RunConfig(
        run_name=RUN_NAME, model=args.model, batch_size=args.batch_size, max_length=args.max_length,
        num_samples=args.num_samples, timing="epoch", profile=not args.no_profile, timeout_s=600,
    )  # fmt: skip
    store = RunStore.for_run(RUN_NAME)
    rows = []
    for spec in args.rows.split(","):
        kernels, padding, attention = spec.split(":")
        config = base.replace(kernels=kernels, padding=padding, attn_implementation=attention, label=spec)
        record = run_isolated(config, notebook="row_cost")
        store.append(record)
        phases = record.metrics.get("phase_s", {})
        process = record.metrics.get("process_s", 0.0)
        row = {
            "row": spec, "status": record.status, "reason": record.reason, "process_s": process,
            "phase_s": phases, "uncovered_s": round(process - sum(phases.values()), 3), "bare_start_s": round(bare, 3),
            "timed_steps": record.metrics.get("timed_steps"),
            "real_tokens_per_s": record.metrics.get("real_tokens_per_s"),
        }  # fmt: skip
        rows.append(row)
        print(json.dumps(row))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a", encoding="utf-8") as sink:
            sink.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main()
