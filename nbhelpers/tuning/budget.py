"""How long a measurement will take, from what an earlier measurement of the same candidate took.

A measured wall time splits into overhead (process start, model build, data) plus the first step plus
the later steps; a longer run of the same candidate costs the same overhead and first step plus more
steps at its median step time. An epoch costs an untimed pass and its timed passes (repeated until the floor
of timed steps, within the timing cap) over the epoch's real tokens at the candidate's real tok/s.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from nbhelpers.measure.store import RunRecord


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def step_times(record: RunRecord) -> tuple[float, float, float] | None:
    """(first step s, seconds of the later steps, median step s) of an ok record, or None."""
    metrics = record.metrics
    first = _number(metrics.get("first_step_s"))
    median = _number(metrics.get("step_time_median_s"))
    raw = list(metrics.get("untimed_step_times_s") or []) + list(metrics.get("step_times_s") or [])
    later = [_number(t) for t in raw]
    if not record.ok or first is None or median is None or any(t is None for t in later):
        return None
    return first, float(sum(t for t in later if t is not None)), median


def overhead_s(record: RunRecord, wall_s: float) -> float:
    """The part of a measurement's wall time that was not a training step (never negative)."""
    times = step_times(record)
    if times is None:
        return wall_s
    first, later, _ = times
    return max(0.0, wall_s - first - later)


def steps_estimate(record: RunRecord, wall_s: float, later_steps: int) -> float:
    """Seconds to measure the same candidate with ``later_steps`` steps after the first one."""
    times = step_times(record)
    if times is None:
        return wall_s
    first, _, median = times
    return overhead_s(record, wall_s) + first + later_steps * median


def epoch_real_tokens(record: RunRecord) -> float | None:
    """Real tokens in one epoch of an epoch-timed ok record (its timed steps over its timed passes)."""
    if not record.ok or record.config.get("timing") != "epoch":
        return None
    per_step = _number(record.metrics.get("real_tokens_per_step"))
    batches = _number(record.metrics.get("timed_batches"))
    passes = _number(record.metrics.get("timed_passes")) or 1.0
    return per_step * batches / passes if per_step is not None and batches is not None else None


def epoch_estimate(
    record: RunRecord, wall_s: float, epoch_tokens: float | None, timing_cap_s: float | None = None
) -> float:
    """Seconds for an epoch-timed measurement of the same candidate: one untimed pass, then timed passes, at
    most one pass more than ``timing_cap_s`` of them (None: one timed pass)."""
    times = step_times(record)
    rate = _number(record.metrics.get("real_tokens_per_s"))
    if times is None or rate is None or rate <= 0 or epoch_tokens is None:
        return 3 * wall_s  # nothing to scale by: a guess on the safe side
    one_pass = epoch_tokens / rate
    timed = one_pass if timing_cap_s is None else max(one_pass, min(timing_cap_s + one_pass, 10 * one_pass))
    return overhead_s(record, wall_s) + times[0] + one_pass + timed


def typical_s(walls: Sequence[float]) -> float:
    """What a first measurement of an unseen candidate is expected to take: the median so far (0: none)."""
    return statistics.median(walls) if walls else 0.0
