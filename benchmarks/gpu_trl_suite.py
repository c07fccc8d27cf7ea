"""Issue 16 on a GPU: TRL's SFTTrainer beside the workbook's best configuration, and its convergence.

Usage (GPU machine with TRL, see ../shared/gpu/wheels.sh):
    PYTHONPATH=. python benchmarks/gpu_trl_suite.py --out DIR [--samples 256] [--steps 50] [GROUP ...]
Groups: peers (default: the static baseline, the workbook's token budget 16k with torch_varlen and Liger without
fused linear cross-entropy, then TRL's defaults, best flags, bfd packing and that configuration's own export,
each one untimed and one timed epoch of the same samples), convergence (that configuration and its baseline,
``--steps`` steps each, their loss curves compared by nbhelpers.analysis.convergence). Qwen3-1.7B shape, batch
8 x 2048. Every configuration runs in its own subprocess; records append to DIR/trl-<group>.jsonl (the format
of benchmarks/gpu_suite.py, whose console line this reuses), console lines to DIR/logs/trl-<group>.log.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path

from gpu_suite import NO_FLCE, measure_group, one_isolated

from nbhelpers.analysis.convergence import compare_curves, convergence_configs, mark_convergence
from nbhelpers.analysis.peers import peer_configs
from nbhelpers.analysis.recommend import recommend
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import TRL_ENGINES


def base_config(samples: int) -> RunConfig:
    return RunConfig(
        run_name="h200-trl", model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=samples,
        timing="epoch", timeout_s=600,
    )  # fmt: skip


def best(base: RunConfig) -> RunConfig:
    """The workbook's best measured configuration on one H200 (DESIGN's facts: 38,326 tok/s)."""
    return base.replace(
        label="liger without fused linear cross-entropy, token_budget 16k, torch_varlen", padding="token_budget",
        token_budget=16384, kernels="liger", liger_kernels=NO_FLCE, attn_implementation="torch_varlen",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("groups", nargs="*", default=["peers"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    base = base_config(args.samples)
    workbook = [base.replace(label="eager, static, sdpa", padding="static"), best(base)]
    for name in args.groups:
        measure = partial(one_isolated, notebook=f"benchmarks/gpu_trl_suite.py {name}")
        if name == "peers":
            records = measure_group("trl-peers", workbook, out, measure, parity=True)
            rec = recommend([r for r in records if r.ok] or records, baseline_label="eager, static, sdpa")
            measure_group("trl-peers", peer_configs(rec, ",".join(TRL_ENGINES)), out, measure, parity=False)
        elif name == "convergence":
            rec = recommend(measure_group("trl-convergence-source", [best(base)], out, measure, parity=False))
            records = measure_group("trl-convergence", convergence_configs(rec, args.steps), out, measure_convergence,
                                    parity=False)  # fmt: skip
            result = compare_curves(records[0].metrics.get("losses", []), records[1].metrics.get("losses", []))
            print(result.summary(), flush=True)
        else:
            raise SystemExit(f"group={name!r}: groups are peers, convergence")


def measure_convergence(config: RunConfig) -> list:
    """One convergence run in its own process, stored as kind "convergence"."""
    records = one_isolated(config, notebook="benchmarks/gpu_trl_suite.py convergence")
    for record in records:
        mark_convergence(record, [])
    return records


if __name__ == "__main__":
    main()
