"""nbhelpers.analysis.baseline: the committed H200 baseline, the choice of trace, key metrics, records."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from nbhelpers.analysis import baseline
from nbhelpers.analysis.gpu_results import record_files
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.validation import ConfigError

ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / "benchmarks" / "gpu"
TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


def _gz(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as raw, gzip.open(target, "wb") as packed:
        shutil.copyfileobj(raw, packed)
    return target


def _record(tmp_path: Path, *, status: str = "ok", trace: bool = True) -> RunRecord:
    artifacts = {}
    if trace:
        artifacts["trace"] = str(_gz(TRACES / "cpu_nesting.json", tmp_path / "run" / "trace.json.gz"))
    metrics = {"model_flops_per_step": 2e6, "peak_flops": 1e12, "peak_flops_source": "measured: test"}
    return RunRecord(
        config={"label": "baseline", "run_name": "t", "padding": "static", "kernels": "eager"},
        status=status,
        reason="" if status == "ok" else "out of memory",
        metrics=metrics if status == "ok" else {},
        environment={"device_name": "CPU x86_64 x2", "hostname": "laptop", "device_type": "cpu"},
        artifacts=artifacts,
    )


# ----------------------------------------------------------------------------------------------
# gpu_baseline_summary


def _committed_baseline() -> dict:
    """The newest committed baseline record with trace metrics (the one whose trace data/ ships)."""
    found = []
    for path in (p for p in record_files(GPU_DIR) if p.suffix == ".jsonl"):  # filed by model and question
        for line in path.read_text().splitlines():
            data = json.loads(line) if line.strip() else {}
            label = str(data.get("config", {}).get("label", ""))
            if data.get("status") == "ok" and label.startswith("baseline") and "trace_mfu" in data["metrics"]:
                found.append(data)
    assert found, "no committed H200 baseline record with trace metrics"
    return max(found, key=lambda data: data["created_at"])


def test_gpu_baseline_summary_reads_the_committed_h200_records() -> None:
    expected = _committed_baseline()
    frame = baseline.gpu_baseline_summary()
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["configuration"] == expected["config"]["label"]
    assert row["launches_per_step"] > 1000
    assert row["nominal_utilization"] > row["mfu"] > 0
    assert row["launches_per_step"] == expected["metrics"]["trace_launches_per_step"]
    assert row["mfu"] == expected["metrics"]["trace_mfu"]
    env = expected["environment"]
    assert row["device"] == env["device_name"]
    assert row["machine"].startswith(env["device_name"]) and f"torch {env['torch']}" in row["machine"]
    assert frame.index[0] == row["machine"] and row["source"].endswith(".jsonl")
    sentence = baseline.describe_gpu_baseline(frame)
    assert env["device_name"] in sentence and f"{row['launches_per_step']:,.0f}" in sentence
    categories = baseline.gpu_baseline_categories()
    assert categories["category"].iloc[0] == expected["metrics"]["trace_top_categories"][0]["category"]


def test_gpu_baseline_summary_picks_the_ok_baseline_and_handles_no_records(tmp_path, make_record) -> None:
    folder = tmp_path / "gpu"
    store = RunStore(folder / "a.jsonl")
    store.append(make_record("baseline: static", None, status="failed", reason="out of memory"))
    store.append(make_record("eager, dynamic", 900.0))
    good = make_record("baseline: static", 1000.0)
    good.metrics |= {"trace_launches_per_step": 5000.0, "trace_nominal_utilization": 0.95, "trace_mfu": 0.07}
    store.append(good)
    (folder / "summary.json").write_text("[]")  # not records, not read
    frame = baseline.gpu_baseline_summary(folder)
    assert frame.iloc[0]["launches_per_step"] == 5000.0 and frame.iloc[0]["source"] == "a.jsonl"
    empty = baseline.gpu_baseline_summary(tmp_path / "nowhere")
    assert empty.empty and "launches_per_step" in empty.columns
    assert "No H200 baseline record" in baseline.describe_gpu_baseline(empty)
    assert baseline.gpu_baseline_categories(tmp_path / "nowhere").empty


# ----------------------------------------------------------------------------------------------
# trace_for, shipped_trace_path, plan_trace


def test_trace_for_picks_the_shipped_trace_or_the_runs(tmp_path) -> None:
    record = _record(tmp_path)
    shipped = _gz(TRACES / "gpu_before.json", tmp_path / "data" / baseline.SHIPPED_TRACE_NAME)
    absent = tmp_path / "elsewhere" / baseline.SHIPPED_TRACE_NAME
    run_trace = Path(record.artifacts["trace"])
    assert baseline.trace_for("shipped", record, shipped) == shipped
    assert baseline.trace_for("shipped", None, shipped) == shipped
    assert baseline.trace_for("run", record, shipped) == run_trace
    assert baseline.trace_for("shipped", record, absent) == run_trace  # the fallback
    assert baseline.trace_for("run", _record(tmp_path, status="failed", trace=False), shipped) is None
    gone = _record(tmp_path)
    gone.artifacts["trace"] = str(tmp_path / "deleted.trace.json.gz")
    assert baseline.trace_for("run", gone) is None
    with pytest.raises(ConfigError, match="TRACE_SOURCE"):
        baseline.trace_for("gpu", record)


def test_shipped_trace_path_and_plan(tmp_path) -> None:
    assert baseline.shipped_trace_path(tmp_path) is None
    shipped = _gz(TRACES / "gpu_before.json", tmp_path / baseline.SHIPPED_TRACE_NAME)
    assert baseline.shipped_trace_path(tmp_path) == shipped
    config = baseline.baseline_config("t", "qwen3-tiny", "default", 2, 64, "static", 2, 1, device="cpu")
    assert (config.label, config.profile, config.kernels, config.padding) == ("baseline", True, "eager", "static")
    plan = baseline.plan_trace("shipped", config, shipped)
    assert (plan.source, plan.run_model, plan.fell_back) == ("shipped", False, False)
    missing = baseline.plan_trace("shipped", config, tmp_path / "missing.trace.json.gz")
    assert (missing.source, missing.run_model, missing.fell_back) == ("run", True, True)
    assert "absent" in missing.message and "benchmarks/gpu" in missing.message
    assert baseline.plan_trace("run", config, shipped).run_model
    with pytest.raises(ConfigError, match="TRACE_SOURCE='both'"):
        baseline.plan_trace("both", config)


# ----------------------------------------------------------------------------------------------
# key_metrics and the records written


def test_key_metrics_of_an_ok_and_a_failed_record(tmp_path, make_record) -> None:
    ok = baseline.key_metrics(make_record("baseline", 1234.5, memory_gib=3.5, mfu=0.25))
    values = dict(zip(ok["measure"], ok["value"]))
    assert values["real tokens / s"] == "1,234.5" and values["MFU"] == "25.0%"
    assert values["machine"] == "NVIDIA H200 @ gpu-01" and values["peak memory"].startswith("3.50 GiB")
    assert "table: NVIDIA H200 bf16 dense" in values["peak FLOP/s"]
    failed = baseline.key_metrics(_record(tmp_path, status="failed", trace=False))
    assert dict(zip(failed["measure"], failed["value"]))["reason"] == "out of memory"
    assert "none" in baseline.key_metrics(None)["value"].iloc[0]


def test_write_records_run_and_shipped(runs_root, tmp_path) -> None:
    config = baseline.baseline_config("w", "qwen3-tiny", "default", 2, 64, "static", 2, 1, device="cpu")
    record = _record(tmp_path)
    run_plan = baseline.plan_trace("run", config, tmp_path / "absent.gz")
    summary = baseline.trace_summary(baseline.load_trace_for("run", record), record)
    written = baseline.write_records("w", run_plan, record, summary)
    assert written["kind"].tolist() == ["step"]
    assert written.attrs["store"] == str(runs_root / "w" / "records.jsonl")

    shipped = _gz(TRACES / "gpu_before.json", tmp_path / "data" / baseline.SHIPPED_TRACE_NAME)
    gpu_record = baseline.gpu_baseline_record()
    shipped_plan = baseline.plan_trace("shipped", config, shipped)
    trace = baseline.load_trace_for("shipped", gpu_record, shipped)
    written = baseline.write_records("w", shipped_plan, gpu_record, baseline.trace_summary(trace, gpu_record))
    assert written["kind"].tolist() == ["trace"]  # the H200 step record is not copied: not measured here
    stored = RunStore.for_run("w").load()
    assert [r.kind for r in stored] == ["step", "trace"]
    kept = stored[1]
    assert kept.environment["device_name"] == gpu_record.environment["device_name"]
    assert kept.config["run_name"] == "w" and kept.label.startswith("shipped trace: baseline")
    assert kept.metrics["kernels_per_step"] == 4.5 and kept.metrics["trace_unit"] == "GPU kernels"
    assert kept.artifacts["trace"] == str(shipped)


def test_shipped_trace_is_the_committed_baseline_step() -> None:
    """data/'s H200 trace gives back the numbers its record holds: same launches, same MFU, util >> MFU."""
    path = baseline.shipped_trace_path()
    if path is None:
        pytest.skip("the shipped H200 trace is absent from data/")
    record = baseline.gpu_baseline_record()
    summary = baseline.trace_summary(baseline.load_trace_for("shipped", record), record)
    m = record.metrics
    assert summary["unit"] == "GPU kernels" and summary["num_sms"] == 132
    assert summary["launches_per_step"] == m["trace_launches_per_step"]
    # the record holds the same float64 computation on the same trace: exact but for summation order (1e-6 is far
    # above float64's 2^-53 per rounding)
    assert summary["mfu"] == pytest.approx(m["trace_mfu"], rel=1e-6)
    assert summary["nominal_utilization"] == pytest.approx(m["trace_nominal_utilization"], rel=1e-6)
    assert summary["nominal_utilization"] > 0.9 > 0.1 > summary["mfu"] > 0
    assert path.stat().st_size < 5 * 2**20  # a few MB at most
