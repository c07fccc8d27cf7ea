"""The report's first screen: three lines of what a run found, each number read from its record."""

from __future__ import annotations

from nbhelpers.analysis.findings import findings, kernel_level_line, main_machine
from nbhelpers.analysis.records import is_thin


def test_three_lines_name_the_pick_its_speedup_the_baseline_at_kernel_level_and_the_evidence(h200_and_cpu_records):
    base = h200_and_cpu_records[0]
    base.metrics.update(trace_launches_per_step=6458.0, trace_nominal_utilization=0.977)
    lines = findings(h200_and_cpu_records)
    assert len(lines) == 3
    pick, kernels, evidence = lines
    # the H200 holds most step records; its fastest record with a parity pass is 'packed, flex' (the faster
    # 'liger, bad parity' failed parity), over the first eager, statically padded record
    assert "Recommended on" in pick and "packed, flex" in pick and "15,059 real tok/s" in pick
    assert f"{15059.0 / 6367.0:.2f}x the reference path (sdpa, pad to 2048)" in pick
    assert "without the workbook not measured" in pick
    assert kernels.startswith("The reference path's step ran 6,458 kernel launches at 97.7% nominal")
    assert "8.0% MFU" in kernels
    # 6 step records on the H200 (the trace and the CPU's are not counted): one failed; thin as is_thin says
    h200 = [r for r in h200_and_cpu_records if r.kind == "step" and r.machine == base.machine]
    thin = sum(1 for r in h200 if r.ok and is_thin(r))
    assert evidence.startswith(f"6 configuration(s) measured on {base.machine}: 1 failed, {thin} thin")
    assert "parity: pass" in evidence


def test_a_run_without_records_says_so_and_an_unprofiled_baseline_says_which_parameter(make_record):
    assert findings([]) == ["Nothing was measured: run notebooks 01-03 first."]
    line = kernel_level_line(make_record("eager, static"))
    assert "was not profiled" in line and "PROFILE" in line
    assert main_machine([]) is None


def test_no_recommendation_says_why(make_record):
    lines = findings([make_record("only failed", None, status="failed", reason="CUDA out of memory")])
    assert lines[0].startswith("No configuration is recommended:")
    assert "1 failed" in lines[2]
