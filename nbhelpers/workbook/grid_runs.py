"""The notebooks' grids measured, each configuration in its own process, unless the run's store already holds
a record of the same computation timed the same way on this machine (notebook 01's baseline is notebook 02's
eager row and the first row of notebook 03's grid): that record stands in, marked, and is not stored again."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_configs as measure_configs
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.tuning.reuse import grid_reuse


def run_configs(
    configs: Iterable[RunConfig],
    store: RunStore | None = None,
    notebook: str = "",
    annotate: Callable[[RunRecord, list[RunRecord]], None] | None = None,
    reuse_from: RunStore | None = None,
    progress: bool = True,
    extra_env: Callable[[RunConfig], dict[str, str] | None] | None = None,
) -> list[RunRecord]:
    """Measure ``configs`` (:func:`nbhelpers.measure.runner.run_configs`: each record appended to ``store`` as it
    lands, ``extra_env(config)`` added to a measured one's environment), reusing the records of ``reuse_from``
    (default: ``store``) that measured the same thing; no store, no reuse."""
    source = reuse_from if reuse_from is not None else store
    reuse = grid_reuse(source) if source is not None else None
    return measure_configs(
        configs, store=store, notebook=notebook, annotate=annotate, reuse=reuse, progress=progress,
        extra_env=extra_env,
    )  # fmt: skip


__all__ = ["run_configs"]
