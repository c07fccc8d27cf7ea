"""Every notebook under papermill with MODEL set to the tiny hybrid preset (Gated DeltaNet on the reference path)."""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_helpers import execute, outputs_text

from nbhelpers.measure.store import RunStore

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
HYBRID = {"RUN_NAME": "hybrid", "MODEL": "qwen3.5-tiny"}


@pytest.mark.slow
def test_notebooks_01_to_04_run_the_hybrid_preset(runs_root, kernel_env, tmp_path):
    cells = execute(
        NOTEBOOKS / "01_baseline_profile.ipynb", tmp_path / "01.ipynb",
        HYBRID | {"BATCH_SIZE": 2, "MAX_LENGTH": 64, "NUM_SAMPLES": 8, "STEPS": 2, "WARMUP": 1},
    )  # fmt: skip
    baseline = RunStore.for_run("hybrid").load()
    assert [(r.config.get("engine"), r.status) for r in baseline] == [("workbook", "ok"), ("trl_defaults", "ok")]
    assert baseline[0].config["model"] == "qwen3.5-tiny" and baseline[0].metrics["kernels_per_step"] > 0
    assert "real tokens / s" in outputs_text(cells["run"])

    cells = execute(
        NOTEBOOKS / "02_kernel_swap_in.ipynb", tmp_path / "02.ipynb",
        HYBRID | {"KERNELS": "eager,liger", "LIGER_KERNELS": "cross_entropy", "BATCH_SIZE": 1, "MAX_LENGTH": 48,
                  "PADDING": "static", "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0, "MEASURE_STARTUP": False,
                  "DOCTOR_PROBES": False},
    )  # fmt: skip
    shipped = outputs_text(cells["gpu-parity"]) + outputs_text(cells["gpu-results"])
    assert "from hybrid/" in shipped and "hybrid-headline-b4.jsonl" in shipped  # the family's own H200 records
    # Packed rows carry their boundaries (cu_seqlens): the reference path runs each sequence apart, the measured
    # packed configuration is ok, and the contamination proof passes for that path and catches the mixing ones.
    cells = execute(
        NOTEBOOKS / "03_dynamic_padding.ipynb", tmp_path / "03.ipynb",
        HYBRID | {"STRATEGIES": "static,packed", "ATTENTION": "sdpa", "BATCH_SIZE": 2, "MAX_LENGTH": 96,
                  "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0, "PROFILE": False, "PROOF_SEQUENCES": 2, "KERNELS": "eager",
                  "TUNE_BUDGET_S": 0},
    )  # fmt: skip
    assert "reference, boundaries: PASSES" in "".join(outputs_text(cell) for cell in cells.values())
    records = RunStore.for_run("hybrid").load()
    packed = [r for r in records if r.config.get("padding") == "packed" and r.kind == "step"]
    assert packed and all(r.status == "ok" for r in packed), [r.reason for r in packed]
    assert any(r.status == "ok" and r.config.get("kernels") == "liger" for r in records)
    static_03 = [r for r in records if r.config.get("padding") == "static" and r.notebook.startswith("03")]
    assert static_03 and static_03[0].status == "ok"
    assert all(r.metrics["mfu"] > 0 for r in records if r.status == "ok" and r.kind == "step")

    cells = execute(NOTEBOOKS / "04_speedup_report.ipynb", tmp_path / "04.ipynb", {"RUN_NAME": "hybrid"})
    assert (runs_root / "hybrid" / "report.html").is_file()
    assert "qwen3.5-tiny" in "".join(outputs_text(cell) for cell in cells.values())
