"""Shared fixtures: a temporary runs folder, a RunRecord factory, a kernel spec for papermill."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from nbhelpers.measure.store import RunRecord

# Tests live in one folder per sub-package (tests/<package>/); some share fakes by importing another test module
# (test_tuner's FakeMeasure, test_architecture's layers). Test file names are unique, so every folder is on the path.
TESTS = Path(__file__).resolve().parent
NOT_TESTS = ("fixtures", "__pycache__")
sys.path[:0] = [str(folder) for folder in sorted(TESTS.iterdir()) if folder.is_dir() and folder.name not in NOT_TESTS]

# Inductor's on-disk caches are not keyed by ATEN_CPU_CAPABILITY: C++ compiled for AVX2 and found again in a run under
# ATEN_CPU_CAPABILITY=default fails to build ("'at::vec' has not been declared", torch 2.13). A run under another
# capability keeps its temporary files, Inductor's default cache among them, in a folder of its own (xdist workers
# inherit it).
_CAPABILITY_TMP = f"nbhelpers-tests-{os.environ.get('ATEN_CPU_CAPABILITY', '')}"
if os.environ.get("ATEN_CPU_CAPABILITY") and Path(tempfile.gettempdir()).name != _CAPABILITY_TMP:
    _capability_tmp = Path(tempfile.gettempdir()) / _CAPABILITY_TMP
    _capability_tmp.mkdir(exist_ok=True)
    os.environ["TMPDIR"] = str(_capability_tmp)
    tempfile.tempdir = None  # read TMPDIR again


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh NBHELPERS_RUNS folder for one test."""
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv("NBHELPERS_RUNS", str(root))
    return root


def _make_record(
    label: str,
    tokens_per_s: float | None = 1000.0,
    *,
    kernels: str = "eager",
    padding: str = "static",
    attn: str = "sdpa",
    status: str = "ok",
    reason: str = "",
    device_name: str = "NVIDIA H200",
    hostname: str = "gpu-01",
    device_type: str = "cuda",
    run_name: str = "default",
    memory_gib: float = 10.0,
    mfu: float = 0.1,
    padding_fraction: float = 0.5,
    kernels_per_step: int | None = None,
    parity: str | None = None,
    kind: str = "step",
    batch_size: int = 4,
    max_length: int = 128,
    dtype: str = "auto",
    peak_flops_source: str = "table: NVIDIA H200 bf16 dense",
    **config: Any,
) -> RunRecord:
    """A RunRecord shaped like the ones the notebooks write; ``tokens_per_s=None`` leaves metrics empty."""
    cfg = {
        "run_name": run_name,
        "label": label,
        "model": "qwen3-1.7b",
        "dataset": "default",
        "batch_size": batch_size,
        "max_length": max_length,
        "padding": padding,
        "attn_implementation": attn,
        "kernels": kernels,
        "liger_kernels": ["rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"],
        "dtype": dtype,
        "device": "auto",
        "token_budget": 0,
        "pad_to_multiple_of": 8,
        **config,
    }
    metrics: dict[str, Any] = {}
    if tokens_per_s is not None and status == "ok":
        metrics = {
            "step_time_median_s": batch_size * max_length / tokens_per_s,
            "step_time_iqr_s": 0.01,
            "real_tokens_per_s": tokens_per_s,
            "positions_per_s": tokens_per_s / max(1e-9, 1 - padding_fraction),
            "padding_fraction": padding_fraction,
            "peak_memory_gib": memory_gib,
            "mfu": mfu,
            "peak_flops": 989e12,
            "peak_flops_source": peak_flops_source,
            "loss_first": 12.0,
            "first_step_s": 3.0,
        }
        if kernels_per_step is not None:
            metrics["kernels_per_step"] = kernels_per_step
        if parity is not None:
            metrics["parity"] = {"status": parity, "loss_rel_diff": 1e-4, "tolerance": 1e-3}
    environment = {
        "device_name": device_name,
        "device_type": device_type,
        "hostname": hostname,
        "platform": "jupyterlab",
        "torch": "2.11.0",
        "transformers": "5.17.0",
    }
    return RunRecord(
        config=cfg,
        status=status,
        reason=reason,
        kind=kind,
        notebook="test",
        metrics=metrics,
        environment=environment,
    )


@pytest.fixture
def make_record():
    """Factory: ``make_record("liger", 1500.0, kernels="liger", memory_gib=8.0)``."""
    return _make_record


@pytest.fixture
def h200_and_cpu_records(make_record):
    """The DESIGN.md H200 table (a subset) plus a CPU machine: numbers whose ratios are known (speedup, report)."""
    cpu = {
        "device_name": "cpu",
        "hostname": "laptop",
        "device_type": "cpu",
        "peak_flops_source": "measured: matmul",
    }
    return [
        make_record(
            "sdpa, pad to 2048",
            6367.0,
            memory_gib=111.0,
            mfu=0.08,
            kernels_per_step=6458,
            padding_fraction=0.75,
        ),
        make_record("eager attention", None, attn="eager", status="failed", reason="CUDA out of memory (20 GiB)"),
        make_record(
            "pad to longest",
            4624.0,
            padding="dynamic",
            memory_gib=101.0,
            mfu=0.06,
            padding_fraction=0.61,
        ),
        make_record(
            "packed, flex",
            15059.0,
            padding="packed",
            attn="flex_attention",
            memory_gib=56.0,
            mfu=0.2,
            parity="pass",
        ),
        make_record(
            "liger, static",
            8796.0,
            kernels="liger",
            memory_gib=64.0,
            mfu=0.12,
            kernels_per_step=3742,
        ),
        make_record("liger, bad parity", 20000.0, kernels="liger+compile", memory_gib=30.0, parity="fail"),
        make_record("cpu eager", 210.0, memory_gib=1.5, mfu=0.01, **cpu),
        make_record("cpu packed", 340.5, padding="packed", memory_gib=1.25, mfu=0.02, parity="pass", **cpu),
        make_record("a trace", 1.0, kind="trace"),
    ]


@pytest.fixture(scope="session")
def kernel_env(tmp_path_factory: pytest.TempPathFactory):
    """A ``python3`` kernel spec that runs this interpreter, found first through JUPYTER_PATH.

    The venv's own ipykernel spec already resolves to this interpreter; this guards against a
    user-level ``python3`` spec on the machine pointing at another Python without nbhelpers.
    """
    import os

    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(root) + (os.pathsep + old if old else "")
    yield root
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old
