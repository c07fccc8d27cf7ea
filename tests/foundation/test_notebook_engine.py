"""The sweep's papermill engine saves the running notebook sparsely, and completely once a cell fails or it ends."""

from __future__ import annotations

import nbformat
import papermill
import pytest
from papermill.engines import papermill_engines

from nbhelpers import notebook_engine

pytestmark = pytest.mark.slow


def _notebook(path, sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def writes(monkeypatch):
    """The copies the engine writes while the notebook runs (papermill's own last write is not counted)."""
    seen: list[int] = []
    real = notebook_engine.NotebookExecutionManager.save.__wrapped__

    def counted(self, **kwargs):
        seen.append(len(self.nb.cells))
        return real(self, **kwargs)

    monkeypatch.setattr(notebook_engine.NotebookExecutionManager, "save", counted)
    monkeypatch.setattr(notebook_engine, "SAVE_EVERY_S", 3600.0)
    return seen


def test_a_passing_notebook_is_written_once_by_the_engine_with_every_cells_output(tmp_path, writes):
    source = _notebook(tmp_path / "in.ipynb", ["x = 1", "print(x + 1)", "print('done')"])
    papermill.execute_notebook(
        str(source), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False,
        engine_name=notebook_engine.register(),
    )  # fmt: skip
    assert len(writes) == 1  # papermill's engine: two per cell and one at each end
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert [c.outputs[0]["text"] for c in out.cells[1:]] == ["2\n", "done\n"]
    assert all(c.metadata.papermill["status"] == "completed" for c in out.cells)
    assert all(c.metadata.papermill["duration"] is not None for c in out.cells)
    assert papermill_engines.get_engine("nbhelpers") is notebook_engine.SparseSavesEngine


def test_after_a_failing_cell_every_save_is_written_and_the_copy_holds_the_error(tmp_path, writes):
    source = _notebook(tmp_path / "in.ipynb", ["x = 1", "raise ValueError('bad cell')", "print('never')"])
    with pytest.raises(papermill.PapermillExecutionError, match="bad cell"):
        papermill.execute_notebook(
            str(source), str(tmp_path / "out.ipynb"), kernel_name="python3", progress_bar=False,
            engine_name=notebook_engine.register(),
        )  # fmt: skip
    assert len(writes) >= 2  # the failed cell's end and the notebook's end
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    failed = [c for c in out.cells if c.metadata.get("papermill", {}).get("status") == "failed"]
    assert len(failed) == 1 and "bad cell" in failed[0].outputs[-1]["evalue"]
