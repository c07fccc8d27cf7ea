"""The utilization sentence (``profiling.verdict``): nominal utilization beside SM efficiency and MFU."""

from __future__ import annotations

import pandas as pd

from nbhelpers.profiling.verdict import interpret_utilization


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
    text = interpret_utilization(summary)
    for piece in ("NVIDIA H200", "98.0%", "50.0%", "6.0%", "16x", "6,633", "25.0%", "0.4%", "elementwise", "4,487"):
        assert piece in text, (piece, text)
    assert "busy, not productive" in text
    assert text.endswith(".") and text.count(". ") == 0  # one sentence


def test_sentence_reads_record_metrics_and_rows() -> None:
    metrics = {"trace_unit": "GPU kernels", "trace_nominal_utilization": 0.9, "trace_mfu": 0.3}
    from_metrics = interpret_utilization(metrics)
    assert "90.0%" in from_metrics and "30.0%" in from_metrics and "3x" in from_metrics
    assert "no SM-efficiency estimate" in from_metrics
    assert interpret_utilization(pd.Series(metrics)) == from_metrics


def test_sentence_on_a_cpu_an_idle_device_and_a_missing_mfu() -> None:
    cpu = interpret_utilization(
        {"unit": "aten operators (CPU)", "device": "cpu", "nominal_utilization": 0.6, "mfu": 0.2,
         "launches_per_step": 691, "peak_flops_source": "measured: 1024x1024 fp32 matmul"}
    )  # fmt: skip
    assert cpu.startswith("On this CPU, aten operators were running 60.0%")
    assert "SM efficiency does not exist on a CPU" in cpu
    assert "nothing ran for 40.0% of the step" in cpu and "20.0%" in cpu and "691 aten operators" in cpu
    assert "measured: 1024x1024 fp32 matmul" in cpu
    unknown = interpret_utilization({"unit": "GPU kernels", "nominal_utilization": 0.97, "mfu": None})
    assert "97.0%" in unknown and "MFU is unknown" in unknown
    assert "unknown" in interpret_utilization({})
    impossible = interpret_utilization({"unit": "GPU kernels", "nominal_utilization": 0.75, "mfu": 3.0})
    assert "300.0%" in impossible and "do not belong to this trace" in impossible
