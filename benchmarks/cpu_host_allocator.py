"""The CPU step on glibc's malloc and on tcmalloc: the main command's baseline and packed rows, each in a fresh
process (no fork server: the children's page faults and sys time are this process's RUSAGE_CHILDREN), alternating.

    .venv/bin/python benchmarks/cpu_host_allocator.py [--steps 12] [--repeats 2] [--out runs/host-allocator.jsonl]

Prints one line per row (real tok/s, step median, the process's page faults and sys time) and appends the records,
each with its allocator in ``environment.host_allocator``, to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import resource
from pathlib import Path

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.host_allocator import ALLOCATOR_VARIABLE, find_tcmalloc
from nbhelpers.measure.runner import run_config
from nbhelpers.measure.store import RunStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="runs/host-allocator.jsonl")
    args = parser.parse_args()
    if find_tcmalloc() is None:
        raise SystemExit("no tcmalloc on this machine: scripts/setup.sh installs Debian's libtcmalloc-minimal4 as root")
    os.environ["NBHELPERS_FORK_SERVER"] = "off"  # each row its own child, counted in RUSAGE_CHILDREN
    store = RunStore(Path(args.out))
    for repeat in range(args.repeats):
        for padding in ("static", "packed"):
            for allocator in ("glibc", "auto"):
                os.environ[ALLOCATOR_VARIABLE] = allocator
                config = RunConfig(
                    run_name="host-allocator", label=f"{padding} on {allocator}", device="cpu", padding=padding,
                    batch_size=2, max_length=512, num_samples=8, steps=args.steps, warmup=1,
                )  # fmt: skip
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                record = run_config(config)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                faults, sys_s = after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime
                store.append(record)
                if not record.ok:
                    print(f"{config.label}: failed: {record.reason}")
                    continue
                m = record.metrics
                print(
                    f"repeat {repeat + 1} {config.label:18} ({record.environment['host_allocator']}): "
                    f"{m['real_tokens_per_s']:7.1f} real tok/s, step median {m['step_time_median_s']:.3f} s, "
                    f"{faults:>9,} page faults, sys {sys_s:5.1f} s"
                )


if __name__ == "__main__":
    main()
