"""Convergence, not only the first step: the recommendation's loss curve against the baseline's, step by step.

Like Liger's convergence tests, both run the same number of steps on the same samples from the same weights and
seed, and their losses must stay within stated tolerances at every step and on average. Each step takes a batch
neither curve has trained on yet, as far as the dataset holds them: a curve that cycles over a short plan learns
it by heart, and near a loss of zero relative differences mean nothing. Both follow the same
plan, so each step trains on the same samples: the baseline is the recommended configuration with the baseline
kernels and attention, padded statically where the recommended strategy keeps dataset order (static's plan),
else batched by the recommended strategy itself (its buckets or token budget; packed rows keep sequences apart).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbhelpers.data.strategies import BASELINE_STRATEGY, keeps_dataset_order
from nbhelpers.kernels.attention import DEFAULT_ATTENTION
from nbhelpers.kernels.registry import BASELINE_BACKEND, curve_tolerance
from nbhelpers.kernels.spec import SAME_PRECISION_CURVE, CurveTolerance
from nbhelpers.measure.config import SHAPE_WARMUP, RunConfig
from nbhelpers.measure.curve_samples import samples_for_steps
from nbhelpers.measure.store import RunRecord
from nbhelpers.validation import check_int

from .peers import measure_for
from .recommend import Recommendation

# Per step, the two losses may differ by 2% of the baseline's: bf16 autocast and fused kernels (Liger, compile,
# varlen attention) sum in another order, and the difference grows a little as the weights drift apart over
# steps. The curves' means may differ by 0.5%: a systematic drift (a wrong kernel, a mask that lets sequences
# see each other) shifts every step the same way and shows there first. Same dtype on a CPU: ~1e-6.
# A lower-precision backend (float8) states its own, looser class in its table entry (KernelBackend.curve).
STEP_RTOL = SAME_PRECISION_CURVE.step_rtol
MEAN_RTOL = SAME_PRECISION_CURVE.mean_rtol
KIND = "convergence"  # the records' kind: not a timed step, never in a speed table
ROLES = ("recommended", "baseline")


def convergence_configs(rec: Recommendation, steps: int) -> list[RunConfig]:
    """The recommended configuration and its baseline, ``steps`` steps each after the first, no warm-up, on
    enough samples that no step repeats a batch where the dataset holds them (:func:`samples_for_steps`)."""
    return convergence_pair(RunConfig.from_record(rec.config), rec.label, steps)


def convergence_pair(config: RunConfig, label: str, steps: int) -> list[RunConfig]:
    """:func:`convergence_configs` of a configuration labelled ``label``."""
    check_int("CONVERGENCE_STEPS", steps, 1, 100_000)
    base = config.replace(timing="steps", warmup=0, steps=steps, profile=False)
    base = base.replace(num_samples=samples_for_steps(base, steps + 1))
    # the curves are the check here; every step trains on the plan's next batch, none is stepped twice for its shape
    base = base.replace(extra={**base.extra, "parity_probe_samples": 0, SHAPE_WARMUP: False})
    padding = BASELINE_STRATEGY if keeps_dataset_order(base.padding_settings) else base.padding
    baseline = base.replace(kernels=BASELINE_BACKEND, attn_implementation=DEFAULT_ATTENTION, padding=padding)
    return [
        base.replace(label=f"convergence: {label}", extra={**base.extra, KIND: ROLES[0]}),
        baseline.replace(
            label=f"convergence: baseline ({BASELINE_BACKEND}, {DEFAULT_ATTENTION}, {padding})",
            extra={**baseline.extra, KIND: ROLES[1]},
        ),
    ]


def mark_convergence(record: RunRecord, earlier: list[RunRecord]) -> None:
    """``run_configs(annotate=...)``: a convergence run is stored as kind "convergence", never as a timed step."""
    record.kind = KIND


def measure_convergence(rec: Recommendation | None, steps: int, run_name: str, notebook: str = "") -> str:
    """Run the recommendation and its baseline ``steps`` steps each here (0: off), stored as kind "convergence"."""
    check_int("CONVERGENCE_STEPS", steps, 0, 100_000)
    if steps == 0:
        return "convergence not measured (CONVERGENCE_STEPS=0)"
    configs = convergence_configs(rec, steps) if rec is not None else []
    return measure_for(rec, configs, run_name, notebook, annotate=mark_convergence)[1]


@dataclass
class Convergence:
    """Two loss curves compared step by step, on their moving averages and on their means."""

    recommended: list[float]
    baseline: list[float]
    step_rel_diff: list[float] = field(default_factory=list)
    mean_rel_diff: float = math.nan
    step_rtol: float = STEP_RTOL
    mean_rtol: float = MEAN_RTOL
    smoothed_rel_diff: list[float] = field(default_factory=list)  # of the moving averages (full windows)
    smoothed_rtol: float = SAME_PRECISION_CURVE.smoothed_rtol
    window: int = SAME_PRECISION_CURVE.window
    basis: str = SAME_PRECISION_CURVE.basis

    @property
    def max_step_rel_diff(self) -> float:
        return max(self.step_rel_diff) if self.step_rel_diff else math.nan

    @property
    def max_smoothed_rel_diff(self) -> float:
        """The largest difference of the moving averages; a curve shorter than the window is one window (its mean)."""
        return max(self.smoothed_rel_diff) if self.smoothed_rel_diff else self.mean_rel_diff

    @property
    def passed(self) -> bool:
        within = self.max_step_rel_diff <= self.step_rtol and self.mean_rel_diff <= self.mean_rtol
        return bool(self.step_rel_diff) and within and self.max_smoothed_rel_diff <= self.smoothed_rtol

    def summary(self) -> str:
        verdict = "pass" if self.passed else "fail"
        smoothed = (
            f", largest difference of the {self.window}-step moving averages {self.max_smoothed_rel_diff:.2e} "
            f"(tolerance {self.smoothed_rtol:g})"
            if self.window > 1
            else ""
        )
        return (
            f"Convergence {verdict} over {len(self.step_rel_diff)} steps: largest per-step loss difference "
            f"{self.max_step_rel_diff:.2e} (tolerance {self.step_rtol:g}){smoothed}, mean loss difference "
            f"{self.mean_rel_diff:.2e} (tolerance {self.mean_rtol:g}), relative to the baseline."
        )

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(
            {"step": range(len(self.step_rel_diff)), "recommended": self.recommended[: len(self.step_rel_diff)],
             "baseline": self.baseline[: len(self.step_rel_diff)], "relative difference": self.step_rel_diff}
        )  # fmt: skip


def _rel(value: float, reference: float) -> float:
    """|value - reference| / |reference|; a non-finite value is infinitely far."""
    return abs(value - reference) / max(abs(reference), 1e-12) if math.isfinite(value + reference) else math.inf


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The mean of every full run of ``window`` consecutive steps (steps 0..w-1, 1..w, ...): len - window + 1
    values, none for a curve shorter than the window (a partial window at the start would be a single noisy step)."""
    check_int("window", window, 1, 100_000)
    return [sum(values[i : i + window]) / window for i in range(len(values) - window + 1)]


