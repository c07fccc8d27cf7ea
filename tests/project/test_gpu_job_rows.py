"""The GPU suites' rows are valid configurations before any device time is spent on them (no GPU needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module", autouse=True)
def benchmarks_on_path():
    sys.path.insert(0, str(BENCHMARKS))
    yield
    sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("model", ["qwen3-1.7b", "qwen3-8b"])
def test_every_regional_group_starts_with_the_baseline_and_names_each_row_once(model):
    import gpu_regional_suite as suite

    from nbhelpers.kernels.registry import kernel_backend
    from nbhelpers.measure.config import RunConfig

    base = RunConfig(model=model, padding="static", liger_kernels=suite.NO_FLCE, profile=True, timing="epoch")
    for group in suite.GROUP_ROWS:
        configs = suite.group_configurations(group, base, gpu=True)
        labels = [c.label for c in configs]
        assert labels[0].startswith("baseline") and len(set(labels)) == len(labels)
        for config in configs[1:]:
            kernel_backend(config.kernels)  # in the table
            assert config.profile and config.padding in ("static", "token_budget")
    best = {c.label: c for c in suite.group_configurations("best", base, gpu=True)}
    assert best[suite.FLOAT8_REGIONAL].kernels == "liger+float8+regional_compile"
    assert best[suite.FLOAT8_REGIONAL].liger_kernels == suite.LOSS_ONLY
    assert best[suite.CCE_REGIONAL].attn_implementation == "torch_varlen"
    float8 = {c.label: c for c in suite.group_configurations("float8", base, gpu=True)}
    assert float8[suite.CCE_STATIC].kernels == "cce" and float8[suite.CCE_STATIC].padding == "static"
    assert all(float8[label].padding_settings.token_multiple == 16
               for label in (suite.FLOAT8_REGIONAL, suite.FLOAT8_CCE_REGIONAL))  # fmt: skip


def test_the_next25_rows_and_curve_name_entries_of_the_table():
    import gpu_next25_suite as suite

    from nbhelpers.kernels.registry import curve_tolerance, kernel_backend
    from nbhelpers.measure.config import RunConfig

    base = RunConfig(model="qwen3-1.7b", **suite.WORKLOAD)
    rows = suite.alone(base) + suite.best(base) + suite.curve_pair(base)
    for config in rows:
        kernel_backend(config.kernels)
    assert all(c.padding == "token_budget" for c in suite.best(base))
    curve, reference = suite.curve_pair(base)
    assert curve.kernels == suite.CURVE_BACKEND and reference.kernels == "eager" and curve.steps == 50
    assert curve_tolerance(suite.CURVE_BACKEND) == kernel_backend("float8").curve


def test_the_regional_job_collects_every_groups_records():
    """A group whose file the job does not copy back loses its records when the machine is returned."""
    import gpu_regional_suite as suite

    script = (BENCHMARKS / "gpu_regional_job.sh").read_text()
    for line in (line for line in script.splitlines() if "device_job.sh collect" in line):
        assert {f"{group}.jsonl" for group in suite.GROUPS} <= set(line.split()), line


def test_the_alone_group_measures_the_named_entries_after_its_baseline():
    import gpu_next25_suite as suite

    from nbhelpers.measure.config import RunConfig

    base = RunConfig(model="qwen3-1.7b", padding="static")
    rows = suite.alone(base, ("float8_rowwise+compile", "cce+compile"))
    assert [c.kernels for c in rows] == ["eager", "float8_rowwise+compile", "cce+compile"]
    assert [c.kernels for c in suite.alone(base)][1:] == list(suite.NEW_ALONE)
