"""Benchmark suites: named lists of configurations measured through the runner and filed by what they measure.

    nbhelpers bench --list
    nbhelpers bench qwen3-1.7b/padding-strategies-epoch/default --out runs/bench
    nbhelpers bench qwen3-tiny/bench-smoke --out /tmp/bench          (a folder of suites: each in turn)

Each record lands in ``OUT/<suite name>.jsonl`` with a line in the ``manifest.jsonl`` beside it (date, machine,
commit, command). ``benchmarks/gpu_job.sh`` runs a command like these in the background on a GPU machine and
collects what it wrote; ``python -m nbhelpers.bench.tables`` writes docs/results.md's tables from the records.
"""

from __future__ import annotations

from .manifest import ManifestStore, load_manifest, manifest_line
from .run import run_suite
from .suite import Suite
from .table import SUITES, suite_named, suites_under

__all__ = ["SUITES", "ManifestStore", "Suite", "load_manifest", "manifest_line", "run_suite", "suite_named",
           "suites_under"]  # fmt: skip
