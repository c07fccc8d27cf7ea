"""Notebook 02 under papermill on tiny parameters: patch report, parity, speed, kernel diff, GPU results, records."""

from __future__ import annotations

import json
from pathlib import Path

import papermill
import pytest
from notebook_helpers import LORA, assert_committed_clean, assert_lora, execute, outputs_text

from nbhelpers.analysis.gpu_results import describe_gpu_results, gpu_results_frame, load_gpu_records
from nbhelpers.analysis.parity import parity_against_eager
from nbhelpers.measure.store import RunStore

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_kernel_swap_in.ipynb"
PARAMETERS = {
    "RUN_NAME": "str", "MODEL": "str", "DATASET": "str", "DATA_FORMAT": "str", "PROMPT_FIELD": "str",
    "RESPONSE_FIELD": "str", "PROMPT_TEMPLATE": "str", "USE_CHAT_TEMPLATE": "bool",
    "KERNELS": "str", "LIGER_KERNELS": "str", "BATCH_SIZE": "int", "MAX_LENGTH": "int", "NUM_SAMPLES": "int",
    "STEPS": "int", "WARMUP": "int", "TIMING": "str", "PADDING": "str",
    "ADAPTER": "str", "LORA_RANK": "int", "LORA_ALPHA": "int", "LORA_TARGETS": "str",
    "FROZEN_BASE": "str", "GPU_MEMORY_GIB": "float",
    "ACTIVATION_CHECKPOINTING": "str", "DTYPE": "str",
    "MEASURE_STARTUP": "bool",
    "DOCTOR_PROBES": "bool", "GPU_RESULTS": "str",
}  # fmt: skip
# Eager and Liger (interpreted rope + cross-entropy: test_parity covers the fused linear one) on one 48-token
# sequence, and SwiGLU alone to show why it is not checked on a CPU (test_kernels shows it for RMSNorm). No
# compile here: its parity and cold/warm start are measured once in test_parity / test_kernel_cache. The doctor
# runs without its probes (test_doctor runs them; torch.compile's takes ~10-25 s on a CPU).
TINY = {
    "KERNELS": "eager,liger", "LIGER_KERNELS": "rope,swiglu,cross_entropy", "BATCH_SIZE": 1, "MAX_LENGTH": 48,
    "PADDING": "static", "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0, "MEASURE_STARTUP": False, "DOCTOR_PROBES": False,
}  # fmt: skip


def test_notebook_is_committed_clean_and_declares_its_parameters():
    nb = assert_committed_clean(NOTEBOOK, "# 02")
    params = papermill.inspect_notebook(str(NOTEBOOK))
    assert {name: info["inferred_type_name"] for name, info in params.items()} == PARAMETERS
    assert params["MEASURE_STARTUP"]["default"] == "True" and params["DOCTOR_PROBES"]["default"] == "True"
    assert params["LIGER_KERNELS"]["default"] == '"rope,rms_norm,swiglu,cross_entropy"'  # no fused linear CE
    assert params["PADDING"]["default"] == '"static"'  # the baseline's padding: "kernels only" in the waterfall
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")]
    assert [h.split(".")[0] for h in headings] == [f"## {i}" for i in range(1, 9)]
    assert headings[0].startswith("## 1. The kernel doctor")


def _shipped(folder: Path, make_record, with_startup: bool = False) -> None:
    """A GPU folder like benchmarks/gpu: records as JSON lines, a failed one without environment, a validity file."""
    folder.mkdir()
    eager = make_record("eager, pad to longest, sdpa", 2674.0, run_name="h200")
    liger = make_record("liger, pad to longest, sdpa", 8000.0, kernels="liger", run_name="h200")
    eager.metrics.update(loss_first=12.309202, grad_norm_first=13.7403, compute_dtype="bf16-autocast")
    liger.metrics.update(loss_first=12.309413, grad_norm_first=13.748151, compute_dtype="bf16-autocast")
    failed = make_record(
        "compile, pad to longest, sdpa", status="failed", reason="timed out after 300 s", kernels="compile"
    )
    failed.environment = {}
    if with_startup:
        _shipped_startup(folder, make_record)
    lines = [json.dumps(r.to_dict()) for r in (eager, liger, failed)]
    (folder / "kernels-window.jsonl").write_text("\n".join(lines) + "\n")
    validity = {liger.record_id: {"source": "kernels-window.jsonl", "label": liger.label, "validity": "valid"}}
    (folder / "validity.json").write_text(json.dumps(validity))
    summary = [{"record_id": liger.record_id, "validity": "valid", "label": liger.label, "config": {}, "metrics": {}}]
    (folder / "summary.json").write_text(json.dumps(summary))  # summary rows are not records: skipped
    (folder / "NOTES.md").write_text("not a record")


