"""Which records already in the run's store measure a candidate the tuner would measure, so it need not.

A stored record stands in for a measurement when it ran the same computation
(:func:`nbhelpers.analysis.identity.computation_key`) on this machine, succeeded with a finite loss and no failed
parity, and timed at least as many steps as the measurement it replaces; for the tuner's final measurement also
at the workload's own timing.
"""

from __future__ import annotations

from collections.abc import Sequence

from nbhelpers.analysis.identity import DEFAULTS, computation_key
from nbhelpers.analysis.records import timed_step_count, tokens_per_s
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord

from .problems import problem_of

REUSABLE_KINDS = ("step", "tuner")


def stored_measurement(
    records: Sequence[RunRecord], wanted: RunConfig, machine: str, min_steps: int, same_timing: bool = False
) -> RunRecord | None:
    """The latest of a store's ``records`` that stands in for measuring ``wanted`` on ``machine`` with at least
    ``min_steps`` timed steps (``same_timing``: also at ``wanted``'s timing, steps and warm-up); None if none."""
    key = computation_key(wanted.to_dict())
    timing = tuple(getattr(wanted, name) for name in ("timing", "steps", "warmup"))
    for record in reversed(records):
        measured = record.ok and tokens_per_s(record) is not None
        if record.kind not in REUSABLE_KINDS or not measured or record.machine != machine:
            continue
        steps = timed_step_count(record)
        if steps is None or steps < min_steps or problem_of(record):
            continue
        if same_timing and tuple(record.config.get(n, DEFAULTS[n]) for n in ("timing", "steps", "warmup")) != timing:
            continue
        if computation_key(record.config) == key:
            return record
    return None


__all__ = ["REUSABLE_KINDS", "computation_key", "stored_measurement"]
