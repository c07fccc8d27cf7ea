"""The options of ``nbhelpers bench`` (light: no suite is built until the command runs)."""

from __future__ import annotations

import argparse

DEFAULT_OUT = "bench"  # under the runs folder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``nbhelpers bench [SUITE ...] [--out DIR] [--list] [--dry-run] [--rehearse] [--reference FILE]``."""
    parser.add_argument("suites", nargs="*", metavar="SUITE", help="a suite's name, or a folder of suites")
    parser.add_argument("--out", default=None, help=f"output folder (default: the runs folder's {DEFAULT_OUT}/)")
    parser.add_argument("--list", action="store_true", help="list the suites and what each measures")
    parser.add_argument("--dry-run", action="store_true", help="print each suite's configurations, measure nothing")
    parser.add_argument("--rehearse", action="store_true", help="every row at a CPU's sizes (the path, not speeds)")
    parser.add_argument("--reference", default=None, metavar="FILE",
                        help="records file whose first ok record judges parity; the suite's own first row is skipped")
