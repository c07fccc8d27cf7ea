"""Notebooks 01 -> 02 -> 03 -> 04 on one RUN_NAME and one workload: the waterfall has all four stages measured."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import papermill
import pytest
from notebook_helpers import execute, outputs_text

from nbhelpers.analysis.records import WORKLOAD_FIELDS, group_key, step_records, workload_of
from nbhelpers.analysis.speedup import WATERFALL_STAGES, waterfall_steps
from nbhelpers.measure.store import RunStore

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ORDER = ("01_baseline_profile", "02_kernel_swap_in", "03_dynamic_padding", "04_speedup_report")
# The workload parameters every one of 01-03 declares, with the same defaults.
SHARED = ("MODEL", "DATASET", "PROMPT_FIELD", "RESPONSE_FIELD", "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES", "STEPS",
          "WARMUP", "TIMING")  # fmt: skip
# One tiny workload; Liger with RoPE only, so Triton's CPU interpreter stays quick.
WORKLOAD = {"BATCH_SIZE": 2, "MAX_LENGTH": 64, "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0}
PER_NOTEBOOK = {
    "01_baseline_profile": {},
    "02_kernel_swap_in": {"BACKENDS": "eager,liger", "LIGER_KERNELS": "rope", "MEASURE_STARTUP": False,
                          "DOCTOR_PROBES": False},
    "03_dynamic_padding": {"KERNELS": "eager,liger", "LIGER_KERNELS": "rope", "STRATEGIES": "static,packed",
                           "ATTENTION": "sdpa", "PROFILE": False, "PROOF_SEQUENCES": 2,
                           "TUNE_BUDGET_S": 90},  # fmt: skip
}


def _defaults(name: str) -> dict[str, str]:
    params = papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    return {key: info["default"] for key, info in params.items()}


def test_notebooks_01_to_03_share_the_workload_defaults():
    defaults = [_defaults(name) for name in ORDER[:3]]
    for key in SHARED:
        assert len({d[key] for d in defaults}) == 1, (key, [d.get(key) for d in defaults])
    assert defaults[0]["PADDING"] == defaults[1]["PADDING"] == '"static"'  # 02 measures kernels at the baseline's
    assert "fused_linear_cross_entropy" not in defaults[1]["LIGER_KERNELS"]
    assert "fused_linear_cross_entropy" not in defaults[2]["LIGER_KERNELS"]
    assert set(WORKLOAD_FIELDS) >= {"num_samples", "timing", "prompt_field", "steps", "warmup"}


@pytest.mark.slow
def test_chain_01_to_04_measures_every_waterfall_stage_in_one_workload(runs_root, kernel_env, tmp_path):
    for name in ORDER:
        parameters = {"RUN_NAME": "chain"} | (WORKLOAD | PER_NOTEBOOK[name] if name in PER_NOTEBOOK else {})
        execute(NOTEBOOKS / f"{name}.ipynb", tmp_path / f"{name}.ipynb", parameters)

    records = RunStore.for_run("chain").load()
    # notebook 04 on its defaults measures TRL from the export beside the recommendation and a loss-curve pair
    trl = [r for r in step_records(records) if r.notebook.startswith("04")]
    assert [r.config["engine"] for r in trl] == ["trl"] and trl[0].ok, [r.reason for r in trl]
    curves = [r for r in records if r.kind == "convergence"]
    assert len(curves) == 2 and all(r.ok and len(r.metrics["losses"]) >= 10 for r in curves)
    watched = [r for r in records if r.kind == "monitor"]  # its watched TRL run: a record every 4 of 12 steps
    assert [r.metrics["step"] for r in watched] == [4, 8, 12]
    assert watched[2].metrics.get("launches_per_step") is not None  # the profiler window at steps 8-9
    records = [r for r in records if not r.notebook.startswith("04")]  # the waterfall's: 01-03
    steps = step_records(records)
    assert {r.notebook.split(".")[0] for r in steps} == set(ORDER[:3])
    assert len({workload_of(r) for r in steps}) == 1 and len({group_key(r) for r in steps}) == 1
    waterfall = waterfall_steps(records).set_index("stage")
    assert waterfall.index.tolist() == list(WATERFALL_STAGES)
    assert waterfall["real tok/s"].notna().all(), waterfall[["label", "note"]].to_dict()
    by_id = {r.record_id: r for r in steps}
    stage = {name: by_id[waterfall.loc[name, "record_id"]] for name in WATERFALL_STAGES}
    assert stage["baseline"].notebook.startswith("01") and stage["baseline"].label == "baseline"
    assert (stage["kernels only"].config["kernels"], stage["kernels only"].config["padding"]) == ("liger", "static")
    assert (stage["padding only"].config["kernels"], stage["padding only"].config["padding"]) == ("eager", "packed")
    both = stage["kernels + padding"]
    assert (both.config["kernels"], both.config["padding"]) == ("liger", "packed")
    assert both.notebook.startswith("03")
    assert both.config["liger_kernels"] == ["rope"]
    assert (tmp_path / "04_speedup_report.ipynb").is_file() and (runs_root / "chain" / "report.html").is_file()
    # Notebook 03's tuner searched the same space within its budget and left its winner for notebook 04.
    tuned = json.loads((runs_root / "chain" / "tuned.json").read_text())
    assert tuned["record_id"] in by_id or tuned["record_id"] == stage["baseline"].record_id
    assert (runs_root / "chain" / "tuner.jsonl").read_text().count("\n") >= 2
    executed = nbformat.read(tmp_path / "03_dynamic_padding.ipynb", as_version=4)
    assert any("Winner: " in outputs_text(cell) for cell in executed.cells)
