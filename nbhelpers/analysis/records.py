"""What a RunRecord says and which records may be compared: label, workload, baselines, speedup, fastest.

A speedup is a ratio of two records from one run on one machine of one workload: :func:`speedup` refuses
anything else (:class:`CrossMachineError` for another machine or run, :class:`GpuCountError` for another GPU
count, whose only meaningful ratio is :func:`scaling_efficiency`). Every table, recommendation and
report builds on these rules, so they live here once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nbhelpers.data.strategies import BASELINE_STRATEGY
from nbhelpers.kernels.registry import BASELINE_BACKEND, uses_liger_switches
from nbhelpers.measure.engines import WORKBOOK
from nbhelpers.measure.spread import MIN_TIMED_STEPS, overlaps, rate_interval, ratio_interval
from nbhelpers.measure.store import RunRecord

STEP_KIND = "step"
ADAPTER_FIELDS = ("adapter", "lora_rank", "lora_alpha", "lora_targets")  # the LoRA ones matter with an adapter only
WORKLOAD_FIELDS = ("model", "dataset", "batch_size", "max_length", "num_samples", "dtype", "seed", "steps", "warmup",
                   "prompt_field", "response_field", "use_chat_template", "timing", *ADAPTER_FIELDS,
                   "gpus")  # fmt: skip
# Values of records written before a field existed: steps timed, full fine-tuning, one GPU.
WORKLOAD_DEFAULTS = {"timing": "steps", "adapter": "none", "lora_rank": 16, "lora_alpha": 32,
                     "lora_targets": "all-linear", "gpus": 1}  # fmt: skip


class CrossMachineError(ValueError):
    """Two records that may not be divided: different machines or different runs."""


class GpuCountError(ValueError):
    """Two records of different GPU counts divided as a speedup (only a scaling efficiency may divide them)."""


# ----------------------------------------------------------------------------------------------
# One record


def record_label(record: RunRecord) -> str:
    """The configuration's label, or one derived from its settings like RunConfig.name."""
    cfg = record.config
    if cfg.get("label"):
        return str(cfg["label"])
    if cfg.get("name"):
        return str(cfg["name"])
    if "kernels" in cfg or "padding" in cfg:
        return (
            f"{cfg.get('kernels', '?')}/{cfg.get('padding', '?')}/{cfg.get('attn_implementation', '?')}"
            f"/b{cfg.get('batch_size', '?')}x{cfg.get('max_length', '?')}"
        )
    return record.record_id


def run_name_of(record: RunRecord) -> str:
    """The run the record belongs to ("" when it names none)."""
    return str(record.config.get("run_name", ""))


def _timed_window(cfg: dict[str, Any]) -> str:
    if cfg.get("timing") == "epoch":
        return "whole epochs timed after one untimed"
    return f"{cfg.get('warmup', '?')}+{cfg.get('steps', '?')} steps"


def workload_of(record: RunRecord) -> str:
    """What the step trains on: model, data, batch shape, dtype; speedups only divide equal workloads."""
    cfg = record.config
    text = (
        f"{cfg.get('model', '?')} on {cfg.get('dataset', '?')}, b{cfg.get('batch_size', '?')}x"
        f"{cfg.get('max_length', '?')}, {cfg.get('num_samples', '?')} samples, {cfg.get('dtype', '?')}, "
        f"seed {cfg.get('seed', '?')}, {_timed_window(cfg)}"
    )
    fields = (cfg.get("prompt_field"), cfg.get("response_field"), cfg.get("use_chat_template"))
    if fields not in ((None, None, None), ("prompt", "response", False)):
        text += f", fields {fields[0]}/{fields[1]}" + (", chat template" if fields[2] else "")
    if cfg.get("adapter", "none") != "none":
        text += f", {cfg['adapter']} r{cfg.get('lora_rank', '?')} alpha {cfg.get('lora_alpha', '?')} on "
        text += str(cfg.get("lora_targets", WORKLOAD_DEFAULTS["lora_targets"]))
    if gpu_count(record) != 1:
        text += f", {gpu_count(record)} GPUs (batch per GPU)"
    return text


