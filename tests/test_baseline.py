"""nbhelpers.analysis.baseline: the utilization sentence, the committed H200 baseline, the choice of trace, records."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from nbhelpers.analysis import baseline
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.profiling import load_trace
from nbhelpers.validation import ConfigError

ROOT = Path(__file__).resolve().parents[1]
GPU_DIR = ROOT / "benchmarks" / "gpu"
TRACES = Path(__file__).parent / "fixtures" / "traces"


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
# interpret_utilization


def test_sentence_carries_the_numbers_of_a_busy_but_unproductive_gpu() -> None:
    summary = {
        "unit": "GPU kernels",
        "device": "NVIDIA H200",
        "nominal_utilization": 0.98,
        "sm_efficiency_estimate": 0.5,
        "mfu": 0.06,
        "launches_per_step": 6633.0,
        "short_share_of_launches": 0.25,
        "short_share_of_time": 0.004,
        "short_threshold_us": 10.0,
        "top_categories": [{"category": "elementwise", "launches_per_step": 4487.0, "share_of_time": 0.443}],
    }
    text = baseline.interpret_utilization(summary)
    for piece in ("NVIDIA H200", "98.0%", "50.0%", "6.0%", "16x", "6,633", "25.0%", "0.4%", "elementwise", "4,487"):
        assert piece in text, (piece, text)
    assert "busy, not productive" in text
    assert text.endswith(".") and text.count(". ") == 0  # one sentence


def test_sentence_reads_record_metrics_and_rows() -> None:
    metrics = {"trace_unit": "GPU kernels", "trace_nominal_utilization": 0.9, "trace_mfu": 0.3}
    from_metrics = baseline.interpret_utilization(metrics)
    assert "90.0%" in from_metrics and "30.0%" in from_metrics and "3x" in from_metrics
    assert "no SM-efficiency estimate" in from_metrics
    assert baseline.interpret_utilization(pd.Series(metrics)) == from_metrics


def test_sentence_on_a_cpu_an_idle_device_and_a_missing_mfu() -> None:
    cpu = baseline.interpret_utilization(
        {"unit": "aten operators (CPU)", "device": "cpu", "nominal_utilization": 0.6, "mfu": 0.2,
         "launches_per_step": 691, "peak_flops_source": "measured: 1024x1024 fp32 matmul"}
    )  # fmt: skip
    assert cpu.startswith("On this CPU, aten operators were running 60.0%")
    assert "SM efficiency does not exist on a CPU" in cpu
    assert "nothing ran for 40.0% of the step" in cpu and "20.0%" in cpu and "691 aten operators" in cpu
    assert "measured: 1024x1024 fp32 matmul" in cpu
    unknown = baseline.interpret_utilization({"unit": "GPU kernels", "nominal_utilization": 0.97, "mfu": None})
    assert "97.0%" in unknown and "MFU is unknown" in unknown
    assert "unknown" in baseline.interpret_utilization({})
    impossible = baseline.interpret_utilization({"unit": "GPU kernels", "nominal_utilization": 0.75, "mfu": 3.0})
    assert "300.0%" in impossible and "do not belong to this trace" in impossible


def test_percent_format_keeps_small_shares_readable() -> None:
    assert baseline.fmt_pct(0.98) == "98.0%"
    assert baseline.fmt_pct(0.000203) == "0.02%"
    assert baseline.fmt_pct(0) == "0%"
    assert baseline.fmt_pct(None) == baseline.MISSING
    assert baseline.fmt_us(653_000) == "653.0 ms" and baseline.fmt_us(6_390_000) == "6.39 s"


# ----------------------------------------------------------------------------------------------
# gpu_baseline_summary


def _committed_baseline() -> dict:
    """The newest committed baseline record with trace metrics (the one whose trace data/ ships)."""
    found = []
    for path in sorted(GPU_DIR.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            data = json.loads(line) if line.strip() else {}
            label = str(data.get("config", {}).get("label", ""))
            if data.get("status") == "ok" and label.startswith("baseline") and "trace_mfu" in data["metrics"]:
                found.append(data)
    assert found, "no committed H200 baseline record with trace metrics"
    return found[-1]


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
# Tables on a trace, and the records written


def test_tables_on_a_gpu_trace_and_without_one(tmp_path) -> None:
    trace = load_trace(TRACES / "gpu_before.json")
    headline = baseline.trace_headline(trace).iloc[0]
    assert headline["unit"] == "GPU kernels" and headline["device"] == "NVIDIA H200"
    assert headline["launches / step"] == "4.5"  # 9 events in 2 steps (the fill outside them is not counted)
    categories = baseline.category_table(trace)
    assert {"GEMM", "communication", "optimizer"} <= set(categories["category"])
    assert list(categories.columns)[:3] == ["category", "launches_per_step", "share_of_launches"]
    assert len(baseline.short_table(trace)) == 2 and len(baseline.top_table(trace, 3)) == 3
    summary = baseline.trace_summary(trace, None)
    assert summary["mfu"] is None and summary["sm_efficiency_estimate"] is not None
    assert "MFU is unknown" in baseline.interpret_utilization(summary)
    table = baseline.utilization_table(summary)
    assert table["measure"].tolist()[:3] == ["nominal utilization", "SM-efficiency estimate", "MFU (profiled step)"]
    assert "CPU counterpart" not in baseline.describe_trace(trace)
    for helper in (baseline.category_table, baseline.trace_headline, baseline.category_plot, baseline.timeline_plot):
        assert "No trace to analyse" in helper(None).data
    assert baseline.trace_summary(None, None) is None
    assert "No trace to analyse" in baseline.describe_trace(None)


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
    assert summary["mfu"] == pytest.approx(m["trace_mfu"], rel=1e-6)
    assert summary["nominal_utilization"] == pytest.approx(m["trace_nominal_utilization"], rel=1e-6)
    assert summary["nominal_utilization"] > 0.9 > 0.1 > summary["mfu"] > 0
    assert path.stat().st_size < 5 * 2**20  # a few MB at most
