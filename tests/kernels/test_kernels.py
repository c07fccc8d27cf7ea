"""Kernel backends: patch detection per switch (in a subprocess), isolation, clear failures, report tables."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nbhelpers.analysis.kernel_diff import best_other_backend, kernel_diff, patch_report_frame, patch_reports_frame
from nbhelpers.kernels.backends import apply_backend
from nbhelpers.kernels.registry import KERNEL_CHECKS, REPORT_KEYS, requested_kernels
from nbhelpers.kernels.spec import BackendUnavailable
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_config

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
SWITCHES = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy", "cross_entropy")

# Imports once, then forks one child per backend so every patch starts from an unpatched process.
PROBE = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from nbhelpers.kernels.backends import apply_backend, patch_report
from nbhelpers.models.loading import build_model
patch_report(build_model("qwen3-tiny"))  # pay the lazy imports once, before forking
import torch._dynamo  # noqa: F401
results = {}
for name in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        kernels, _, switch = name.partition(":")
        model = build_model("qwen3-tiny")
        before = patch_report(model)
        after = apply_backend(model, kernels, (switch,) if switch else (), "cpu")
        fresh = patch_report(build_model("qwen3-tiny"))
        os.write(write, json.dumps({"before": before, "after": after, "fresh": fresh}).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[name] = json.loads(pipe.read() or "null")
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


def _off(**on: bool) -> dict[str, bool]:
    return dict.fromkeys(REPORT_KEYS, False) | on


@pytest.mark.slow
def test_patch_report_detects_each_switch_on_the_instance():
    names = [f"liger:{s}" for s in SWITCHES] + ["compile:"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], capture_output=True, text=True, timeout=1800, check=True
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for name in names:
        assert results[name]["before"] == _off(), name
    for switch in SWITCHES:
        assert results[f"liger:{switch}"]["after"] == _off(**{switch: True}), switch
    assert results["compile:"]["after"] == _off(compile=True)
    # Liger rebinds module-level names: a model built later in the same process is patched too,
    # except for the fused linear cross-entropy, which Liger binds to the one instance.
    for switch in ("rope", "rms_norm", "swiglu", "cross_entropy"):
        assert results[f"liger:{switch}"]["fresh"] == _off(**{switch: True}), switch
    assert results["liger:fused_linear_cross_entropy"]["fresh"] == _off()
    assert results["compile:"]["fresh"] == _off()


@pytest.mark.slow
def test_runner_keeps_the_parent_process_unpatched(runs_root):
    import torch
    import transformers.models.qwen3.modeling_qwen3 as modeling

    from nbhelpers.kernels.backends import patch_report
    from nbhelpers.models.loading import build_model

    original_rope, original_norm = modeling.apply_rotary_pos_emb, modeling.Qwen3RMSNorm
    original_mlp, original_ce = modeling.Qwen3MLP, torch.nn.functional.cross_entropy
    config = RunConfig(
        run_name="iso", label="liger all module-level", num_samples=2, batch_size=1, max_length=48,
        padding="static", steps=1, warmup=0, kernels="liger",
        liger_kernels=("rope", "rms_norm", "swiglu", "cross_entropy"),
    )  # fmt: skip
    record = run_config(config)
    # The child patched and ran Liger's RMSNorm, which Triton's CPU interpreter cannot execute.
    assert not record.ok
    assert record.reason.startswith("Triton's CPU interpreter cannot run this kernel; it runs on a CUDA GPU")
    assert "InterpreterError" in record.reason and "'float' object has no attribute 'to'" in record.reason
    assert "Traceback (most recent call last)" in record.metrics["traceback"]  # the whole trace, kept
    assert "\n" not in record.reason
    assert modeling.apply_rotary_pos_emb is original_rope
    assert modeling.Qwen3RMSNorm is original_norm and modeling.Qwen3RMSNorm.__module__ == modeling.__name__
    assert modeling.Qwen3MLP is original_mlp
    assert torch.nn.functional.cross_entropy is original_ce
    assert patch_report(build_model("qwen3-tiny")) == _off()


def test_liger_on_cpu_without_interpreter_is_a_failed_record(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    config = RunConfig(num_samples=2, batch_size=1, max_length=48, steps=1, warmup=0, kernels="liger", device="cpu")
    record = run_config(config, isolate=False)
    assert not record.ok and set(record.metrics) == {"traceback"}  # no measurement, the whole trace kept
    assert record.reason.startswith("BackendUnavailable: no Triton driver on CPU")
    assert "BackendUnavailable" in record.metrics["traceback"].splitlines()[-1]


def test_unsupported_model_type_names_the_supported_ones(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model = types.SimpleNamespace(config=types.SimpleNamespace(model_type="not-a-model"))
    with pytest.raises(BackendUnavailable, match=r"no patch for model_type='not-a-model'; supported: .*qwen3"):
        apply_backend(model, "liger", ("rope",), "cpu")
    with pytest.raises(BackendUnavailable, match="backends are eager, liger, compile, liger\\+compile"):
        apply_backend(model, "triton", (), "cpu")


def test_patch_report_frame_verdicts():
    report = _off(rope=True, cross_entropy=True)
    frame = patch_report_frame(report, requested=("rope", "swiglu"))
    assert frame["kernel"].tolist() == list(REPORT_KEYS)
    verdicts = dict(zip(frame["kernel"], frame["verdict"]))
    assert verdicts == {
        "reference_linear_attention": "off",
        "rope": "replaced",
        "rms_norm": "off",
        "swiglu": "NOT replaced",
        "fused_linear_cross_entropy": "off",
        "cross_entropy": "extra",
        "compile": "off",
        "fla_delta_rule": "off",
        "fused_conv1d": "off",
        "fused_gated_norm": "off",
        "float8_tensorwise": "off",
        "float8_rowwise": "off",
        "cut_cross_entropy": "off",
        "regional_compile": "off",
        "flashqla_delta_rule": "off",
    }
    assert frame.loc[frame["kernel"] == "rms_norm", "checked"].item() == KERNEL_CHECKS["rms_norm"]
    assert requested_kernels("liger+compile", ("rope",)) == ("rope", "compile")
    assert requested_kernels("eager", ("rope",)) == ()


def test_patch_reports_frame_one_column_per_record(make_record):
    liger = make_record("liger", kernels="liger", liger_kernels=["rope", "fused_linear_cross_entropy"])
    liger.metrics["patch_report"] = _off(rope=True, fused_linear_cross_entropy=True)
    broken = make_record("compile", status="failed", reason="boom", kernels="compile")
    frame = patch_reports_frame([liger, broken]).set_index("kernel")
    assert frame.loc["rope", "liger"] == "replaced" and frame.loc["swiglu", "liger"] == "off"
    assert frame.loc["compile", "compile"] == "failed" and frame.loc["rope", "compile"] == "off"


def test_kernel_diff_between_two_profiled_records(make_record):
    before = make_record("eager", 1000.0, memory_gib=20.0)
    after = make_record("liger", 1500.0, kernels="liger", memory_gib=12.0)
    slower = make_record("compile", 1200.0, kernels="compile")
    failed_parity = make_record("liger+compile", 3000.0, kernels="liger+compile", parity="fail")
    before.artifacts["trace"] = str(TRACES / "gpu_before.json")
    for record in (after, slower, failed_parity):
        record.artifacts["trace"] = str(TRACES / "gpu_after.json")
    assert best_other_backend([before, after, slower, failed_parity], "eager") is after
    assert best_other_backend([before], "eager") is None
    diff = kernel_diff(before, after)
    summary = diff["summary"].set_index("measure")
    assert list(diff["summary"].columns) == ["measure", "eager", "liger", "after / before"]
    assert summary.loc["peak memory GiB", "eager"] == 20.0 and summary.loc["peak memory GiB", "liger"] == 12.0
    assert summary.loc["peak memory GiB", "after / before"] == pytest.approx(0.6)
    assert (summary.loc["launches per step", "eager"], summary.loc["launches per step", "liger"]) == (4.5, 5.5)
    assert set(diff["kernels"]["status"]) <= {"removed", "added", "changed", "unchanged"}
    assert diff["names"].loc["kernel names"].sum() == len(diff["kernels"])
    assert {"category", "time_per_step_us_before", "time_per_step_us_after"} <= set(diff["categories"].columns)
    with pytest.raises(ValueError, match="profile=True"):
        kernel_diff(make_record("plain"), after)