def _shipped_startup(folder: Path, make_record) -> None:
    cold = make_record("compile, static pad 2048, sdpa (cold cache)", 9921.0, kernels="compile", kind="startup")
    warm = make_record("compile, static pad 2048, sdpa (warm cache)", 9852.0, kernels="compile", kind="startup")
    cold.metrics.update(cache="cold", first_step_s=102.0, step_time_median_s=0.386)
    warm.metrics.update(cache="warm", first_step_s=8.5, step_time_median_s=0.388)
    lines = "".join(json.dumps(r.to_dict()) + "\n" for r in (cold, warm))
    (folder / "kernels-startup-cold-warm.jsonl").write_text(lines)


def test_gpu_results_loader(make_record, tmp_path):
    assert load_gpu_records(tmp_path / "absent") == []
    assert "absent or holds no records" in describe_gpu_results([], tmp_path / "absent")
    on_gpu = describe_gpu_results([], tmp_path / "gpu", "cuda")  # a GPU measures its own rows: nothing is absent
    assert "measured its own rows" in on_gpu and "absent" not in on_gpu
    _shipped(tmp_path / "gpu", make_record)
    (tmp_path / "gpu" / "broken.json").write_text("{not json")
    with pytest.warns(UserWarning, match="broken.json: skipped, not readable JSON"):
        records = load_gpu_records(tmp_path / "gpu")
    assert [r.label for r in records] == [
        "eager, pad to longest, sdpa", "liger, pad to longest, sdpa", "compile, pad to longest, sdpa"
    ]  # fmt: skip
    assert {r.machine for r in records} == {"NVIDIA H200 @ gpu-01"}  # the failed one inherits its file's machine
    assert records[2].environment["inferred_from"] == "the other records of kernels-window.jsonl"
    frame = gpu_results_frame(records)
    assert frame.columns[:3].tolist() == ["machine", "source", "label"]
    assert frame["validity"].tolist() == ["", "valid", ""] and set(frame["source"]) == {"kernels-window.jsonl"}
    parity = parity_against_eager(records).set_index("backend")
    assert parity.loc["liger, pad to longest, sdpa", "status"] == "pass"
    assert parity.loc["liger, pad to longest, sdpa", "tolerance"] == 2e-2
    # computed from _shipped's gradient norms (exact but for float64 rounding: pytest's default 1e-6 relative)
    assert parity.loc["liger, pad to longest, sdpa", "grad norm rel diff"] == pytest.approx(13.748151 / 13.7403 - 1)
    assert parity.loc["compile, pad to longest, sdpa", "status"] == "not checked"
    assert (
        describe_gpu_results(records, tmp_path / "gpu")
        == "3 shipped GPU record(s) from gpu/, measured on: NVIDIA H200 @ gpu-01"
    )


# The fast tier's papermill run of this notebook (the other variants are slow: the full tier).
def test_notebook_02_on_cpu(runs_root, kernel_env, make_record, tmp_path):
    gpu = tmp_path / "gpu"
    _shipped(gpu, make_record, with_startup=True)
    cells = execute(NOTEBOOK, tmp_path / "02.ipynb", TINY | {"RUN_NAME": "nb02", "GPU_RESULTS": str(gpu)})

    records = {r.label: r for r in RunStore.for_run("nb02").load()}
    assert list(records) == ["kernel doctor", "eager", "liger", "liger swiglu (CPU interpreter)"]
    assert records["kernel doctor"].kind == "doctor" and records["kernel doctor"].metrics["broken"] == {}
    eager, liger = records["eager"], records["liger"]
    assert eager.ok and liger.ok, (eager.reason, liger.reason)
    assert liger.config["liger_kernels"] == ["rope", "cross_entropy"]
    assert liger.metrics["patch_report"] == {
        "rope": True, "rms_norm": False, "swiglu": False, "fused_linear_cross_entropy": False,
        "cross_entropy": True, "compile": False, "reference_linear_attention": False, "fla_delta_rule": False,
        "fused_conv1d": False, "fused_gated_norm": False, "float8_tensorwise": False, "float8_rowwise": False,
        "cut_cross_entropy": False, "regional_compile": False, "flashqla_delta_rule": False,
    }  # fmt: skip
    assert eager.metrics["parity"]["status"] == "baseline"
    parity = liger.metrics["parity"]
    assert parity["status"] == "pass" and parity["tolerance"] == 1e-4
    # Liger in Triton's interpreter reorders fp32 sums: the loss's log-sum-exp over 151,936 logits differs by about
    # log2(151,936) = 17 roundings of 2^-24 (1e-6), 1/100 of its tolerance
    assert parity["loss_rel_diff"] < 1e-6 and parity["grad_norm_rel_diff"] < 1e-6
    failed = records["liger swiglu (CPU interpreter)"]
    assert (
        failed.status == "failed"
        and failed.reason == "Triton's CPU interpreter cannot run this kernel; it runs on a CUDA GPU "
        "(InterpreterError: AttributeError(\"'float' object has no attribute 'to'\"))"
    )
    for record in (eager, liger):
        assert Path(record.artifacts["trace"]).exists() and record.metrics["real_tokens_per_s"] > 0

    assert "not checked on this device: swiglu" in outputs_text(cells["setup"])
    doctor = outputs_text(cells["doctor"])
    assert "no CUDA GPU" in doctor and "attention sdpa" in doctor and "left out by the doctor: nothing" in doctor
    report = outputs_text(cells["patch-report"])
    assert "replaced" in report and "LigerRMSNorm.forward" in report
    assert "failed: not checked on CPU" in outputs_text(cells["cpu-unchecked"])
    assert "pass" in outputs_text(cells["parity"]) and "baseline" in outputs_text(cells["parity"])
    assert "tok/s" in outputs_text(cells["speed"])
    assert "eager -> liger (the fastest other backend)" in outputs_text(cells["kernel-diff"])
    assert "launches per step" in outputs_text(cells["kernel-diff"])
    assert any("application/vnd.holoviews_exec.v0+json" in o.get("data", {}) for o in cells["kernel-diff-plot"].outputs)
    assert "no startup measurement" in outputs_text(cells["export-cache"])
    gpu_parity = outputs_text(cells["gpu-parity"])
    assert "5 shipped GPU record(s)" in gpu_parity and "NVIDIA H200 @ gpu-01" in gpu_parity and "pass" in gpu_parity
    assert "kernels-window.jsonl" in outputs_text(cells["gpu-results"])
    switches = outputs_text(cells["gpu-liger-switches"])
    assert "vs eager" in switches and "2.99" in switches  # 8,000 / 2,674 tok/s on the same padding
    startup = outputs_text(cells["gpu-startup"])
    assert "102.0" in startup and "8.5" in startup and "12.0" in startup  # cold / warm first step: 12.0x
    assert "3 records appended to" in outputs_text(cells["records"])


