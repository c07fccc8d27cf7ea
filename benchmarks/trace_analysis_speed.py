"""How long the trace analysis takes on a ~200 MB (uncompressed) torch.profiler Chrome trace.

Writes a synthetic trace shaped like a GPU training trace once (``nbhelpers.profiling.synthetic_trace``), then prints
what ``nbhelpers.profiling.analysis_speed`` reports for it (and for its .json.gz form with ``--gzip``).

    python benchmarks/trace_analysis_speed.py [--size-mb 200] [--gzip] [--workdir /tmp/trace-bench]
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import resource
from pathlib import Path

from nbhelpers.profiling import parse
from nbhelpers.profiling.analysis_speed import analysis_seconds
from nbhelpers.profiling.synthetic_trace import write_trace


def report(path: Path) -> None:
    seconds, held = analysis_seconds(path)
    print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB")
    for label, value in seconds.items():
        print(f"  {label:<28} {value:7.2f} s")
    print(f"  kernels: {held['kernels']:,}  cpu ops: {held['cpu_ops']:,}  steps: {held['steps']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200.0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/trace-analysis-bench"))
    parser.add_argument("--gzip", action="store_true", help="also the .json.gz form")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    trace = args.workdir / f"synthetic_{int(args.size_mb)}mb.json"
    if not trace.exists():
        print(f"wrote {trace}: {write_trace(trace, args.size_mb)}")
    parser_name = "orjson" if parse._orjson is not None else "json (stdlib)"
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}, json parser: {parser_name}")  # fmt: skip
    report(trace)
    if args.gzip:
        packed = trace.with_suffix(".json.gz")
        if not packed.exists():
            with open(trace, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                while block := src.read(1 << 22):
                    dst.write(block)
        report(packed)
    print(f"peak memory (RSS): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
