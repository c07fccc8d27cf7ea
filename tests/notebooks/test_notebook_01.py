"""Notebook 01 under papermill on tiny parameters: the profiled baseline, its tables, the H200 view, records."""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest
from notebook_helpers import LORA, assert_committed_clean, assert_lora, execute, outputs_text

from nbhelpers.analysis import baseline, references
from nbhelpers.formatting import fmt_percent, fmt_speedup
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunStore

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "01_baseline_profile.ipynb"
PARAMETERS = {
    "RUN_NAME": "str", "MODEL": "str", "DATASET": "str", "DATA_FORMAT": "str", "PROMPT_FIELD": "str",
    "RESPONSE_FIELD": "str", "PROMPT_TEMPLATE": "str", "USE_CHAT_TEMPLATE": "bool",
    "BATCH_SIZE": "int", "MAX_LENGTH": "int", "NUM_SAMPLES": "int", "STEPS": "int", "WARMUP": "int",
    "TIMING": "str", "PADDING": "str",
    "ADAPTER": "str", "LORA_RANK": "int", "LORA_ALPHA": "int", "LORA_TARGETS": "str",
    "FROZEN_BASE": "str", "GPU_MEMORY_GIB": "float",
    "ACTIVATION_CHECKPOINTING": "str", "DTYPE": "str",
    "TRACE_SOURCE": "str",
}  # fmt: skip
TINY = {"BATCH_SIZE": 2, "MAX_LENGTH": 64, "NUM_SAMPLES": 8, "STEPS": 2, "WARMUP": 1}


def test_notebook_is_committed_clean_and_declares_its_parameters():
    nb = assert_committed_clean(NOTEBOOK, "# 01")
    params = papermill.inspect_notebook(str(NOTEBOOK))
    assert {name: info["inferred_type_name"] for name, info in params.items()} == PARAMETERS
    defaults = {name: info["default"] for name, info in params.items()}
    assert (defaults["MODEL"], defaults["PADDING"], defaults["TRACE_SOURCE"]) == ('"qwen3-tiny"', '"static"', '"run"')
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert [h.split(".")[0] for h in headings] == [f"## {i}" for i in range(1, 7)]


def _check_h200_view(cells: dict) -> None:
    gpu = baseline.gpu_baseline_summary().iloc[0]
    summary = outputs_text(cells["gpu-summary"])
    assert gpu["machine"] in summary and gpu["configuration"] in summary
    verdict = outputs_text(cells["gpu-verdict"])
    assert f"{gpu['launches_per_step']:,.0f} kernel launches" in verdict
    assert fmt_percent(gpu["nominal_utilization"]) in verdict and fmt_percent(gpu["mfu"]) in verdict
    assert "committed baseline" in outputs_text(cells["compare"])


# The fast tier's papermill run of this notebook (the other variants are slow: the full tier).
def test_notebook_01_profiles_the_baseline_on_cpu(runs_root, kernel_env, tmp_path):
    cells = execute(NOTEBOOK, tmp_path / "01.ipynb", {"RUN_NAME": "nb01", **TINY})

    records = RunStore.for_run("nb01").load()
    without = references.without_workbook_config(RunConfig(batch_size=2, max_length=64)).label
    assert [(r.kind, r.label, r.status) for r in records] == [("step", "baseline", "ok"), ("step", without, "ok")]
    record = records[0]
    assert records[1].config["engine"] == references.WITHOUT_WORKBOOK_ENGINE
    assert records[1].metrics["sft_config"] == {"per_device_train_batch_size": 2, "max_length": 64}
    both = outputs_text(cells["without"])
    assert references.VS_REFERENCE in both and references.VS_WITHOUT in both and without in both
    ratio = records[1].metrics["real_tokens_per_s"] / record.metrics["real_tokens_per_s"]
    assert fmt_speedup(ratio) in both and fmt_speedup(1 / ratio) in both  # each row over both references
    assert record.metrics["kernels_per_step"] > 0
    assert record.metrics["trace_unit"] == "aten operators (CPU)"
    assert record.config["padding"] == "static" and record.config["batch_size"] == 2
    assert Path(record.artifacts["trace"]).is_file()
    assert str(runs_root / "nb01" / "records.jsonl") in outputs_text(cells["write"])

    assert "Trace source: this run" in outputs_text(cells["derived"])
    metrics = outputs_text(cells["run"])
    assert "real tokens / s" in metrics and "peak FLOP/s" in metrics and "measured" in metrics
    assert "top-level aten operator" in outputs_text(cells["trace"])
    categories = outputs_text(cells["categories"])
    for column in ("category", "launches_per_step", "share_of_launches", "time_per_step", "share_of_time"):
        assert column in categories
    assert "GEMM" in categories and "optimizer" in categories
    assert "< 10 us" in outputs_text(cells["short"]) and "aten::" in outputs_text(cells["top"])
    assert "nominal utilization" in outputs_text(cells["utilization"])
    verdict = outputs_text(cells["verdict"])
    assert "On this CPU, aten operators were running" in verdict
    assert fmt_percent(record.metrics["trace_nominal_utilization"]) in verdict
    assert f"{record.metrics['kernels_per_step']:,.0f} aten operators" in verdict
    for plot in ("category-plot", "histogram", "timeline"):
        data = [o["data"] for o in cells[plot].outputs if o["output_type"] == "execute_result"]
        assert data and "application/vnd.holoviews_exec.v0+json" in data[0], plot
    _check_h200_view(cells)


