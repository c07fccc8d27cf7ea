"""Measure a suite: its configurations through the runner (each in its own process), every record appended to its
records file and manifest as it lands, so a stop at any point keeps what was measured."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nbhelpers.analysis.convergence import mark_convergence
from nbhelpers.analysis.parity import check_against_first
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import finished_line, run_configs
from nbhelpers.measure.startup import cold_vs_warm
from nbhelpers.measure.store import RunRecord

from .manifest import ManifestStore
from .rehearsal import rehearsal
from .suite import CONVERGENCE, STARTUP, Suite, write_datasets

Annotate = Callable[[RunRecord, list[RunRecord]], None]


def runs_env(suite: Suite, out: str | Path) -> dict[str, str]:
    """The children's runs folder: the parent of the suite's folder, so that a configuration whose ``run_name`` is
    that folder's name writes its traces beside the suite's records."""
    return {"NBHELPERS_RUNS": str(suite.folder(out).parent.resolve())}


def suite_configs(suite: Suite, out: str | Path, rehearse: bool = False) -> list[RunConfig]:
    """The suite's configurations as they run under ``out``: each named for the suite's folder (its traces go
    there), at a CPU's sizes when ``rehearse``."""
    run_name = suite.folder(out).name
    configs = [c.replace(run_name=run_name) for c in suite.configurations(out)]
    return [rehearsal(c) for c in configs] if rehearse else configs


def annotator(suite: Suite, reference: RunRecord | None) -> Annotate:
    """What is added to each record before it is stored: the suite's name, the kind of a convergence curve, and
    parity against the first ok record (``reference``, measured earlier on the same workload, where given)."""

    def annotate(record: RunRecord, earlier: list[RunRecord]) -> None:
        record.config["suite"] = suite.name
        if suite.measure == CONVERGENCE:
            mark_convergence(record, earlier)
        if suite.parity:
            check_against_first(record, [r for r in ([reference] if reference else []) + earlier if r.ok])

    return annotate


def run_suite(
    suite: Suite, out: str | Path, command: str, *, rehearse: bool = False, reference: RunRecord | None = None,
    progress: bool = True, commit: str | None = None,
) -> list[RunRecord]:  # fmt: skip
    """Measure every configuration of ``suite`` into ``out`` (see the module's docstring); its records in order.
    ``command`` is written in each record's manifest line; ``reference`` (a stored record of the same workload)
    judges parity in place of the suite's own first configuration, which is then not measured."""
    configs = suite_configs(suite, out, rehearse)
    if reference is not None:
        configs = configs[1:]
    write_datasets(suite, out)
    store = ManifestStore(suite.records_file(out), command, commit)
    notebook = f"nbhelpers bench {suite.name}"
    env = runs_env(suite, out)
    annotate = annotator(suite, reference)
    if suite.measure != STARTUP:
        row_env = suite.row_env or (lambda _: {})
        return run_configs(configs, store=store, notebook=notebook, annotate=annotate,
                           extra_env=lambda config: env | row_env(config), progress=progress)  # fmt: skip
    store.check_writable()
    records: list[RunRecord] = []
    for config in configs:
        for record in cold_vs_warm(config, suite.folder(out) / "kernel-caches", notebook=notebook):
            annotate(record, records)
            records.append(store.append(record))
            if progress:
                print(finished_line(record, float(record.metrics.get("process_s", 0.0))), flush=True)
    return records
