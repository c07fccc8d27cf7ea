"""How far a measured rate can move: a bootstrap interval over the timed steps, and the floor below which a
record is "thin".

A record's real tokens per second is the ratio of sums over its timed steps (every real token over every timed
second). Its interval resamples the timed steps with replacement (each step's real tokens and seconds together)
and takes the 2.5th and 97.5th percentiles of the resampled ratios: the spread of the steps themselves, with a
fixed seed so that one record always gets one interval. A speedup's interval divides the two intervals' ends
(the faster end of one by the slower of the other): conservative, since the two are measured independently.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

MIN_TIMED_STEPS = 10  # a record resting on fewer timed steps is "thin": its interval says little
RESAMPLES = 1000
LEVEL = 0.95
INTERVAL_METHOD = (
    f"bootstrap {LEVEL:.0%} percentile interval of real tokens / s over the timed steps ({RESAMPLES:,} resamples, "
    "seed 0)"
)
THIN_FLOOR = f"at least {MIN_TIMED_STEPS} timed steps"


def rate_interval(
    tokens: Sequence[float], seconds: Sequence[float], resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0
) -> tuple[float, float]:
    """The bootstrap percentile interval of sum(tokens) / sum(seconds), resampling the steps; one step gives
    the point itself. ValueError for empty or unequal sequences or a non-positive time."""
    if not tokens or len(tokens) != len(seconds):
        raise ValueError(f"need one token count per timed step: {len(tokens)} counts, {len(seconds)} times")
    if any(s <= 0 for s in seconds):
        raise ValueError("every timed step must take a positive time")
    n = len(tokens)
    if n == 1:
        point = tokens[0] / seconds[0]
        return point, point
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        ratios.append(sum(tokens[i] for i in picks) / sum(seconds[i] for i in picks))
    ratios.sort()
    tail = (1 - level) / 2
    low = ratios[int(tail * (resamples - 1))]
    high = ratios[int(round((1 - tail) * (resamples - 1)))]
    return low, high


def spread_metrics(tokens: Sequence[float], seconds: Sequence[float], floor: int = MIN_TIMED_STEPS) -> dict[str, Any]:
    """The record's spread fields: the interval and how it was made, what it rests on, and whether it is thin."""
    low, high = rate_interval(tokens, seconds)
    steps = len(tokens)
    thin = steps < floor
    return {
        "real_tokens_per_s_interval": [low, high],
        "interval_method": INTERVAL_METHOD,
        "timed_steps": steps,
        "timed_real_tokens_total": int(sum(tokens)),
        "thin": thin,
        "thin_floor": f"at least {floor} timed steps",
        "thin_reason": f"{steps} timed step(s), fewer than {floor}" if thin else "",
    }


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float]) -> tuple[float, float]:
    """A conservative interval of a / b from an interval of each: (a_low / b_high, a_high / b_low)."""
    (a_low, a_high), (b_low, b_high) = numerator, denominator
    if b_low <= 0 or b_high <= 0:
        raise ValueError(f"the denominator's interval must be positive, not {list(denominator)}")
    return a_low / b_high, a_high / b_low


def overlaps(first: Sequence[float], second: Sequence[float]) -> bool:
    """Whether two intervals share a point (so the data do not say which rate is the larger)."""
    return first[0] <= second[1] and second[0] <= first[1]


__all__ = [
    "INTERVAL_METHOD",
    "LEVEL",
    "MIN_TIMED_STEPS",
    "RESAMPLES",
    "THIN_FLOOR",
    "overlaps",
    "ratio_interval",
    "rate_interval",
    "spread_metrics",
]
