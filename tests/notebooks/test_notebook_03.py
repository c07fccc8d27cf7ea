"""Notebook 03 under papermill on tiny parameters: records, tables, the proof, the GPU section."""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest
from notebook_helpers import LORA, TINY_NB03, assert_committed_clean, assert_lora, execute, outputs_text

from nbhelpers.kernels.doctor import run_doctor
from nbhelpers.measure.doctor_records import doctor_record
from nbhelpers.measure.store import RunStore

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "03_dynamic_padding.ipynb"
GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k_test.jsonl"
PARAMETERS = {
    "RUN_NAME": "str", "MODEL": "str", "DATASET": "str", "DATA_FORMAT": "str", "PROMPT_FIELD": "str",
    "RESPONSE_FIELD": "str", "PROMPT_TEMPLATE": "str", "USE_CHAT_TEMPLATE": "bool",
    "STRATEGIES": "str", "ATTENTION": "str", "KERNELS": "str", "LIGER_KERNELS": "str", "BATCH_SIZE": "int",
    "MAX_LENGTH": "int", "NUM_SAMPLES": "int", "STEPS": "int", "WARMUP": "int", "TIMING": "str", "TOKEN_BUDGET": "int",
    "PAD_TO_MULTIPLE_OF": "int", "NUM_BUCKETS": "int",
    "ADAPTER": "str", "LORA_RANK": "int", "LORA_ALPHA": "int", "LORA_TARGETS": "str",
    "FROZEN_BASE": "str", "GPU_MEMORY_GIB": "float",
    "ACTIVATION_CHECKPOINTING": "str", "DTYPE": "str",
    "PROFILE": "bool", "PROOF_SEQUENCES": "int",
    "GPU_RESULTS": "str", "TUNE_BUDGET_S": "int", "TUNE_TOKEN_BUDGETS": "str",
}  # fmt: skip
TINY = {"BATCH_SIZE": 2, "NUM_SAMPLES": 8, "STEPS": 1, "WARMUP": 0, "PROOF_SEQUENCES": 3, "KERNELS": "eager",
        "TUNE_BUDGET_S": 0}  # fmt: skip


def test_notebook_is_committed_clean_and_declares_its_parameters():
    nb = assert_committed_clean(NOTEBOOK, "# 03")
    params = papermill.inspect_notebook(str(NOTEBOOK))
    assert {name: info["inferred_type_name"] for name, info in params.items()} == PARAMETERS
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert [h.split(".")[0] for h in headings] == [f"## {i}" for i in range(1, 10)]


# The fast tier's papermill run of this notebook (the other variants are slow: the full tier).
def test_notebook_03_measures_proves_and_reads_gpu_results(runs_root, kernel_env, make_record, tmp_path):
    gpu = tmp_path / "gpu"
    gpu_store = RunStore(gpu / "records.jsonl")
    for label, padding, attn, tok_s in [
        ("eager, static, sdpa", "static", "sdpa", 6000.0),
        ("eager, packed, sdpa", "packed", "sdpa", 6000.0),
        ("eager, static, flex", "static", "flex_attention", 6100.0),
        ("eager, packed, flex", "packed", "flex_attention", 15000.0),
    ]:
        gpu_store.append(make_record(label, tok_s, padding=padding, attn=attn, run_name="h200", kernels_per_step=6000))
    # A doctor verdict of this machine (as notebook 02 stores it) that marks Liger broken: liger is left out.
    doctor = run_doctor("cpu", run_probes=False)
    liger = next(p for p in doctor.paths if p.path == "kernels liger")
    liger.verdict, liger.reason = "broken", "probe failed: swiglu: outside rtol 0.02"
    RunStore.for_run("nb03").append(doctor_record(doctor, "nb03"))
    cells = execute(
        NOTEBOOK, tmp_path / "03.ipynb",
        TINY | {"RUN_NAME": "nb03", "STRATEGIES": "static,packed", "ATTENTION": "sdpa,flex_attention",
                "MAX_LENGTH": 160, "GPU_RESULTS": str(gpu), "KERNELS": "eager,liger"},
    )  # fmt: skip
    assert "the kernel doctor marks kernels liger broken" in outputs_text(cells["measure"])

    records = RunStore.for_run("nb03").load()
    steps = {r.label: r for r in records if r.kind == "step"}
    assert list(steps) == [
        "eager, static, sdpa", "eager, packed, sdpa", "eager, static, flex_attention", "eager, packed, flex_attention"
    ]  # fmt: skip
    static, packed = steps["eager, static, sdpa"], steps["eager, packed, sdpa"]
    assert static.ok and packed.ok, (static.reason, packed.reason)
    # The timed step is the plan's second batch: samples 2 and 3, of 160 and 159 tokens after truncation.
    assert static.metrics["positions_per_step"] == 320 and static.metrics["padding_fraction"] == pytest.approx(1 / 320)
    assert packed.metrics["positions_per_step"] == 319 and packed.metrics["padding_fraction"] == 0
    for record in (static, packed):
        assert record.metrics["real_tokens_per_s"] > 0 and record.metrics["kernels_per_step"] > 100
        assert record.environment["device_type"] == "cpu"
    for label in ("eager, static, flex_attention", "eager, packed, flex_attention"):
        assert steps[label].status == "failed"
        assert "FlexAttention does not support backward on CPU" in steps[label].reason
    parity = [r for r in records if r.kind == "parity"]
    assert len(parity) == 1 and parity[0].metrics["parity"]["status"] == "pass"
    assert parity[0].metrics["parity"]["broken_modes_detected"] == {
        "mask_ignored": True, "continuous_positions": True, "cache_on": True
    }  # fmt: skip

    table = outputs_text(cells["measured-table"])
    assert "aten ops (CPU)" in table and "FlexAttention does not su" in table
    start, explorer = cells["explorer"].outputs  # its starting point as plain HTML (saved copies), then the widget
    assert "nbh-explorer-start" in start["data"]["text/html"]
    assert "application/vnd.jupyter.widget-view+json" in explorer["data"]
    proof = outputs_text(cells["proof"])
    assert "correct: PASSES" in proof and "mask_ignored: FAILS" in proof and "cache_on: FAILS" in proof
    waste_table = outputs_text(cells["waste-table"])
    assert all(s in waste_table for s in ("static", "dynamic", "multiple", "bucketed", "packed", "token_budget"))
    verdict = outputs_text(cells["gpu-verdict"])
    assert "`flex_attention` (eager) 2.46x" in verdict and "`sdpa` (eager) 1.00x" in verdict
    assert "NVIDIA H200 @ gpu-01" in outputs_text(cells["gpu-table"])
    assert f"{len(records)} records in" in outputs_text(cells["records"])


