"""The 50-step loss curve of a lower-precision backend (float8) against the baseline's, by its precision class."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis.convergence import compare_curves, convergence_of, moving_average
from nbhelpers.kernels.registry import curve_tolerance
from nbhelpers.kernels.spec import SAME_PRECISION_CURVE, CurveTolerance
from nbhelpers.validation import ConfigError

FLOAT8 = curve_tolerance("float8+compile")
BASE = [12.0 * math.exp(-i / 40) + 2.0 for i in range(50)]  # a falling 50-step curve


def scatter(rel: float) -> list[float]:
    """The baseline with every step off by ``rel`` alternately up and down: noise that averages out."""
    return [x * (1 + rel * (-1) ** i) for i, x in enumerate(BASE)]


def test_moving_average_takes_full_windows_only():
    assert moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.5, 2.5, 3.5]
    assert moving_average([5.0, 7.0], 1) == [5.0, 7.0]
    assert moving_average([1.0, 2.0], 5) == [] == moving_average([], 5)
    with pytest.raises(ConfigError, match="window=0"):
        moving_average([1.0], 0)


def test_float8_noise_passes_its_class_but_not_the_bf16_class():
    noisy = scatter(0.04)  # 4% per step: inside float8's 5%, outside bf16's 2%
    verdict = compare_curves(noisy, BASE, FLOAT8)
    assert verdict.passed, verdict.summary()
    assert verdict.max_smoothed_rel_diff < FLOAT8.smoothed_rtol < verdict.max_step_rel_diff
    assert not compare_curves(noisy, BASE).passed  # the default (same-precision) class
    assert "5-step moving averages" in verdict.summary() and verdict.basis == FLOAT8.basis


def test_a_lasting_drift_fails_float8_on_the_smoothed_curve_though_each_step_is_within_bounds():
    drift = [x * (1 + 0.035) if 20 <= i < 30 else x for i, x in enumerate(BASE)]  # ten steps 3.5% high, then back
    verdict = compare_curves(drift, BASE, FLOAT8)
    assert verdict.max_step_rel_diff < FLOAT8.step_rtol and verdict.mean_rel_diff < FLOAT8.mean_rtol
    assert verdict.max_smoothed_rel_diff > FLOAT8.smoothed_rtol and not verdict.passed


def test_a_shift_of_every_step_fails_on_the_mean_and_a_nan_fails_outright():
    shifted = compare_curves([x * (1 + 1.5 * FLOAT8.mean_rtol) for x in BASE], BASE, FLOAT8)
    assert shifted.max_smoothed_rel_diff < FLOAT8.smoothed_rtol and not shifted.passed
    diverged = compare_curves([*BASE[:49], math.nan], BASE, FLOAT8)
    assert not diverged.passed and math.isinf(diverged.max_smoothed_rel_diff)
    assert not compare_curves([], [], FLOAT8).passed  # no common step: nothing shown, nothing passed


def test_curves_of_other_lengths_compare_their_common_steps():
    verdict = compare_curves(BASE[:30], BASE, FLOAT8)
    assert len(verdict.step_rel_diff) == 30 and len(verdict.smoothed_rel_diff) == 30 - FLOAT8.window + 1
    short = compare_curves(scatter(0.04)[:4], BASE[:4], FLOAT8)  # shorter than the window: one window, its mean
    assert short.smoothed_rel_diff == [] and short.max_smoothed_rel_diff == short.mean_rel_diff and short.passed


def test_window_one_makes_the_smoothed_check_the_per_step_one():
    one = CurveTolerance(0.05, 0.05, 1, 0.01, "test")
    verdict = compare_curves(scatter(0.04), BASE, one)
    assert verdict.smoothed_rel_diff == verdict.step_rel_diff and verdict.passed
    assert SAME_PRECISION_CURVE.window == 1 and "moving averages" not in compare_curves(BASE, BASE).summary()


def test_convergence_of_judges_by_the_recommended_backends_class(make_record):
    def run(role, kernels, losses):
        record = make_record(f"convergence: {role}", kernels=kernels)
        record.kind, record.metrics["losses"] = "convergence", losses
        record.config["extra"] = {"convergence": role}
        return record

    noisy = scatter(0.04)
    float8 = convergence_of([run("recommended", "float8+compile", noisy), run("baseline", "eager", BASE)])
    liger = convergence_of([run("recommended", "liger", noisy), run("baseline", "eager", BASE)])
    assert float8 is not None and float8.passed and float8.step_rtol == FLOAT8.step_rtol
    assert liger is not None and not liger.passed and liger.step_rtol == SAME_PRECISION_CURVE.step_rtol
