"""File one suite's records from a GPU job into ``benchmarks/gpu``: the records, their manifest lines and the console's
lines of the suite, each record once.

    python -m nbhelpers.bench.filing RUNS SUITE DEST [--console CONSOLE]

RUNS is the job's output folder (``runs/bench`` from its ``runs.tgz``), SUITE the suite's name
(``hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-fla-boundaries``), DEST a folder under ``benchmarks/gpu``. A
record already filed anywhere under ``benchmarks/gpu`` is refused (nothing stored twice), before anything is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from nbhelpers.measure.jsonl import append_line, read_lines
from nbhelpers.resources import GPU_RESULTS_DIR

from .manifest import MANIFEST, load_manifest

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def filed_records(root: Path) -> list[tuple[str, Path]]:
    """(id, file) of every run record under ``root``, in file order (manifests and files of other lines left out:
    a tuner's file names records by id without holding them)."""
    filed: list[tuple[str, Path]] = []
    for path in sorted(root.rglob("*.jsonl")):
        if path.name == MANIFEST:
            continue
        filed += [(line["record_id"], path) for line in read_lines(path, what="record")
                  if {"record_id", "config", "metrics"} <= set(line)]  # fmt: skip
    return filed


def console_lines(console: str, suite: str) -> list[str]:
    """The console's lines of one suite: its own ``[suite]`` lines and the rates and failures printed under them,
    each progress bar's last state only, without colour codes."""
    kept, inside = [], False
    for raw in ANSI.sub("", console).splitlines():
        line = raw.split("\r")[-1].strip()
        if line.startswith("["):
            inside = line.startswith(f"[{suite}]")
            if inside:
                kept.append(line)
        elif inside and ("real tok/s" in line or "failed" in line) and not line.startswith("configurations:"):
            kept.append(line)
    return kept


def file_suite(runs: Path, suite: str, dest: Path, console: str | None = None, root: Path = GPU_RESULTS_DIR) -> str:
    """Copy the suite's records into ``dest`` with their manifest lines (and its console lines); a sentence saying
    what was filed. ValueError naming the record and where it is when one is already filed."""
    source = runs / f"{suite}.jsonl"
    if not source.is_file():
        raise FileNotFoundError(f"{source}: no records of suite {suite!r} in {runs}")
    records = read_lines(source, what="record")
    already = dict(reversed(filed_records(root)))  # each id's first file
    if twice := [f"{r['record_id']} (in {already[r['record_id']]})" for r in records if r["record_id"] in already]:
        raise ValueError(f"already filed, not stored twice: {', '.join(twice)}")
    name = Path(suite).name
    for record in records:
        append_line(dest / f"{name}.jsonl", record)
    ids = {r["record_id"] for r in records}
    lines = [line for line in load_manifest(source.parent) if line.get("record_id") in ids]
    for line in lines:
        append_line(dest / MANIFEST, line)
    if console is not None:
        (dest / f"{name}.log").write_text("\n".join(console_lines(console, suite)) + "\n", encoding="utf-8")
    return f"{dest}: {len(records)} record(s), {len(lines)} manifest line(s)" + (", console" if console else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbhelpers.bench.filing", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("suite")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--console", type=Path, help="the job's console log")
    args = parser.parse_args(argv)
    console = args.console.read_text(encoding="utf-8", errors="replace") if args.console else None
    print(file_suite(args.runs, args.suite, args.dest, console))
    return 0


if __name__ == "__main__":
    sys.exit(main())
