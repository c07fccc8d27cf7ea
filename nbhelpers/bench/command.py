"""``nbhelpers bench``: measure benchmark suites into a folder, each record with its manifest line."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from nbhelpers.measure.store import load_records
from nbhelpers.resources import runs_folder
from nbhelpers.validation import ConfigError

from .options import DEFAULT_OUT, add_arguments
from .run import run_suite, suite_configs
from .table import SUITES, suites_under


def describe(names: Sequence[str] = ()) -> str:
    """One line per suite: its name, what it measures and what the machine needs."""
    chosen = [s for name in names for s in suites_under(name)] if names else list(SUITES.values())
    return "\n".join(f"{s.name}: {s.question}" + (f" [needs {s.needs}]" if s.needs else "") for s in chosen)


def bench(args: argparse.Namespace, command: str) -> int:
    """Run ``nbhelpers bench`` with parsed ``args``; ``command`` is written into every manifest line."""
    if args.list or not args.suites:
        print(describe(args.suites))
        return 0
    suites = [s for name in args.suites for s in suites_under(name)]
    out = Path(args.out) if args.out else runs_folder() / DEFAULT_OUT
    reference = None
    if args.reference:
        reference = next((r for r in load_records(args.reference) if r.ok), None)
        if reference is None:
            raise ConfigError("--reference", args.reference, "a records file holding an ok record")
    if args.dry_run:
        for suite in suites:
            print(f"{suite.records_file(out)}:")
            for config in suite_configs(suite, out, args.rehearse):
                print(f"  {config.name}")
        return 0
    failed = 0
    for suite in suites:
        print(f"[{suite.name}] {suite.question}", flush=True)
        records = run_suite(suite, out, command, rehearse=args.rehearse, reference=reference)
        failed += sum(1 for r in records if not r.ok)
        print(f"[{suite.name}] {len(records)} record(s), {sum(1 for r in records if not r.ok)} failed: "
              f"{suite.records_file(out)}", flush=True)  # fmt: skip
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nbhelpers.bench``."""
    parser = argparse.ArgumentParser(prog="python -m nbhelpers.bench", description=__doc__)
    add_arguments(parser)
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        return bench(parser.parse_args(arguments), shlex.join(["python", "-m", "nbhelpers.bench", *arguments]))
    except (ValueError, OSError) as error:
        print(f"nbhelpers bench: {error}", file=sys.stderr)
        return 2
