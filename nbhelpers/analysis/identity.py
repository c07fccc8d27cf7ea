"""Which records measured the same computation: the key the tuner reuses records by and the report compares
repeated measurements by.

Two records ran the same computation when every RunConfig field that changes what a step does is equal: model,
data, batch shape, kernels, the Liger switches a backend reads, padding and its token budget, attention, dtype,
checkpointing, adapter (and whether PEFT casts its inputs), seed. How it was timed (steps, warm-up, timing, caps,
profiling, timeouts) and what it is called (label, run, notes) do not matter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nbhelpers.data.strategies import PADDING_STRATEGIES
from nbhelpers.kernels.registry import uses_liger_switches
from nbhelpers.measure.config import RunConfig, lora_forward, skips_lora_input_cast
from nbhelpers.planning.candidates import plans_by_budget

# Fields that say how a record was timed or what it is called, not what its steps computed.
TIMING_FIELDS = ("steps", "warmup", "timing", "min_timed_steps", "timing_cap_s")
NAMING_FIELDS = ("run_name", "label", "extra", "profile", "profile_steps", "timeout_s", "device")
DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not dataclasses.MISSING}


def computation_key(config: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What a configuration's steps compute, from a stored config dict (older records' missing fields at their
    defaults): every RunConfig field but the timing and naming ones, with the Liger switches only where the
    backend reads them and the token budget only for a strategy planned by one (0 meaning batch x max length)."""
    values = {name: config.get(name, DEFAULTS.get(name)) for name in DEFAULTS if name not in TIMING_FIELDS}
    for name in NAMING_FIELDS:
        values.pop(name, None)
    kernels = str(values.get("kernels"))
    values["liger_kernels"] = tuple(values.get("liger_kernels") or ()) if uses_liger_switches(kernels) else ()
    values["lora_input_cast"] = skips_lora_input_cast(config)  # "auto" resolved: the same step either way
    values["lora_epilogue"] = lora_forward(config)  # "peft" without an adapter and for older records
    padding = str(values.get("padding"))
    if padding in PADDING_STRATEGIES and plans_by_budget(padding):
        budget = values.get("token_budget") or 0
        values["token_budget"] = budget or int(values.get("batch_size") or 0) * int(values.get("max_length") or 0)
    else:
        values["token_budget"] = 0
    return tuple(sorted((name, _hashable(value)) for name, value in values.items()))


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


__all__ = ["DEFAULTS", "NAMING_FIELDS", "TIMING_FIELDS", "computation_key"]
