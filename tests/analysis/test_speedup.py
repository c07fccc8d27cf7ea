"""The speedup table and the waterfall (``analysis.speedup``): baselines per group, failed rows kept."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis.speedup import build_table, waterfall_steps

GPU = "NVIDIA H200 @ gpu-01"
CPU = "cpu @ laptop"


def test_table_rows_baselines_and_failed_rows(h200_and_cpu_records):
    table = build_table(h200_and_cpu_records)
    assert len(table) == 8  # every step record, the failed one included; the trace is not a step
    rows = table.set_index("label")
    assert rows.loc["eager attention", "status"] == "failed"
    assert rows.loc["eager attention", "reason"] == "CUDA out of memory (20 GiB)"
    assert math.isnan(rows.loc["eager attention", "speedup"])
    assert rows.loc["packed, flex", "speedup"] == pytest.approx(15059 / 6367)
    assert rows.loc["liger, static", "speedup"] == pytest.approx(8796 / 6367)
    assert rows.loc["liger, static", "kernels/step"] == 3742
    assert rows.loc["liger, bad parity", "parity"] == "fail"
    assert rows.loc["cpu packed", "speedup"] == pytest.approx(340.5 / 210.0)  # over the CPU's own baseline
    assert set(rows.loc[["cpu eager", "cpu packed"], "baseline"]) == {"cpu eager"}
    assert list(table["machine"].unique()) == [GPU, CPU]
    # an explicit baseline label
    rows = build_table(h200_and_cpu_records[:6], baseline_label="liger, static").set_index("label")
    assert rows.loc["sdpa, pad to 2048", "speedup"] == pytest.approx(6367 / 8796)
    with pytest.raises(ValueError, match="matches no measured step record"):
        build_table(h200_and_cpu_records, baseline_label="no such label")


def test_waterfall_uses_measured_records_only(h200_and_cpu_records):
    steps = waterfall_steps(h200_and_cpu_records)
    gpu = steps[steps["machine"] == GPU].set_index("stage")
    assert list(gpu.index) == ["baseline", "kernels only", "padding only", "kernels + padding"]
    assert gpu.loc["baseline", "label"] == "sdpa, pad to 2048"
    assert gpu.loc["kernels only", "label"] == "liger, static"  # "bad parity" is faster but failed parity
    assert gpu.loc["padding only", "label"] == "pad to longest"  # packed+flex also changed attention
    assert gpu.loc["padding only", "speedup"] == pytest.approx(4624 / 6367)
    # a single change's step gain is its own speedup, not a ratio to the kernels-only stage before it
    assert gpu.loc["padding only", "step gain"] == pytest.approx(4624 / 6367)
    assert gpu.loc["kernels + padding", "label"] == "packed, flex"  # padding and attention both changed
    assert gpu.loc["kernels + padding", "real tok/s"] == 15059.0
    assert gpu.loc["kernels + padding", "step gain"] == pytest.approx(15059 / 4624)
    assert set(gpu["note"]) == {""}
    cpu = steps[steps["machine"] == CPU].set_index("stage")
    assert cpu.loc["kernels only", "label"] == "not measured"
    assert math.isnan(cpu.loc["kernels only", "speedup"])
    assert cpu.loc["padding only", "label"] == "cpu packed"
    assert cpu.loc["kernels only", "note"] == (
        "not measured: no record in this workload changes only the kernels (kernels, Liger switches or attention) "
        "at the baseline's padding"
    )


def test_waterfall_says_why_a_stage_is_missing(make_record):
    """Records of one kind in another workload, or failed ones here, are named; eager's unused Liger switches
    do not make an eager record a kernel change."""
    base = make_record("baseline", 100.0, run_name="r")
    eager_again = make_record("eager", 101.0, run_name="r", liger_kernels=[])
    liger = make_record("liger", 150.0, kernels="liger", run_name="r", batch_size=1, max_length=64)
    packed = make_record("packed", 200.0, padding="packed", run_name="r")
    failed = make_record("liger, packed", status="failed", reason="out of memory", kernels="liger", padding="packed",
                         run_name="r")  # fmt: skip
    steps = waterfall_steps([base, eager_again, liger, packed, failed]).set_index("stage")
    main = steps[steps["workload"] == steps.loc["baseline", "workload"].iloc[0]]
    assert main["label"].tolist() == ["baseline", "not measured", "packed", "not measured"]
    kernels_note = main.loc["kernels only", "note"]
    assert kernels_note.startswith("not measured: no record in this workload changes only the kernels")
    assert "records of this kind exist in other workloads: qwen3-1.7b on default, b1x64" in kernels_note
    assert main.loc["kernels + padding", "note"] == (
        "not measured: every record that changes both the kernels (or attention) and the padding failed or failed "
        "parity (liger, packed: out of memory)"
    )


def test_every_speedup_carries_its_interval_and_a_thin_record_is_marked(make_record):
    from nbhelpers.formatting import format_table, format_waterfall

    base = make_record("eager, static", 100.0, padding="static")
    fast = make_record("liger, packed", 300.0, padding="packed", kernels="liger")
    base.metrics.update(real_tokens_per_s_interval=[95.0, 105.0], timed_steps=12, thin=False)
    fast.metrics.update(real_tokens_per_s_interval=[280.0, 330.0], timed_steps=2, thin=True)
    rows = build_table([base, fast]).set_index("label")
    low, high = rows.loc["liger, packed", "speedup interval"]
    assert low == pytest.approx(280 / 105) and high == pytest.approx(330 / 95)
    assert bool(rows.loc["liger, packed", "thin"]) and not bool(rows.loc["eager, static", "thin"])
    assert rows.loc["liger, packed", "timed steps"] == 2
    shown = format_table(build_table([base, fast])).set_index("label")
    assert shown.loc["liger, packed", "speedup interval"] == "2.67-3.47x"
    assert shown.loc["liger, packed", "thin"] == "thin" and shown.loc["eager, static", "thin"] == ""
    steps = format_waterfall(waterfall_steps([base, fast])).set_index("stage")
    assert steps.loc["kernels + padding", "speedup interval"] == "2.67-3.47x"
    assert steps.loc["kernels + padding", "thin"] == "thin"


def test_a_missing_combination_says_which_kernels_to_measure_with_which_padding(make_record):
    """Both single stages measured, their combination not: the note names the kernels to add to notebook 03."""
    base = make_record("eager, static", 100.0, padding="static")
    compiled = make_record("compile", 120.0, kernels="compile", padding="static")
    packed = make_record("eager, packed", 150.0, padding="packed")
    steps = waterfall_steps([base, compiled, packed]).set_index("stage")
    assert steps.loc["kernels + padding", "label"] == "not measured"
    assert steps.loc["kernels + padding", "note"] == (
        "not measured: no record in this workload changes both the kernels (or attention) and the padding; "
        "the fastest kernels (compile) were not measured with the fastest padding (eager, packed): "
        "set notebook 03's KERNELS to 'eager,compile' to measure both"
    )
