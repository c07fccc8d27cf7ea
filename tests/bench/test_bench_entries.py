"""The kernel-entry suites name table entries: float8's packed rows padded to its token multiple, the loss curve
judged by float8's own curve tolerance, every entry alone after its baseline."""

from __future__ import annotations

import pytest

from nbhelpers.bench import dense_entries as entries
from nbhelpers.bench.run import suite_configs
from nbhelpers.bench.table import suite_named
from nbhelpers.kernels.registry import curve_tolerance, kernel_backend


@pytest.mark.parametrize("model", ["qwen3-1.7b", "qwen3-8b"])
def test_every_group_starts_with_the_baseline_and_profiles_its_rows(model, tmp_path):
    rows = {c.label: c for c in suite_configs(suite_named(f"{model}/kernel-entries-token-budget/best"), tmp_path)}
    labels = list(rows)
    assert labels[0] == entries.BASELINE and all(c.profile for c in rows.values())
    assert rows[entries.FLOAT8_REGIONAL].kernels == "liger+float8+regional_compile"
    assert rows[entries.FLOAT8_REGIONAL].liger_kernels == entries.LOSS_ONLY
    assert rows[entries.CCE_REGIONAL].attn_implementation == "torch_varlen"
    float8 = {c.label: c for c in suite_configs(suite_named(f"{model}/kernel-entries-token-budget/float8-padded-rows"),
                                                 tmp_path)}  # fmt: skip
    assert float8[entries.CCE_STATIC].kernels == "cce" and float8[entries.CCE_STATIC].padding == "static"
    assert all(float8[label].padding_settings.token_multiple == 16
               for label in (entries.FLOAT8_REGIONAL, entries.FLOAT8_CCE_REGIONAL))  # fmt: skip


def test_the_curve_compares_float8_with_eager_on_distinct_batches(tmp_path):
    curve, reference = suite_configs(suite_named("qwen3-1.7b/float8-loss-curve/distinct-batches"), tmp_path)
    assert curve.kernels == entries.CURVE_BACKEND and reference.kernels == "eager" and curve.steps == 50
    assert curve.num_samples == reference.num_samples > curve.batch_size * 50
    assert (curve.extra["convergence"], reference.extra["convergence"]) == ("recommended", "baseline")
    assert curve_tolerance(entries.CURVE_BACKEND) == kernel_backend("float8").curve


def test_the_alone_suite_measures_each_entry_after_its_baseline(tmp_path):
    rows = suite_configs(suite_named("qwen3-1.7b/kernel-entries-static/alone"), tmp_path)
    assert [c.kernels for c in rows] == ["eager", *entries.ALONE]
    assert {c.kernels: c.timeout_s for c in rows}["float8_rowwise+compile"] == 1500  # two whole-model compiles
