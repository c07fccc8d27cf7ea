"""Run the kernel doctor's probes in this process: ``python -m nbhelpers.kernels.probe_run --device auto``.

:func:`nbhelpers.kernels.cache.warm_probe_caches` starts it in a fresh process whose compiled-kernel caches point
into a folder, so every fused kernel this machine runs is compiled (and autotuned) there once. It prints the
verdict of each path as JSON on stdout and exits 1 when a path is broken (0 otherwise).
"""

from __future__ import annotations

import argparse
import json
import sys

from .doctor import BROKEN_PATH, run_doctor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbhelpers.kernels.probe_run", description=__doc__)
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    args = parser.parse_args(argv)
    report = run_doctor(args.device, run_probes=True)
    verdicts = {path.path: path.verdict for path in report.paths}
    print(json.dumps(verdicts, indent=1, sort_keys=True))
    return 1 if BROKEN_PATH in verdicts.values() else 0


if __name__ == "__main__":
    sys.exit(main())