def gpu_count(record: RunRecord) -> int:
    """GPUs (processes) the record ran on; 1 for records written before the field existed."""
    value = record.config.get("gpus", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def workload_fields(config: Mapping[str, Any]) -> tuple[Any, ...]:
    """A stored config's WORKLOAD_FIELDS in order (GPU count last), older records' missing fields at their
    defaults; without an adapter the LoRA settings are left out (None), as they change nothing."""
    values = {f: config.get(f, WORKLOAD_DEFAULTS.get(f)) for f in WORKLOAD_FIELDS}
    if values["adapter"] == "none":
        values.update(dict.fromkeys(ADAPTER_FIELDS[1:]))
    return tuple(values.values())


def _workload_fields(record: RunRecord) -> tuple[Any, ...]:
    return workload_fields(record.config)


def group_key(record: RunRecord) -> tuple[str, str, str]:
    """(machine, run name, workload): the only set of records whose throughputs may be divided."""
    return (record.machine, run_name_of(record), workload_of(record))


def metric_value(record: RunRecord, key: str, missing: float | None = math.nan, finite: bool = True) -> float | None:
    """``record.metrics[key]`` as a float; ``missing`` when it is absent, a bool or not a number.

    With ``finite`` (the default) NaN and infinity count as missing too; ``finite=False`` keeps them, for
    a check that must see a diverged loss.
    """
    value = record.metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return missing
    if finite and not math.isfinite(value):
        return missing
    return float(value)


def tokens_per_s(record: RunRecord) -> float | None:
    """Real (non-pad) tokens per second, or None when the record has no usable value."""
    return metric_value(record, "real_tokens_per_s", None)


def rate_interval_of(record: RunRecord) -> tuple[float, float] | None:
    """The interval of the record's real tok/s: the stored one, else the bootstrap over its stored timed steps
    (records written before intervals existed), else None."""
    stored = record.metrics.get("real_tokens_per_s_interval")
    if isinstance(stored, (list, tuple)) and len(stored) == 2 and all(_finite(v) for v in stored):
        return float(stored[0]), float(stored[1])
    tokens, seconds = record.metrics.get("timed_real_tokens"), record.metrics.get("step_times_s")
    if (
        isinstance(tokens, list) and isinstance(seconds, list) and tokens and len(tokens) == len(seconds)
        and all(_finite(v) for v in tokens) and all(_finite(v) and v > 0 for v in seconds)
    ):  # fmt: skip
        return rate_interval(tokens, seconds)
    return None


def rates_overlap(first: RunRecord, second: RunRecord) -> bool:
    """Whether both records' intervals of real tok/s are known and share a point (the data do not say which is
    faster)."""
    one, other = rate_interval_of(first), rate_interval_of(second)
    return one is not None and other is not None and overlaps(one, other)


def timed_step_count(record: RunRecord) -> int | None:
    """How many timed steps the record's figure rests on (None when it does not say)."""
    for key in ("timed_steps", "timed_batches"):
        value = record.metrics.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def is_thin(record: RunRecord) -> bool:
    """Whether a measured record rests on fewer timed steps than the floor (``spread.MIN_TIMED_STEPS``), or does
    not say how many."""
    if "thin" in record.metrics and isinstance(record.metrics["thin"], bool):
        return record.metrics["thin"]
    steps = timed_step_count(record)
    return steps is None or steps < MIN_TIMED_STEPS


def speedup_interval(record: RunRecord, baseline: RunRecord) -> tuple[float, float] | None:
    """A conservative interval of ``speedup(record, baseline)``: the two rates' intervals divided end by end."""
    mine, theirs = rate_interval_of(record), rate_interval_of(baseline)
    if mine is None or theirs is None or theirs[0] <= 0:
        return None
    return ratio_interval(mine, theirs)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parity_status(record: RunRecord) -> str:
    """The record's parity verdict ("pass", "fail", ...), "not checked" without one."""
    parity = record.metrics.get("parity")
    if isinstance(parity, dict):
        return str(parity.get("status", "not checked"))
    if isinstance(parity, str):
        return parity
    return "not checked"


def is_measured(record: RunRecord) -> bool:
    """An ok step record with a throughput."""
    return record.kind == STEP_KIND and record.ok and tokens_per_s(record) is not None


def is_workbook(record: RunRecord) -> bool:
    """Measured in the workbook's own step, not a peer row (TRL's SFTTrainer; RunConfig.engine)."""
    return str(record.config.get("engine", WORKBOOK)) == WORKBOOK


def is_candidate(record: RunRecord) -> bool:
    """A measured workbook record that may be recommended: its parity check did not fail."""
    return is_measured(record) and is_workbook(record) and parity_status(record) != "fail"


def is_valid(record: RunRecord, validity: dict[str, str] | None = None) -> bool:
    """False when a validity note marks the record invalid; records without a note count as valid."""
    return not (validity or {}).get(record.record_id, "valid").lower().startswith("invalid")


def kernels_label(record: RunRecord) -> str:
    """The record's kernel backend, with its Liger switches when they are not the default set."""
    from nbhelpers.measure.config import RunConfig

    kernels, default = str(record.config.get("kernels", BASELINE_BACKEND)), RunConfig().liger_kernels
    switches = tuple(record.config.get("liger_kernels") or default)
    if not uses_liger_switches(kernels) or switches == default:
        return kernels
    return f"{kernels} ({', '.join(switches)})"


# ----------------------------------------------------------------------------------------------
# Groups of records


def step_records(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The records of kind "step" (measured configurations), in order."""
    return [r for r in records if r.kind == STEP_KIND]


def group_records(records: Iterable[RunRecord]) -> dict[tuple[str, str, str], list[RunRecord]]:
    """Step records grouped by :func:`group_key` (machine, run, workload), in order of first appearance."""
    groups: dict[tuple[str, str, str], list[RunRecord]] = {}
    for record in step_records(records):
        groups.setdefault(group_key(record), []).append(record)
    return groups


def machines_of(records: Iterable[RunRecord]) -> list[str]:
    """The machines of the step records, in order of first appearance."""
    seen: list[str] = []
    for record in step_records(records):
        if record.machine not in seen:
            seen.append(record.machine)
    return seen


def fastest(records: Sequence[RunRecord]) -> RunRecord | None:
    """Highest real tok/s; ties go to the lower peak memory, then to the earlier record."""
    best = None
    for record in records:
        if best is None:
            best = record
            continue
        a, b = tokens_per_s(record), tokens_per_s(best)
        mem_a = metric_value(record, "peak_memory_gib", math.inf)
        mem_b = metric_value(best, "peak_memory_gib", math.inf)
        if a > b or (a == b and mem_a < mem_b):
            best = record
    return best


# ----------------------------------------------------------------------------------------------
# Baselines and speedups


def default_baseline(records: Sequence[RunRecord]) -> RunRecord | None:
    """The first measured workbook record with kernels "eager" and the baseline padding (static), else the first
    one; peer rows (TRL) are never a baseline."""
    measured = [r for r in records if is_measured(r) and is_workbook(r)]
    for record in measured:
        if record.config.get("kernels") == BASELINE_BACKEND and record.config.get("padding") == BASELINE_STRATEGY:
            return record
    return measured[0] if measured else None


def choose_baselines(
    records: Iterable[RunRecord], baseline_label: str | None = None
) -> dict[tuple[str, str, str], RunRecord | None]:
    """The baseline of every (machine, run, workload) group.

    With ``baseline_label`` a group uses its first measured record of that label; a group without one
    falls back to the default rule (with a warning). A label found in no group at all is an error.
    """
    groups = group_records(records)
    chosen: dict[tuple[str, str, str], RunRecord | None] = {}
    found_anywhere = False
    for key, members in groups.items():
        match = None
        if baseline_label:
            match = next((r for r in members if is_measured(r) and record_label(r) == baseline_label), None)
            found_anywhere = found_anywhere or match is not None
        chosen[key] = match or default_baseline(members)
    if baseline_label and groups and not found_anywhere:
        labels = sorted({record_label(r) for r in step_records(records) if is_measured(r)})
        raise ValueError(
            f"baseline_label={baseline_label!r} matches no measured step record; "
            f"measured labels are: {', '.join(labels) or '(none)'}"
        )
    if baseline_label:
        for (machine, run, _workload), base in chosen.items():
            if base is not None and record_label(base) != baseline_label:
                warnings.warn(
                    f"run {run!r} on {machine}: no measured {baseline_label!r}; "
                    f"baseline is {record_label(base)!r} instead",
                    stacklevel=2,
                )
    return chosen


def speedup(record: RunRecord, baseline: RunRecord) -> float:
    """Real tok/s of ``record`` over ``baseline``: both from one run on one machine, both measured."""
    if record.machine != baseline.machine:
        raise CrossMachineError(
            f"cannot divide {record_label(record)!r} on {record.machine!r} by {record_label(baseline)!r} on "
            f"{baseline.machine!r}: a speedup is only a ratio of records from one run on one machine "
            "(same samples, same order, same device); compare machines by their own baselines instead"
        )
    if run_name_of(record) != run_name_of(baseline):
        raise CrossMachineError(
            f"cannot divide {record_label(record)!r} from run {run_name_of(record)!r} by "
            f"{record_label(baseline)!r} from run {run_name_of(baseline)!r}: a speedup is only a ratio of "
            "records from one run on one machine"
        )
    if gpu_count(record) != gpu_count(baseline):
        raise GpuCountError(
            f"cannot divide {record_label(record)!r} on {gpu_count(record)} GPUs by {record_label(baseline)!r} on "
            f"{gpu_count(baseline)}: across GPU counts only a scaling efficiency (per-GPU throughput over "
            "per-GPU throughput, records.scaling_efficiency) is a meaningful ratio"
        )
    if _workload_fields(record) != _workload_fields(baseline):
        raise ValueError(
            f"cannot divide {record_label(record)!r} ({workload_of(record)}) by {record_label(baseline)!r} "
            f"({workload_of(baseline)}): a speedup compares one workload (same model, data and batch shape)"
        )
    for which in (record, baseline):
        if not is_measured(which):
            raise ValueError(
                f"{record_label(which)!r} has no measured throughput (status {which.status!r}"
                + (f": {which.reason}" if which.reason else "")
                + "), so no speedup can be computed"
            )
    base = tokens_per_s(baseline)
    if not base:
        raise ValueError(f"baseline {record_label(baseline)!r} has zero throughput")
    return tokens_per_s(record) / base


def per_gpu_tokens_per_s(record: RunRecord) -> float | None:
    """Real tok/s per GPU: the record's total over its GPU count."""
    total = tokens_per_s(record)
    return None if total is None else total / gpu_count(record)


def scaling_efficiency(record: RunRecord, reference: RunRecord) -> float:
    """Per-GPU real tok/s of ``record`` over that of ``reference`` (fewer GPUs, usually one): 1.0 = linear.

    Both from one run on one machine, of one workload per GPU (same model, data, per-GPU batch shape), so
    the only thing that differs is the GPU count; the ratio is a scaling efficiency, never a speedup.
    """
    if gpu_count(record) <= gpu_count(reference):
        raise ValueError(
            f"scaling_efficiency needs more GPUs in {record_label(record)!r} ({gpu_count(record)}) than in the "
            f"reference {record_label(reference)!r} ({gpu_count(reference)})"
        )
    for which in (record, reference):
        if not is_measured(which):
            raise ValueError(f"{record_label(which)!r} has no measured throughput (status {which.status!r})")
    if record.machine != reference.machine:
        raise CrossMachineError(
            f"cannot compare {record_label(record)!r} on {record.machine!r} with {record_label(reference)!r} on "
            f"{reference.machine!r}: a scaling efficiency compares records of one machine"
        )
    if run_name_of(record) != run_name_of(reference):
        raise CrossMachineError(
            f"cannot compare {record_label(record)!r} from run {run_name_of(record)!r} with "
            f"{record_label(reference)!r} from run {run_name_of(reference)!r}: one run only"
        )
    ours, theirs = _workload_fields(record)[:-1], _workload_fields(reference)[:-1]  # all but the GPU count
    if ours != theirs:
        raise ValueError(
            f"cannot compare {record_label(record)!r} ({workload_of(record)}) with {record_label(reference)!r} "
            f"({workload_of(reference)}): a scaling efficiency compares one workload per GPU"
        )
    return per_gpu_tokens_per_s(record) / per_gpu_tokens_per_s(reference)