@pytest.mark.slow
def test_notebook_02_swaps_kernels_under_lora(runs_root, kernel_env, tmp_path):
    """ADAPTER="lora" on the dense preset: eager and Liger both train the same adapters, and Liger's patches and
    parity hold on the PEFT-wrapped model."""
    parameters = TINY | LORA | {"RUN_NAME": "nb02lora", "LIGER_KERNELS": "rope,cross_entropy"}
    cells = execute(NOTEBOOK, tmp_path / "02.ipynb", parameters)
    records = {r.label: r for r in RunStore.for_run("nb02lora").load()}
    assert list(records) == ["kernel doctor", "eager", "liger"]
    eager, liger = records["eager"], records["liger"]
    assert eager.ok and liger.ok, (eager.reason, liger.reason)
    assert_lora([eager, liger])
    assert liger.metrics["patch_report"]["rope"] and liger.metrics["patch_report"]["cross_entropy"]
    assert liger.metrics["parity"]["status"] == "pass", liger.metrics["parity"]
    assert "tok/s" in outputs_text(cells["speed"]) and "pass" in outputs_text(cells["parity"])


def test_suite_scratch_datasets_share_a_workload_across_calls(make_record, tmp_path):
    """The suite writes its synthetic set into each call's scratch folder; shipped records name it by file."""
    from nbhelpers.analysis.records import group_key

    folder = tmp_path / "gpu"
    folder.mkdir()
    for call, scratch in (("call8", "/tmp/d"), ("call11", "/tmp/x")):
        record = make_record(f"{call} longtail", 100.0, dataset=f"{scratch}/longtail.jsonl")
        (folder / f"{call}.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    relative = make_record("relative", 100.0, dataset="data/longtail.jsonl")
    (folder / "call99.jsonl").write_text(json.dumps(relative.to_dict()) + "\n")
    records = {r.label: r for r in load_gpu_records(folder)}
    assert records["call8 longtail"].config["dataset"] == "longtail.jsonl"
    assert group_key(records["call8 longtail"]) == group_key(records["call11 longtail"])
    assert records["relative"].config["dataset"] == "data/longtail.jsonl"


def test_liger_switch_table_compares_switch_sets_with_eager(make_record):
    from nbhelpers.analysis.gpu_results import liger_switch_table

    no_flce = ["rope", "rms_norm", "swiglu", "cross_entropy"]
    flex = {"padding": "packed", "attn": "flex_attention"}
    invalid = make_record("liger, invalid", 99999.0, kernels="liger", **flex)
    invalid.metrics["validity"] = "invalid for speed claims: attention crossed sequence boundaries"
    records = [
        make_record("eager", 16000.0, **flex),
        make_record("liger", 10000.0, kernels="liger", **flex),
        make_record("liger, no FLCE", 17600.0, kernels="liger", liger_kernels=no_flce, **flex),
        make_record("liger, sdpa, no eager beside it", 9000.0, kernels="liger", padding="packed"),
        make_record("compile", 20000.0, kernels="compile", **flex),
        invalid,
    ]
    table = liger_switch_table(records).set_index("kernels")
    assert table.index.tolist() == ["eager", "liger (rope, rms_norm, swiglu, fused_linear_cross_entropy)", "liger"]
    assert table["vs eager"].tolist() == pytest.approx([1.0, 10000 / 16000, 17600 / 16000])
    assert liger_switch_table([]).empty
