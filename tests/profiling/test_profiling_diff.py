"""Diff of two hand-written traces (gpu_before.json vs gpu_after.json), answers worked out by hand.

Per step (both traces have two ProfilerSteps):
  name                before: calls, us     after: calls, us     status
  GEMM                1.0, 40.0             1.0, 41.0            unchanged (1 us <= 5% of 41)
  add (elementwise)   1.0, 4.0              2.0, 4.0             changed (calls)
  NCCL all-reduce     0.5, 20.0             0.5, 5.0             changed (time)
  Memcpy DtoD         0.5, 2.5              -                    removed
  reduce (mean)       0.5, 4.0              -                    removed
  FusedAdam           0.5, 25.0             0.5, 25.0            unchanged
  triton_poi          0.5, 1.5              0.5, 1.5             unchanged
  _rms_norm_forward   -                     1.0, 5.0             added
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbhelpers.profiling import diff_categories, diff_summary, diff_traces, load_trace

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"


@pytest.fixture(scope="module")
def pair():
    return load_trace(TRACES / "gpu_before.json"), load_trace(TRACES / "gpu_after.json")


def test_diff_traces_statuses(pair) -> None:
    before, after = pair
    diff = diff_traces(before, after)
    assert len(diff) == 8
    status = dict(zip(diff["name"].str[:24], diff["status"]))
    assert status == {
        "ncclDevKernel_AllReduce_": "changed",
        "_rms_norm_forward_kernel": "added",
        "void at::native::reduce_": "removed",
        "Memcpy DtoD (Device -> D": "removed",
        "sm90_xmma_gemm_bf16bf16_": "unchanged",
        "triton_poi_fused_add_mul": "unchanged",
        "void at::native::vectori": "changed",
        "void multi_tensor_apply_": "unchanged",
    }
    # sorted by the size of the time change per step, ties by name
    assert diff["delta_time_per_step_us"].tolist() == [-15.0, 5.0, -4.0, -2.5, 1.0, 0.0, 0.0, 0.0]
    rms = diff.set_index("name").loc["_rms_norm_forward_kernel"]
    assert (rms["calls_per_step_before"], rms["calls_per_step_after"]) == (0.0, 1.0)
    assert (rms["time_per_step_us_before"], rms["time_per_step_us_after"]) == (0.0, 5.0)
    assert rms["category"] == "Triton/Liger"
    add = diff[diff["name"].str.contains("CUDAFunctor_add")].iloc[0]
    assert (add["calls_per_step_before"], add["calls_per_step_after"], add["delta_calls_per_step"]) == (
        1,
        2,
        1,
    )
    memcpy = diff[diff["name"].str.startswith("Memcpy")].iloc[0]
    assert memcpy["category"] == "memcpy/memset" and memcpy["time_per_step_us_after"] == 0.0


def test_diff_tolerance(pair) -> None:
    before, after = pair
    strict = diff_traces(before, after, rel_tol=0.0)
    assert strict.set_index("name").loc[strict["name"].iloc[4], "status"] == "changed"  # the GEMM, +1 us
    assert (strict["status"] == "unchanged").sum() == 2


def test_diff_categories(pair) -> None:
    before, after = pair
    cats = diff_categories(*pair).set_index("category")
    assert list(cats.index) == [
        "communication",
        "Triton/Liger",
        "reduction",
        "memcpy/memset",
        "GEMM",
        "elementwise",
        "optimizer",
    ]
    assert cats.loc["communication", "time_per_step_us_before"] == 20.0
    assert cats.loc["communication", "time_per_step_us_after"] == 5.0
    assert cats.loc["Triton/Liger", "time_per_step_us_after"] == 6.5
    assert cats.loc["Triton/Liger", "launches_per_step_after"] == 1.5
    assert cats.loc["reduction", "launches_per_step_after"] == 0.0
    assert cats.loc["elementwise", "delta_launches_per_step"] == 1.0
    assert cats["delta_time_per_step_us"].sum() == pytest.approx(81.5 - 97.0)


def test_diff_summary(pair) -> None:
    summary = diff_summary(*pair)
    assert json.loads(json.dumps(summary)) == summary
    assert summary["launches_per_step_before"] == 4.5
    assert summary["launches_per_step_after"] == 5.5
    assert summary["kernel_time_per_step_us_before"] == 97.0
    assert summary["kernel_time_per_step_us_after"] == 81.5  # (61 + 102) / 2
    assert summary["kernel_time_ratio"] == pytest.approx(81.5 / 97)
    assert summary["names"] == {"removed": 2, "added": 1, "changed": 2, "unchanged": 3}


def test_diff_with_itself_is_unchanged(pair) -> None:
    before, _ = pair
    assert set(diff_traces(before, before)["status"]) == {"unchanged"}
