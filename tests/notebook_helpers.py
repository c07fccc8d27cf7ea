"""Shared by the notebook tests: run a notebook with papermill, read its outputs, check it is committed clean."""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill

# The smallest run of notebook 03 that still measures a configuration and proves packing (a few seconds of work).
TINY_NB03 = {
    "KERNELS": "eager",
    "STRATEGIES": "packed",
    "ATTENTION": "sdpa",
    "BATCH_SIZE": 2,
    "MAX_LENGTH": 64,
    "NUM_SAMPLES": 4,
    "STEPS": 1,
    "WARMUP": 0,
    "PROFILE": False,
    "PROOF_SEQUENCES": 2,
    "TUNE_BUDGET_S": 0,
}


LORA = {"ADAPTER": "lora", "LORA_RANK": 4, "LORA_ALPHA": 8}  # LoRA on "all-linear", a small rank for a CPU


def assert_lora(records) -> None:
    """Every record trains LoRA: adapter "lora" in its config, fewer trained than frozen parameters."""
    assert records
    for record in records:
        assert record.config["adapter"] == "lora" and record.config["lora_rank"] == LORA["LORA_RANK"], record.label
        trained, frozen = record.metrics["trainable_parameters"], record.metrics["frozen_parameters"]
        assert 0 < trained < frozen, (record.label, trained, frozen)


def outputs_text(cell) -> str:
    """Everything a cell printed or displayed as text, Markdown or HTML."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        for key in ("text/plain", "text/markdown", "text/html"):
            parts.append(str(output.get("data", {}).get(key, "")))
    return "\n".join(parts)


# A cell that runs this long at the tests' tiny sizes is stuck (the slowest, a hybrid grid, takes a few minutes): it
# fails with the cell named instead of holding the run until CI's limit.
CELL_TIMEOUT_S = 1200


def execute(notebook: Path, out: Path, parameters: dict) -> dict:
    """Run ``notebook`` into ``out`` with papermill (kernel python3, cwd notebooks/); cells by id."""
    papermill.execute_notebook(
        str(notebook), str(out), parameters=parameters, kernel_name="python3", cwd=str(notebook.parent),
        progress_bar=False, execution_timeout=CELL_TIMEOUT_S,
    )  # fmt: skip
    executed = nbformat.read(out, as_version=4)
    return {cell.get("id"): cell for cell in executed.cells}


def assert_committed_clean(notebook: Path, title_prefix: str) -> nbformat.NotebookNode:
    """H1 first, no outputs or execution counts, plain Python in every code cell, one parameters cell."""
    nb = nbformat.read(notebook, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(title_prefix)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            compile(cell.source, notebook.name, "exec")  # plain Python, no magics
    assert [c.id for c in nb.cells if "parameters" in c.metadata.get("tags", [])] == ["parameters"]
    return nb
