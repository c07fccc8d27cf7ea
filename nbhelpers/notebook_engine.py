"""Papermill's engine with fewer writes: the executed copy is saved while it runs at most every few seconds.

Papermill writes the whole notebook at the start and at the end of every cell. A workbook notebook carries
BokehJS inline (its plots render offline), so each copy is 6-8 MB: notebook 01 on a CPU wrote 68 copies, 3.4 s of
its 42 s. Here a save within :data:`SAVE_EVERY_S` of the last one is left out until a cell fails or the notebook
ends (then every save is written); papermill writes the finished notebook once more when it returns. A run killed
mid-way leaves a copy at most that many seconds old.
"""

from __future__ import annotations

from typing import Any

from papermill.engines import NBClientEngine, NotebookExecutionManager, catch_nb_assignment, papermill_engines

ENGINE_NAME = "nbhelpers"
SAVE_EVERY_S = 10.0


class SparseSaves(NotebookExecutionManager):
    """Papermill's execution state whose saves are thinned to one per :data:`SAVE_EVERY_S` while cells pass."""

    every_save = False  # set once a cell failed or the notebook ended

    @catch_nb_assignment
    def save(self, **kwargs: Any) -> None:
        if self.every_save or (self.now() - self.last_save_time).total_seconds() >= SAVE_EVERY_S:
            super().save(**kwargs)

    @catch_nb_assignment
    def cell_exception(self, cell: Any, cell_index: int | None = None, **kwargs: Any) -> None:
        self.every_save = True
        super().cell_exception(cell, cell_index, **kwargs)

    @catch_nb_assignment
    def notebook_complete(self, **kwargs: Any) -> None:
        self.every_save = True
        super().notebook_complete(**kwargs)


class SparseSavesEngine(NBClientEngine):
    """nbclient's engine (papermill's default) on :class:`SparseSaves`."""

    @classmethod
    def execute_notebook(  # papermill's Engine.execute_notebook with its execution state swapped
        cls, nb: Any, kernel_name: str, output_path: str | None = None, progress_bar: bool = True,
        log_output: bool = False, autosave_cell_every: int = 30, **kwargs: Any,
    ) -> Any:  # fmt: skip
        manager = SparseSaves(
            nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
            autosave_cell_every=autosave_cell_every,
        )  # fmt: skip
        manager.notebook_start()
        try:
            cls.execute_managed_notebook(manager, kernel_name, log_output=log_output, **kwargs)
        finally:
            manager.cleanup_pbar()
            manager.notebook_complete()
        return manager.nb


def register() -> str:
    """Make the engine known to papermill (again is harmless); its name for ``engine_name``."""
    papermill_engines.register(ENGINE_NAME, SparseSavesEngine)
    return ENGINE_NAME
