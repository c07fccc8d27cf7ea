"""Notebook 05 under papermill on a CPU: two gloo ranks against one, the planner, the export."""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest
from notebook_helpers import LORA, assert_committed_clean, assert_lora, execute, outputs_text
from test_notebook_own_data import write_own_data

from nbhelpers.measure.store import RunStore

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_several_gpus.ipynb"
PARAMETERS = {
    "RUN_NAME": "str", "MODEL": "str", "DATASET": "str", "DATA_FORMAT": "str", "PROMPT_FIELD": "str",
    "RESPONSE_FIELD": "str", "PROMPT_TEMPLATE": "str", "USE_CHAT_TEMPLATE": "bool",
    "GPUS": "int", "DEVICE": "str", "DTYPE": "str", "PADDING": "str",
    "ATTENTION": "str", "KERNELS": "str", "LIGER_KERNELS": "str", "BATCH_SIZE": "int", "MAX_LENGTH": "int",
    "NUM_SAMPLES": "int",
    "STEPS": "int", "WARMUP": "int", "ACTIVATION_CHECKPOINTING": "str",
    "ADAPTER": "str", "LORA_RANK": "int", "LORA_ALPHA": "int", "LORA_TARGETS": "str", "FROZEN_BASE": "str",
    "GPU_MEMORY_GIB": "float", "PLAN_MODEL": "str", "PLAN_TOKENS": "int",
}  # fmt: skip


def test_notebook_is_committed_clean_and_declares_its_parameters():
    nb = assert_committed_clean(NOTEBOOK, "# 05")
    params = papermill.inspect_notebook(str(NOTEBOOK))
    assert {name: info["inferred_type_name"] for name, info in params.items()} == PARAMETERS
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert [h.split(".")[0] for h in headings] == [f"## {i}" for i in range(1, 7)]


# The fast tier's papermill run of this notebook (the other variants are slow: the full tier).
def test_notebook_05_scales_two_gloo_ranks_and_plans_memory(runs_root, kernel_env, tmp_path):
    dataset = write_own_data(tmp_path, "alpaca")  # one's own data, its format detected, as in notebooks 01-03
    cells = execute(NOTEBOOK, tmp_path / "05.ipynb", {"RUN_NAME": "nb05", "DATASET": str(dataset), "DEVICE": "cpu",
                                                      "NUM_SAMPLES": 8, "MAX_LENGTH": 48, "STEPS": 1, "WARMUP": 0})
    records = RunStore.for_run("nb05").load()
    assert [r.config["gpus"] for r in records] == [1, 2]
    assert all(r.ok for r in records), [r.reason for r in records]
    assert {r.notebook for r in records} == {"05_several_gpus.ipynb"}  # each record says where it was made
    assert {r.config["dataset"] for r in records} == {str(dataset)}
    assert "alpaca" in outputs_text(cells["setup"])
    assert records[1].metrics["world_size"] == 2
    scaling = outputs_text(cells["scaling"])
    assert "scaling_efficiency" in scaling and "FSDP2 on 2" in scaling
    assert "2 CPU process(es) (gloo), no GPU" in outputs_text(cells["runs"]) and "CPU" in scaling  # not per GPU
    assert "planned_gib" in outputs_text(cells["memory"])
    assert "gpus_needed" in outputs_text(cells["plan"])
    assert "fsdp_version: 2" in outputs_text(cells["export"]) and "trl.scripts.sft" in outputs_text(cells["export"])


@pytest.mark.slow
def test_notebook_05_trains_lora_on_one_gpu_and_shows_its_fit(runs_root, kernel_env, tmp_path):
    """ADAPTER="lora": the step trains LoRA unsharded on one device, the N-GPU run is a failed record made at once
    with its reason, the planner shows the LoRA fit of PLAN_MODEL, and there is no multi-GPU export."""
    parameters = {"RUN_NAME": "nb05lora", "DEVICE": "cpu", "NUM_SAMPLES": 4, "MAX_LENGTH": 48, "STEPS": 1,
                  "WARMUP": 0, **LORA}  # fmt: skip
    cells = execute(NOTEBOOK, tmp_path / "05.ipynb", parameters)
    records = RunStore.for_run("nb05lora").load()
    assert [(r.config["gpus"], r.config["sharding"], r.status) for r in records] == [
        (1, "none", "ok"), (2, "fsdp2", "failed")
    ], [r.reason for r in records]  # fmt: skip
    assert_lora(records[:1])
    assert records[1].config["adapter"] == "lora" and "an adapter (LoRA) trains on one GPU" in records[1].reason
    assert "not measured: an adapter" in outputs_text(cells["runs"])
    fit = outputs_text(cells["lora-fit"])
    assert "qwen3-8b with LoRA r4 (all-linear) on 139 GiB" in fit and "largest_batch_x48" in fit
    assert "No multi-GPU configuration to export" in outputs_text(cells["export"])