@pytest.mark.slow
def test_notebook_03_on_gsm8k(runs_root, kernel_env, tmp_path):
    if not GSM8K.exists():
        pytest.skip(f"the real GSM8K file is absent: {GSM8K} (it lives in the shared folder next to the project)")
    cells = execute(
        NOTEBOOK, tmp_path / "03.ipynb",
        TINY | {"RUN_NAME": "gsm8k", "DATASET": str(GSM8K), "PROMPT_FIELD": "question", "RESPONSE_FIELD": "answer",
                "STRATEGIES": "static,packed", "ATTENTION": "sdpa", "MAX_LENGTH": 128, "PROFILE": False,
                "TIMING": "epoch", "GPU_RESULTS": str(tmp_path / "no-gpu-results")},
    )  # fmt: skip
    assert "1319.0" in outputs_text(cells["length-stats"])  # every GSM8K test row
    records = RunStore.for_run("gsm8k").load()
    assert [(r.label, r.status) for r in records] == [
        ("eager, static, sdpa", "ok"),
        ("eager, packed, sdpa", "ok"),
        ("contamination proof: packed vs padded", "ok"),
    ]
    static, packed = records[0].metrics, records[1].metrics
    assert packed["padding_fraction"] == 0 and packed["real_tokens_per_s"] > 0
    assert static["padding_fraction"] > 0
    # Epoch timing: all 8 samples in 4 batches of 2, timed in 3 whole passes (the floor of 10 timed steps), the
    # same real tokens for both strategies.
    assert static["timed_batches"] == packed["timed_batches"] == 12
    assert static["timed_passes"] == packed["timed_passes"] == 3
    assert static["real_tokens_per_step"] == pytest.approx(packed["real_tokens_per_step"])
    assert records[1].config["dataset"] == str(GSM8K) and records[1].config["prompt_field"] == "question"
    assert "No GPU results about padding" in outputs_text(cells["gpu-table"])
    assert "correct: PASSES" in outputs_text(cells["proof"])


@pytest.mark.parametrize("model", ["qwen3-tiny", "qwen3.5-tiny"])
@pytest.mark.slow
def test_notebook_03_packs_under_lora(model, runs_root, kernel_env, tmp_path):
    """ADAPTER="lora" on the dense and the hybrid preset: the packed step trains LoRA adapters on a frozen base."""
    run = "nb03lora-" + model.replace(".", "")
    cells = execute(NOTEBOOK, tmp_path / "03.ipynb", TINY_NB03 | LORA | {"RUN_NAME": run, "MODEL": model})
    records = RunStore.for_run(run).load()
    steps = [r for r in records if r.kind == "step"]
    assert [(r.label, r.status) for r in steps] == [("eager, packed, sdpa", "ok")], [r.reason for r in steps]
    assert_lora(steps)
    assert steps[0].config["model"] == model and steps[0].metrics["mfu"] > 0
    assert "PASSES" in outputs_text(cells["proof"])  # the contamination proof of the model's packing path