def compare_curves(
    recommended: Sequence[float], baseline: Sequence[float], tolerance: CurveTolerance = SAME_PRECISION_CURVE
) -> Convergence:
    """Per-step relative differences over the common steps, those of the two curves' moving averages over every
    full run of ``tolerance.window`` steps, and that of the means, judged by ``tolerance`` (a backend's precision class,
    :func:`nbhelpers.kernels.registry.curve_tolerance`); a non-finite loss fails.

    Why three checks: in lower precision (float8) single steps scatter around the baseline, so the per-step bound
    is loose; averaging ``window`` steps cancels that scatter but not a drift that lasts, so the moving averages
    are held to a tighter bound; the means catch a shift of every step by a little.
    """
    n = min(len(recommended), len(baseline))
    a, b = [float(x) for x in recommended[:n]], [float(x) for x in baseline[:n]]
    diffs = [_rel(x, y) for x, y in zip(a, b)]
    smoothed = [_rel(x, y) for x, y in zip(moving_average(a, tolerance.window), moving_average(b, tolerance.window))]
    mean = _rel(sum(a) / n, sum(b) / n) if n else math.inf
    return Convergence(
        recommended=a, baseline=b, step_rel_diff=diffs, mean_rel_diff=mean, step_rtol=tolerance.step_rtol,
        mean_rtol=tolerance.mean_rtol, smoothed_rel_diff=smoothed, smoothed_rtol=tolerance.smoothed_rtol,
        window=tolerance.window, basis=tolerance.basis,
    )  # fmt: skip


def convergence_of(records: Iterable[RunRecord]) -> Convergence | None:
    """The comparison of the last recommended/baseline pair of convergence records; None without an ok pair."""
    latest: dict[str, RunRecord] = {}
    for record in records:
        role = record.config.get("extra", {}).get(KIND) if isinstance(record.config.get("extra"), dict) else None
        if record.kind == KIND and record.ok and role in ROLES:
            latest[role] = record
    if set(latest) != set(ROLES):
        return None
    tolerance = curve_tolerance(str(latest[ROLES[0]].config.get("kernels", BASELINE_BACKEND)))
    recommended, baseline = (latest[role].metrics.get("losses", []) for role in ROLES)
    return compare_curves(recommended, baseline, tolerance)


__all__ = [
    "KIND",
    "MEAN_RTOL",
    "STEP_RTOL",
    "Convergence",
    "compare_curves",
    "moving_average",
    "convergence_configs",
    "convergence_pair",
    "convergence_of",
    "mark_convergence",
    "measure_convergence",
]
