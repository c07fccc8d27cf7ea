"""Shared by the notebook tests: run a notebook with papermill, read its outputs, check it is committed clean."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import papermill

from nbhelpers.measure.progress import PLAIN_BARS_VARIABLE

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
    """Run ``notebook`` into ``out`` with papermill (kernel python3, cwd notebooks/) as a batch run draws its bars
    (plain text); the saved copy must read cleanly (:func:`assert_saved_cleanly`); cells by id."""
    saved = os.environ.get(PLAIN_BARS_VARIABLE)
    os.environ[PLAIN_BARS_VARIABLE] = "1"
    try:
        papermill.execute_notebook(
            str(notebook), str(out), parameters=parameters, kernel_name="python3", cwd=str(notebook.parent),
            progress_bar=False, execution_timeout=CELL_TIMEOUT_S,
        )  # fmt: skip
    finally:
        if saved is None:
            os.environ.pop(PLAIN_BARS_VARIABLE, None)
        else:
            os.environ[PLAIN_BARS_VARIABLE] = saved
    assert_saved_cleanly(out)
    executed = nbformat.read(out, as_version=4)
    return {cell.get("id"): cell for cell in executed.cells}


# A bar's last drawn state still at zero steps: "0/0 steps", "0%|          | 0/2"
FROZEN_BAR = re.compile(r"(?<![\d.])0/0\b|\b0%\|[^|]*\|\s*0/\d+")


def empty_tables(html: str) -> list[str]:
    """The header lines of HTML tables that have a header and no row."""
    from bs4 import BeautifulSoup

    empty = []
    for table in BeautifulSoup(html, "html.parser").find_all("table"):
        if table.find("th") is not None and not [tr for tr in table.find_all("tr") if tr.find("td") is not None]:
            empty.append(" | ".join(th.get_text(strip=True) for th in table.find_all("th"))[:120])
    return empty


def frozen_bars(text: str) -> list[str]:
    """The lines of a stream or display whose last drawn state (after the last carriage return) is a bar at 0."""
    last_states = (line.split("\r")[-1] for line in text.split("\n"))
    return [state.strip()[:120] for state in last_states if FROZEN_BAR.search(state)]


# An executed notebook's most: its plots embedded once, BokehJS from its CDN in a batch run (inline, the 3 MB bundle
# is saved twice: about 6 MB a notebook), traces linked, not inlined.
SAVED_MAX_BYTES = 2_000_000


def assert_saved_cleanly(path: Path) -> None:
    """What a reader of the saved copy sees: no table with a header and no row (a sentence says why instead), no
    progress bar left at zero steps, and at most :data:`SAVED_MAX_BYTES` on disk."""
    size = path.stat().st_size
    problems = [f"{size:,} bytes saved, more than {SAVED_MAX_BYTES:,}"] if size > SAVED_MAX_BYTES else []
    for cell in nbformat.read(path, as_version=4).cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            problems += [f"{cell.get('id')}: empty table {t}" for t in empty_tables(str(data.get("text/html", "")))]
            if "Empty DataFrame" in str(data.get("text/plain", "")):
                problems.append(f"{cell.get('id')}: an empty DataFrame")
            for text in (output.get("text", ""), str(data.get("text/plain", ""))):
                problems += [f"{cell.get('id')}: a bar at zero: {bar}" for bar in frozen_bars(text)]
    assert not problems, f"{path.name}: " + "; ".join(problems)


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
