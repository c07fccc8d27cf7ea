"""One benchmark suite: a named list of configurations, measured through the runner into one records file.

A suite's name is where its records are filed: ``<model>/<question>/<experiment>`` becomes
``OUT/<model>/<question>/<experiment>.jsonl``, with one line per record in ``OUT/<model>/<question>/manifest.jsonl``
(:mod:`nbhelpers.bench.manifest`). The first configuration of a suite judged for parity is its reference.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.data.synthetic import make, write_jsonl
from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import ConfigError

# How each configuration of a suite is measured: once in its own process; twice, on an empty and then on a copied
# kernel cache (the first step cold and warm); or as one curve of a convergence pair (kind "convergence").
ISOLATED, STARTUP, CONVERGENCE = "isolated", "startup", "convergence"
MEASURES = (ISOLATED, STARTUP, CONVERGENCE)

# Synthetic sets a suite's rows may read, by name: written into the suite's folder before anything is measured.
LONGTAIL = "longtail.jsonl"  # a long-tailed set: a few long responses among many short ones
SYNTHETIC_SETS: dict[str, dict[str, Any]] = {
    LONGTAIL: dict(n=400, seed=1, prompt_median=60, response_median=240, sigma=1.0, max_response_tokens=2400),
}

Rows = Callable[[Path], list[RunConfig]]  # the suite's folder (where its synthetic sets are) -> its configurations


@dataclass(frozen=True)
class Suite:
    """A named list of configurations and how to measure them."""

    name: str  # "<model>/<question>/<experiment>": the records file it writes, under the output folder
    question: str  # what it measures, in one line
    rows: Rows  # its configurations, in order
    measure: str = ISOLATED  # one of MEASURES
    parity: bool = True  # judge every record's parity against the suite's first ok record (or a given reference)
    needs: str = ""  # what the machine must have beyond the workbook's packages ("" for nothing)
    datasets: tuple[str, ...] = ()  # keys of SYNTHETIC_SETS its rows read
    row_env: Callable[[RunConfig], dict[str, str]] | None = None  # a row's own environment (e.g. its host allocator)

    def __post_init__(self) -> None:
        parts = self.name.split("/")
        if len(parts) < 2 or not all(parts) or any(p in (".", "..") for p in parts):
            raise ConfigError("suite", self.name, "'<model>/<question>/<experiment>': folders, then a file name")
        if self.measure not in MEASURES:
            raise ConfigError("measure", self.measure, f"one of {', '.join(MEASURES)}")
        unknown = [d for d in self.datasets if d not in SYNTHETIC_SETS]
        if unknown:
            raise ConfigError("datasets", unknown, f"names drawn from {', '.join(SYNTHETIC_SETS)}")

    def records_file(self, out: str | Path) -> Path:
        """Where the suite's records go under ``out``."""
        return Path(out) / f"{self.name}.jsonl"

    def folder(self, out: str | Path) -> Path:
        """The folder of its records file: its manifest, traces and synthetic sets live there too."""
        return self.records_file(out).parent

    def configurations(self, out: str | Path) -> list[RunConfig]:
        """Its configurations as they will run under ``out`` (nothing is written)."""
        return self.rows(self.folder(out))


def parity_probe(row: RunConfig, **changes: Any) -> RunConfig:
    """``row`` for its parity probe alone: one untimed step (and ``changes``), labelled so."""
    return row.replace(label=f"{row.label} (parity probe)", timing="steps", steps=1, warmup=0, **changes)


def write_datasets(suite: Suite, out: str | Path) -> None:
    """Write the synthetic sets the suite's rows read into its folder (the same rows every time: fixed seeds)."""
    folder = suite.folder(out)
    for name in suite.datasets:
        path = folder / name
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            write_jsonl(make(**SYNTHETIC_SETS[name]), path)
