"""Which records already in the run's store measure a candidate the tuner would measure, so it need not.

A stored record stands in for a measurement when it ran the same computation
(:func:`nbhelpers.analysis.identity.computation_key`) on this machine, succeeded with a finite loss and no failed
parity, and timed at least as many steps as the measurement it replaces; for the tuner's final measurement also
at the workload's own timing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from nbhelpers.analysis.identity import DEFAULTS, computation_key
from nbhelpers.analysis.records import timed_step_count, tokens_per_s
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.env import safe_environment
from nbhelpers.measure.store import RunRecord, RunStore

from .problems import problem_of

REUSABLE_KINDS = ("step", "tuner")


def stored_measurement(
    records: Sequence[RunRecord], wanted: RunConfig, machine: str, min_steps: int, same_timing: bool = False,
    fits: Callable[[RunRecord], bool] | None = None,
) -> RunRecord | None:
    """The latest of a store's ``records`` that stands in for measuring ``wanted`` on ``machine`` with at least
    ``min_steps`` timed steps (``same_timing``: also at ``wanted``'s timing, steps and warm-up; ``fits``: any further
    test a record must pass); None if none."""
    key = computation_key(wanted.to_dict())
    timing = tuple(getattr(wanted, name) for name in ("timing", "steps", "warmup"))
    for record in reversed(records):
        measured = record.ok and tokens_per_s(record) is not None
        if record.kind not in REUSABLE_KINDS or not measured or record.machine != machine:
            continue
        if fits is not None and not fits(record):
            continue
        steps = timed_step_count(record)
        if steps is None or steps < min_steps or problem_of(record):
            continue
        if same_timing and tuple(record.config.get(n, DEFAULTS[n]) for n in ("timing", "steps", "warmup")) != timing:
            continue
        if computation_key(record.config) == key:
            return record
    return None


def same_schedule(record: RunRecord, wanted: RunConfig) -> bool:
    """Whether ``record`` was timed as ``wanted`` would be: one timing, and its steps and warm-up ("steps") or its
    floor and cap ("epoch"); profiled and probed where ``wanted`` asks for a trace and a parity probe."""
    config = record.config
    names = ("steps", "warmup") if wanted.timing == "steps" else ("min_timed_steps", "timing_cap_s")
    if config.get("timing", DEFAULTS["timing"]) != wanted.timing:
        return False
    if any(config.get(n, DEFAULTS[n]) != getattr(wanted, n) for n in names):
        return False
    trace = record.artifacts.get("trace")
    if wanted.profile and not (trace and Path(trace).is_file()):
        return False
    probe = record.metrics.get("parity_probe")
    wants_probe = wanted.extra.get("parity_probe_samples") != 0
    return not wants_probe or (isinstance(probe, dict) and "error" not in probe)


def grid_reuse(store: RunStore) -> Callable[[RunConfig], RunRecord | None]:
    """For :func:`nbhelpers.measure.runner.run_configs`: the store's latest step record that measured a grid
    configuration on this machine with its schedule (:func:`same_schedule`), as a copy under the configuration's
    label marked ``metrics["reused_from"]`` (its id and notebook); None where there is none."""

    machines: dict[str, str] = {}

    def stored(config: RunConfig) -> RunRecord | None:
        if config.device not in machines:  # the machine a record measured here would name
            machines[config.device] = RunRecord(config={}, environment=safe_environment(config.device)).machine
        record = stored_measurement(
            store.load(), config, machines[config.device], 1,
            fits=lambda r: r.kind == "step" and not r.reused and same_schedule(r, config),
        )  # fmt: skip
        if record is None:
            return None
        copy = RunRecord.from_dict(record.to_dict())
        copy.config["label"] = config.name
        copy.metrics["reused_from"] = {"record_id": record.record_id, "notebook": record.notebook}
        return copy

    return stored


__all__ = ["REUSABLE_KINDS", "computation_key", "grid_reuse", "same_schedule", "stored_measurement"]
