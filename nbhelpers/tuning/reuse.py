"""Which records already in the run's store measure a candidate the tuner would measure, so it need not.

A stored record stands in for a measurement when it ran the same computation (every RunConfig field that
changes what a step does: model, data, batch shape, kernels, the Liger switches a backend reads, padding and its
token budget, attention, dtype, checkpointing, adapter, seed) on this machine, succeeded with a finite loss and
no failed parity, and timed at least as many steps as the measurement it replaces; for the tuner's final
measurement also at the workload's own timing. How it was timed (steps, warm-up, timing, caps, profiling,
timeouts) and what it is called (label, run, notes) do not matter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nbhelpers.analysis.records import timed_step_count, tokens_per_s
from nbhelpers.data.strategies import PADDING_STRATEGIES
from nbhelpers.kernels.registry import uses_liger_switches
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord
from nbhelpers.planning.candidates import plans_by_budget

from .problems import problem_of

# Fields that say how a record was timed or what it is called, not what its steps computed.
TIMING_FIELDS = ("steps", "warmup", "timing", "min_timed_steps", "timing_cap_s")
NAMING_FIELDS = ("run_name", "label", "extra", "profile", "profile_steps", "timeout_s", "device")
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}
REUSABLE_KINDS = ("step", "tuner")


def computation_key(config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a configuration's steps compute, from a stored config dict (older records' missing fields at their
    defaults): every RunConfig field but the timing and naming ones, with the Liger switches only where the
    backend reads them and the token budget only for a strategy planned by one (0 meaning batch x max length)."""
    values = {name: config.get(name, DEFAULTS.get(name)) for name in DEFAULTS if name not in TIMING_FIELDS}
    for name in NAMING_FIELDS:
        values.pop(name, None)
    kernels = str(values.get("kernels"))
    values["liger_kernels"] = tuple(values.get("liger_kernels") or ()) if uses_liger_switches(kernels) else ()
    padding = str(values.get("padding"))
    if padding in PADDING_STRATEGIES and plans_by_budget(padding):
        budget = values.get("token_budget") or 0
        values["token_budget"] = budget or int(values.get("batch_size") or 0) * int(values.get("max_length") or 0)
    else:
        values["token_budget"] = 0
    return tuple(sorted((name, _hashable(value)) for name, value in values.items()))


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


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


__all__ = ["REUSABLE_KINDS", "computation_key", "stored_measurement"]
