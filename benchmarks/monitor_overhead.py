"""What does nbhelpers.monitor cost a training step? ``nbhelpers.monitor.overhead`` measures it; this prints it.

Usage: python benchmarks/monitor_overhead.py [--model qwen3-tiny] [--batch-size 4] [--max-length 256]
       [--padding dynamic] [--block 10] [--rounds 12] [--profile-every 40] [--log-every 15] [--out FILE]

The monitor's records go to runs/monitor-overhead/; --out also writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from nbhelpers.monitor.overhead import OverheadSettings, measure_overhead, overhead_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for field in dataclasses.fields(OverheadSettings):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    parser.add_argument("--out", type=Path, default=None)
    args = vars(parser.parse_args())
    out = args.pop("out")
    result = measure_overhead(OverheadSettings(**args))
    print("\n".join(overhead_lines(result)))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
