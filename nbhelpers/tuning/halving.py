"""Successive halving: each rung measures its candidates with more steps and keeps the best 1/eta.

Pure arithmetic on (key, real tok/s) pairs, so the driver (:mod:`nbhelpers.tuning.tuner`) and the tests
share it. A rung's cut is the real tok/s of the slowest candidate it keeps. Given each candidate's interval,
a rung drops only what the data say is slower than its leader: a candidate whose interval lies wholly below
the leader's; every other goes on (to a rung with more steps, whose intervals are narrower).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from nbhelpers.validation import check_int


def check_schedule(eta: int, first_steps: int, final_count: int) -> None:
    """A refused schedule value raises ConfigError naming it."""
    check_int("eta", eta, 2, 100)
    check_int("first_steps", first_steps, 1, 10_000)
    check_int("final_count", final_count, 1, 100)


def rung_steps(rung: int, first_steps: int, eta: int) -> int:
    """Timed steps of rung ``rung``: ``first_steps`` x eta^rung."""
    return first_steps * eta**rung


def keep_count(measured: int, eta: int, final_count: int = 1) -> int:
    """How many of ``measured`` candidates a rung keeps: the best ceil(n / eta), never fewer than one."""
    if measured <= 0:
        return 0
    return max(1, min(measured, max(math.ceil(measured / eta), min(final_count, measured))))


@dataclass(frozen=True)
class Cut:
    """One rung's verdict: the kept keys (fastest first), the dropped ones, and the cut's tok/s."""

    kept: tuple[Hashable, ...]
    dropped: tuple[Hashable, ...]
    threshold: float | None  # real tok/s of the slowest kept candidate (None: nothing to cut)


def cut(
    scores: Sequence[tuple[Hashable, float]],
    eta: int,
    final_count: int = 1,
    intervals: Mapping[Hashable, tuple[float, float] | None] | None = None,
) -> Cut:
    """Keep the fastest ``keep_count`` of the scored candidates (ties: the earlier one measured); with
    ``intervals`` (a key's missing or None interval is its point), the fastest ``final_count`` and every one whose
    interval reaches the leader's (the threshold is then the leader's lower end)."""
    ranked = sorted(enumerate(scores), key=lambda item: (-item[1][1], item[0]))
    if intervals is not None and ranked:
        def span(key: Hashable, rate: float) -> tuple[float, float]:
            return intervals.get(key) or (rate, rate)

        lead = span(*ranked[0][1])
        top = {key for _, (key, _) in ranked[: max(1, min(final_count, len(ranked)))]}
        kept = tuple(key for _, (key, rate) in ranked if key in top or span(key, rate)[1] >= lead[0])
        dropped = tuple(key for _, (key, _) in ranked if key not in kept)
        return Cut(kept, dropped, lead[0])
    keep = keep_count(len(ranked), eta, final_count)
    kept = tuple(key for _, (key, _) in ranked[:keep])
    dropped = tuple(key for _, (key, _) in ranked[keep:])
    threshold = ranked[keep - 1][1][1] if keep else None
    return Cut(kept, dropped, threshold)


def is_last_rung(survivors: int, final_count: int) -> bool:
    """Whether the survivors go straight to the final measurement."""
    return survivors <= final_count
