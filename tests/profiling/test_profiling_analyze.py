"""Analyses on hand-written traces whose answers are worked out by hand.

gpu_before.json: ProfilerStep#3 = [1000, 1100], ProfilerStep#4 = [1100, 1200] (us), 132 SMs.
  step 3: GEMM [1010, 1050] s7 grid 66 | NCCL [1030, 1070] s20 grid 2 | add [1052, 1056] s7 grid 264
          | Memcpy DtoD [1080, 1085] s7
  step 4: GEMM [1110, 1150] | add [1152, 1156] | reduce [1160, 1168] grid 1 | FusedAdam [1170, 1220] grid 264
          | triton_poi [1222, 1225] grid 132: starts after the step ends, but its launch (correlation 10)
          is at 1195, inside step 4
  outside: a fill kernel at 900 launched at 890 (before any step): not counted.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nbhelpers.profiling import (
    CPU_UNIT,
    GPU_UNIT,
    busy_time_us,
    category_summary,
    idle_gaps,
    kernel_duration_histogram,
    launches_per_step,
    load_trace,
    merge_intervals,
    short_kernels,
    step_timeline,
    summarize,
    top_kernels,
    trace_from_json,
    utilization,
)
from nbhelpers.profiling.analyze import KERNEL_NAME_CHARS

TRACES = Path(__file__).parents[1] / "fixtures" / "traces"
GEMM = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)


@pytest.fixture(scope="module")
def before():
    return load_trace(TRACES / "gpu_before.json")


def test_parse_metadata_and_steps(before) -> None:
    assert before.is_gpu and before.unit == GPU_UNIT
    assert before.num_steps == 2
    assert before.step_spans["name"].tolist() == ["ProfilerStep#3", "ProfilerStep#4"]
    assert before.window == (1000.0, 1225.0)
    assert before.num_sms == 132
    assert before.device_properties[0]["name"] == "NVIDIA H200"
    assert before.distributed_info == {"backend": "nccl", "rank": 0, "world_size": 2}
    assert before.metadata["traceName"] == "hand-written: two steps, two streams"
    assert len(before.kernels) == 10  # every device event, the one before the steps too
    assert len(before.ops) == 9  # those inside a step
    assert before.kernels["step"].tolist() == [-1, 0, 0, 0, 0, 1, 1, 1, 1, 1]


def test_kernel_columns(before) -> None:
    gemm = before.kernels[before.kernels["name"] == GEMM].iloc[0]
    assert gemm["grid"] == (66, 1, 1) and gemm["block"] == (384, 1, 1)
    assert gemm["registers_per_thread"] == 168 and gemm["blocks"] == 66
    assert gemm["stream"] == 7 and gemm["device"] == 0 and gemm["category"] == "GEMM"
    memcpy = before.kernels[before.kernels["kind"] == "memcpy"].iloc[0]
    assert memcpy["category"] == "memcpy/memset" and memcpy["grid"] is None and np.isnan(memcpy["blocks"])
    late = before.kernels[before.kernels["name"] == "triton_poi_fused_add_mul_0"].iloc[0]
    assert late["launch_ts_us"] == 1195.0 and late["step"] == 1


def test_gzip_and_bare_list(tmp_path: Path, before) -> None:
    packed = tmp_path / "t.json.gz"
    with open(TRACES / "gpu_before.json", "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert len(load_trace(packed).ops) == 9
    events = json.loads((TRACES / "gpu_before.json").read_text())["traceEvents"]
    bare = trace_from_json(events)
    assert len(bare.ops) == 9 and bare.device_properties == [] and bare.num_sms is None


def test_launch_counts_and_category_shares(before) -> None:
    assert launches_per_step(before) == 4.5
    summary = category_summary(before)
    assert summary.attrs["unit"] == GPU_UNIT
    assert summary["category"].tolist() == [
        "GEMM",
        "optimizer",
        "communication",
        "elementwise",
        "reduction",
        "memcpy/memset",
        "Triton/Liger",
    ]
    row = summary.set_index("category")
    assert row.loc["GEMM", "launches"] == 2
    assert row.loc["GEMM", "launches_per_step"] == 1.0
    assert row.loc["GEMM", "time_us"] == 80.0
    assert row.loc["GEMM", "time_per_step_us"] == 40.0
    assert row.loc["GEMM", "share_of_time"] == pytest.approx(80 / 194)
    assert row.loc["GEMM", "share_of_launches"] == pytest.approx(2 / 9)
    assert row.loc["elementwise", "mean_us"] == 4.0
    assert row.loc["optimizer", "time_per_step_us"] == 25.0
    assert row["launches"].sum() == 9 and row["time_us"].sum() == 194.0


def test_short_kernels(before) -> None:
    short = short_kernels(before, threshold_us=10.0).set_index("duration")
    assert short.loc["< 10 us", "launches"] == 5  # add x2 (4 us), memcpy (5), reduce (8), triton (3)
    assert short.loc["< 10 us", "time_us"] == 24.0
    assert short.loc["< 10 us", "share_of_launches"] == pytest.approx(5 / 9)
    assert short.loc["< 10 us", "share_of_time"] == pytest.approx(24 / 194)
    assert short.loc[">= 10 us", "launches"] == 4 and short.loc[">= 10 us", "time_us"] == 170.0
    assert short_kernels(before, threshold_us=5.0).iloc[0]["launches"] == 3  # 4, 4, 3 us


def test_busy_time_merges_overlap_on_two_streams() -> None:
    # stream 7: [0, 10], [12, 20]; stream 20: [5, 15] overlaps both; [30, 31] alone
    assert busy_time_us([(0, 10), (12, 20), (5, 15), (30, 31)]) == 21.0
    assert busy_time_us(np.array([[5.0, 6.0], [0.0, 10.0]])) == 10.0  # nested
    assert busy_time_us([(0, 1), (1, 2)]) == 2.0  # touching
    assert busy_time_us([]) == 0.0
    starts, ends = merge_intervals(np.array([3.0, 0.0, 8.0]), np.array([6.0, 4.0, 9.0]))
    assert starts.tolist() == [0.0, 8.0] and ends.tolist() == [6.0, 9.0]


def test_utilization_sm_efficiency_and_mfu(before) -> None:
    util = utilization(before, model_flops_per_step=56.25e9, peak_flops=1e15)
    assert util.wall_us == 225.0
    assert util.busy_us == 170.0  # 194 us of kernels, 24 us of it overlapping the NCCL kernel
    assert util.nominal_utilization == pytest.approx(170 / 225)
    # (0.5*80 + 1*8 + 2/132*40 + 1/132*8 + 1*50 + 1*3) / 189 us of kernels with a grid
    assert util.sm_efficiency_estimate == pytest.approx(305 / 567)
    assert util.num_sms == 132 and util.steps == 2 and util.step_time_us == 112.5
    assert util.mfu == pytest.approx(0.5)  # 56.25 GFLOP / 112.5 us / 1 PFLOP/s
    assert utilization(before).mfu is None
    assert utilization(before, num_sms=66).sm_efficiency_estimate == pytest.approx(
        (80 + 8 + 40 * 2 / 66 + 8 / 66 + 50 + 3) / 189
    )


def test_idle_gaps(before) -> None:
    gaps = idle_gaps(before, min_gap_us=1.0)
    # [1000,1010] [1070,1080] [1085,1110] [1150,1152] [1156,1160] [1168,1170] [1220,1222]
    assert gaps.count == 7
    assert gaps.total_us == 55.0 and gaps.idle_us == 55.0
    assert gaps.largest_us == 25.0
    assert gaps.share_of_wall == pytest.approx(55 / 225)
    assert gaps.gaps.iloc[0][["start_us", "end_us"]].tolist() == [1085.0, 1110.0]
    wide = idle_gaps(before, min_gap_us=5.0)
    assert (wide.count, wide.total_us, wide.idle_us) == (3, 45.0, 55.0)


def test_top_kernels(before) -> None:
    top = top_kernels(before, n=4)
    assert len(top) == 4
    assert top["name"].iloc[0] == GEMM
    assert top["calls"].tolist() == [2, 1, 1, 1]
    assert top["total_us"].tolist() == [80.0, 50.0, 40.0, 8.0]
    assert top["mean_us"].iloc[0] == 40.0 and top["calls_per_step"].iloc[0] == 1.0
    assert top["category"].tolist() == ["GEMM", "optimizer", "communication", "reduction"]  # ties by name


def test_histogram_and_step_timeline(before) -> None:
    hist = kernel_duration_histogram(before, bins=4)
    assert len(hist) == 4
    assert hist["launches"].sum() == 9 and hist["time_us"].sum() == pytest.approx(194.0)
    assert hist["bin_left_us"].iloc[0] == pytest.approx(3.0) and hist["bin_right_us"].iloc[-1] == 50.0
    assert np.allclose(np.diff(np.log(hist["bin_left_us"])), np.log(50 / 3) / 4)
    timeline = step_timeline(before, step_index=1)
    assert timeline["start_offset_us"].tolist() == [10.0, 52.0, 60.0, 70.0, 122.0]
    assert timeline["end_offset_us"].tolist() == [50.0, 56.0, 68.0, 120.0, 125.0]
    assert timeline["category"].tolist() == ["GEMM", "elementwise", "reduction", "optimizer", "Triton/Liger"]
    with pytest.raises(IndexError):
        step_timeline(before, step_index=2)


def test_summarize_is_json_ready(before) -> None:
    summary = summarize(before, model_flops_per_step=56.25e9, peak_flops=1e15)
    assert json.loads(json.dumps(summary)) == summary
    assert summary["unit"] == GPU_UNIT and summary["steps"] == 2
    assert summary["launches_per_step"] == 4.5
    assert summary["kernel_time_per_step_us"] == 97.0
    assert summary["nominal_utilization"] == pytest.approx(170 / 225)
    assert summary["sm_efficiency_estimate"] == pytest.approx(305 / 567)
    assert summary["mfu"] == pytest.approx(0.5)
    assert summary["short_share_of_launches"] == pytest.approx(5 / 9)
    assert summary["short_share_of_time"] == pytest.approx(24 / 194)
    assert summary["idle_share"] == pytest.approx(55 / 225)
    assert summary["idle_gaps"]["largest_us"] == 25.0
    assert [c["category"] for c in summary["top_categories"]][:3] == ["GEMM", "optimizer", "communication"]
    assert summary["device"] == "NVIDIA H200"
    first = summary["top_kernels"][0]
    assert first["name"] == GEMM[:KERNEL_NAME_CHARS] and first["category"] == "GEMM"
    assert (first["time_per_step_us"], first["launches_per_step"]) == (40.0, 1.0)
    assert first["share_of_time"] == pytest.approx(80 / 194)
    assert [k["time_per_step_us"] for k in summary["top_kernels"][:4]] == [40.0, 25.0, 20.0, 4.0]


def test_summarize_keeps_as_many_top_kernels_as_asked_and_cuts_long_names() -> None:
    document = json.loads((TRACES / "gpu_before.json").read_text())
    long_name = "void cutlass::Kernel<" + "x" * 500 + ">"
    for event in document["traceEvents"]:
        if event["name"] == GEMM:
            event["name"] = long_name
    summary = summarize(trace_from_json(document), top_kernel_n=2)
    assert [k["name"] for k in summary["top_kernels"]][:1] == [long_name[:KERNEL_NAME_CHARS]]
    assert len(summary["top_kernels"]) == 2 and KERNEL_NAME_CHARS < len(long_name)


def test_cpu_trace_uses_top_level_aten_ops() -> None:
    trace = load_trace(TRACES / "cpu_nesting.json")
    assert not trace.is_gpu and trace.unit == CPU_UNIT
    # addmm and copy_ sit inside linear; the mm under an autograd node is top level; mul is after the step
    assert trace.ops["name"].tolist() == ["aten::linear", "aten::mm", "aten::relu", "aten::mm", "aten::add_"]
    assert trace.ops["stream"].tolist() == [1, 2, 1, 1, 1]
    assert trace.ops["category"].tolist() == ["GEMM", "GEMM", "elementwise", "GEMM", "optimizer"]
    assert launches_per_step(trace) == 5.0
    util = utilization(trace)
    assert (util.wall_us, util.busy_us, util.nominal_utilization) == (500.0, 170.0, 0.34)
    assert util.sm_efficiency_estimate is None and util.unit == CPU_UNIT
    assert category_summary(trace).attrs["unit"] == CPU_UNIT
    assert summarize(trace)["unit"] == CPU_UNIT


def test_trace_without_step_spans_is_one_step() -> None:
    events = json.loads((TRACES / "gpu_before.json").read_text())["traceEvents"]
    trace = trace_from_json([e for e in events if not e["name"].startswith("ProfilerStep#")])
    assert trace.num_steps == 1 and len(trace.step_spans) == 0
    assert len(trace.ops) == 10  # every device event, the early fill kernel too
    assert trace.window == (900.0, 1225.0)
    assert utilization(trace).busy_us == 172.0  # 170 + the 2 us fill kernel
