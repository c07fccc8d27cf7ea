"""A real torch.profiler capture of a tiny model's training step on CPU, analysed over aten operators."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nbhelpers.profiling import (
    CPU_UNIT,
    category_summary,
    launches_per_step,
    load_trace,
    profile_steps,
    summarize,
    utilization,
)

torch = pytest.importorskip("torch")


def _tiny_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    calls = []

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        calls.append(1)

    return step, calls


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    step, calls = _tiny_step()
    folder = tmp_path_factory.mktemp("t")
    path = profile_steps(step, wait=1, warmup=1, active=2, out_path=folder, device_type="cpu")
    return path, len(calls)


def test_capture_writes_gzipped_chrome_trace(captured) -> None:
    path, calls = captured
    assert path.name == "trace.json.gz"
    assert calls == 4  # wait + warmup + active
    with gzip.open(path, "rb") as handle:
        document = json.load(handle)
    assert "traceEvents" in document
    names = {e.get("name") for e in document["traceEvents"]}
    assert {"ProfilerStep#2", "ProfilerStep#3"} <= names
    assert "ProfilerStep#1" not in names  # the warm-up step is not recorded


def test_cpu_capture_analysed_over_aten_ops(captured) -> None:
    trace = load_trace(captured[0])
    assert not trace.is_gpu and trace.unit == CPU_UNIT
    assert trace.num_steps == 2
    ops = trace.ops
    assert set(ops["step"]) == {0, 1}
    per_step = ops[ops["step"] == 0]["name"].value_counts()
    assert per_step["aten::linear"] == 2  # two Linear layers; their addmm is nested, not counted
    assert "aten::addmm" not in per_step
    assert per_step["aten::mse_loss"] == 1
    assert launches_per_step(trace) == len(ops) / 2
    cats = category_summary(trace).set_index("category")
    assert cats.loc["GEMM", "launches_per_step"] >= 2
    assert cats.loc["softmax/loss", "launches_per_step"] >= 1  # mse_loss and its backward
    util = utilization(trace)
    assert 0 < util.busy_us <= util.wall_us and 0 < util.nominal_utilization <= 1
    assert summarize(trace)["unit"] == CPU_UNIT


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_out_path_forms(tmp_path: Path) -> None:
    step, _ = _tiny_step()
    path = profile_steps(step, wait=0, warmup=0, active=1, out_path=tmp_path / "x.json", device_type="cpu")
    assert path == tmp_path / "x.json.gz" and path.exists()
    with pytest.raises(ValueError, match="active=0"):
        profile_steps(step, active=0, out_path=tmp_path, device_type="cpu")