@pytest.mark.slow
def test_notebook_01_with_the_shipped_trace(runs_root, kernel_env, tmp_path):
    cells = execute(NOTEBOOK, tmp_path / "01.ipynb", {"RUN_NAME": "nb01s", "TRACE_SOURCE": "shipped", **TINY})
    records = RunStore.for_run("nb01s").load()
    plan = outputs_text(cells["derived"])
    _check_h200_view(cells)
    if baseline.shipped_trace_path() is None:
        # absent: said clearly, then the local run and the H200 numbers from benchmarks/gpu
        assert "The shipped H200 trace is absent" in plan and baseline.SHIPPED_TRACE_NAME in plan
        assert [(r.kind, r.status) for r in records] == [("step", "ok"), ("step", "ok")]  # and without the workbook
        assert records[0].metrics["kernels_per_step"] > 0
        assert "aten operators (CPU)" in outputs_text(cells["headline"])
    else:
        # present: no model runs here; GPU kernel tables and a record of kind "trace"
        assert "Trace source: the shipped H200 trace" in plan
        assert [r.kind for r in records] == ["trace"]
        assert records[0].metrics["trace_unit"] == "GPU kernels" and records[0].metrics["kernels_per_step"] > 1000
        assert "GPU kernels" in outputs_text(cells["headline"])
        categories = outputs_text(cells["categories"])
        assert "GEMM" in categories and "elementwise" in categories
        assert "kernel launches" in outputs_text(cells["verdict"])


@pytest.mark.slow
def test_notebook_01_trains_lora_on_the_tiny_hybrid(runs_root, kernel_env, tmp_path):
    """ADAPTER="lora" on the hybrid preset: the baseline trains LoRA adapters, the table counts them, the LoRA fit
    of the model is shown (notebook 01 on the dense preset with LoRA: test_sweep's adapter=none,lora sweep)."""
    parameters = {"RUN_NAME": "nb01lora", "MODEL": "qwen3.5-tiny", **LORA, **TINY, "STEPS": 1, "WARMUP": 0}
    cells = execute(NOTEBOOK, tmp_path / "01.ipynb", parameters)
    records = RunStore.for_run("nb01lora").load()
    assert [(r.config.get("engine"), r.status) for r in records] == [("workbook", "ok"), ("trl_defaults", "ok")], [
        r.reason for r in records
    ]  # the baseline and, beside it, without the workbook
    assert_lora(records)
    assert records[0].config["model"] == "qwen3.5-tiny" and records[0].metrics["kernels_per_step"] > 0
    trained = records[0].metrics["trainable_parameters"]
    assert f"lora-r4 on all-linear: {trained:,} trained" in outputs_text(cells["run"])
    fit = outputs_text(cells["lora-fit"])
    assert "qwen3.5-tiny with LoRA r4 (all-linear)" in fit and "largest_token_budget" in fit


@pytest.mark.slow
def test_notebook_01_runs_its_baseline_with_bf16_weights_and_fp32_master_state(runs_root, kernel_env, tmp_path):
    """DTYPE reaches the measured step: the record is the bf16-master workload's baseline."""
    parameters = {"RUN_NAME": "nb01master", "DTYPE": "bf16-master", **TINY, "STEPS": 1, "WARMUP": 0}
    execute(NOTEBOOK, tmp_path / "01.ipynb", parameters)
    # notebook 01 also measures "without the workbook" (TRL's defaults) beside its baseline
    [record] = [r for r in RunStore.for_run("nb01master").load() if r.config["engine"] == "workbook"]
    assert (record.kind, record.status, record.config["dtype"]) == ("step", "ok", "bf16-master")
    assert record.metrics["kernels_per_step"] > 0
