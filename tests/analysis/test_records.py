"""Record logic (``analysis.records``): cross-machine refusal, one workload per speedup, baselines, numbers."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis.records import CrossMachineError, default_baseline, metric_value, speedup
from nbhelpers.analysis.speedup import build_table, waterfall_steps


def test_speedup_refuses_other_machines_and_other_runs(make_record):
    gpu = make_record("a", 200.0)
    other_gpu = make_record("b", 100.0, hostname="gpu-02")
    other_run = make_record("c", 100.0, run_name="sweep-point-2")
    assert speedup(gpu, make_record("base", 100.0)) == 2.0
    message = "only a ratio of records from one run on one machine"
    with pytest.raises(CrossMachineError, match=message) as info:
        speedup(gpu, other_gpu)
    assert "NVIDIA H200 @ gpu-02" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(CrossMachineError, match="from run 'sweep-point-2'"):
        speedup(gpu, other_run)
    with pytest.raises(ValueError, match="no measured throughput.*status 'failed': OOM"):
        speedup(make_record("x", None, status="failed", reason="OOM"), gpu)


def test_default_baseline_falls_back_to_first_ok(make_record):
    recs = [
        make_record("failed static", None, status="failed", reason="x"),
        make_record("dynamic", 100.0, padding="dynamic"),
        make_record("liger", 150.0, kernels="liger", padding="dynamic"),
    ]
    assert set(build_table(recs)["baseline"]) == {"dynamic"}
    assert default_baseline(recs).config["label"] == "dynamic"


def test_speedups_only_divide_one_workload(make_record):
    small = [make_record("eager small", 100.0), make_record("liger small", 150.0, kernels="liger")]
    large = [
        make_record("eager large", 400.0, padding="dynamic", batch_size=8),
        make_record("liger large", 1000.0, kernels="liger", padding="dynamic", batch_size=8),
    ]
    with pytest.raises(ValueError, match="a speedup compares one workload"):
        speedup(large[1], small[0])
    table = build_table(small + large).set_index("label")
    assert table.loc["liger small", "speedup"] == pytest.approx(1.5)
    assert table.loc["eager large", "speedup"] == pytest.approx(1.0)  # its own workload's baseline
    assert table.loc["liger large", "speedup"] == pytest.approx(2.5)
    steps = waterfall_steps(small + large)
    assert set(steps["workload"].str.contains("b8x128")) == {True, False}
    kernels = steps[steps["stage"] == "kernels only"].set_index("workload")["speedup"]
    assert sorted(kernels.round(3)) == [1.5, 2.5]


def test_metric_value_is_a_finite_number_or_the_missing_value(make_record):
    record = make_record("x", 100.0)
    record.metrics |= {"flag": True, "text": "12", "nan": math.nan, "inf": math.inf, "count": 7}
    assert metric_value(record, "count") == 7.0 and isinstance(metric_value(record, "count"), float)
    for key in ("absent", "flag", "text", "nan", "inf"):
        assert math.isnan(metric_value(record, key)), key
        assert metric_value(record, key, None) is None, key
    assert metric_value(record, "absent", math.inf) == math.inf
    assert math.isnan(metric_value(record, "nan", None, finite=False))  # kept: a diverged loss fails parity
    assert metric_value(record, "inf", None, finite=False) == math.inf
    assert metric_value(record, "flag", None, finite=False) is None
