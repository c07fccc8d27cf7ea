"""How the tuner measures a candidate by default: each configuration in its own process, with a bar of its own."""

from __future__ import annotations

from collections.abc import Callable

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord

Measure = Callable[[RunConfig], RunRecord]


def default_measure(notebook: str = "", progress: bool = False) -> Measure:
    """Each configuration in its own subprocess (nbhelpers.measure.runner); with ``progress`` a bar of its own
    (name, phase, steps, time) while it runs."""
    from nbhelpers.measure.runner import ConfigBar, run_config

    def measure(config: RunConfig) -> RunRecord:
        bar = ConfigBar(config.name) if progress else None
        try:
            return run_config(config, isolate=True, notebook=notebook, on_progress=bar)
        finally:
            if bar is not None:
                bar.close()

    return measure


__all__ = ["Measure", "default_measure"]
