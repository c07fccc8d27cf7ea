"""Parity before speed: each configuration's losses and gradient norm against a baseline record.

Two methods, the first that both records allow:

- ``"probe"``: the batching-invariant probe (``metrics["parity_probe"]``, made by
  :mod:`nbhelpers.measure.sequence_parity` in the configuration's worker): the same samples, batched as
  each configuration's strategy batches them, a token-sum loss, gradients of the total. The summed loss of
  every sequence, the total loss and the gradient norm of the total are compared, so every strategy
  (token budget and bucketed too) gets a verdict.
- ``"first batch"``: records without the probe (older ones): the first step's loss and gradient norm
  (``metrics["loss_first"]``, ``metrics["grad_norm_first"]``), comparable only when both first steps
  hold the same sequences.

A configuration passes when every relative difference is within a tolerance chosen by device and
compute dtype (see :data:`TOLERANCES`), and the probe's few named parameters' gradient norms within
:data:`PARAMETER_GRADIENT` (or that tolerance, where looser).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from nbhelpers.analysis.records import metric_value
from nbhelpers.data.strategies import SAME_FIRST_BATCH_STRATEGIES
from nbhelpers.kernels.registry import BASELINE_BACKEND, cpu_tolerance, precision_tolerance, uses_liger_switches
from nbhelpers.kernels.spec import Tolerance
from nbhelpers.measure.store import RunRecord
from nbhelpers.models.frozen_base import BF16_BASE, frozen_base_tolerance

PASS, FAIL, NOT_CHECKED, BASELINE = "pass", "fail", "not checked", "baseline"

# Fields that fix the first batch and the initial weights: two records are comparable when these match.
SAME_BATCH_FIELDS = (
    "model", "dataset", "prompt_field", "response_field", "use_chat_template", "num_samples", "batch_size",
    "max_length", "seed",
)  # fmt: skip
# The weights' precision (RunConfig.dtype) may differ: a preset's random weights come from one seeded draw in
# either dtype (on a CPU, 98% of a bf16 draw's values equal the fp32 draw rounded to bf16), a checkpoint's are
# the same numbers rounded, so such a pair is judged at the looser of the two records' tolerances.
# Strategies whose first step holds the same sequences (Strategy.same_first_batch in the table): padded or
# packed, the loss over them must be the same, so a packed row that leaks across sequences fails parity.
PLAN_FIELDS = ("padding", "num_buckets", "token_budget")
# Fields that fix the probe's sequences, their tokens and the initial weights (the batch shape does not
# matter: the probe's losses are sums over tokens, the same however the sequences are grouped).
PROBE_FIELDS = (
    "model", "dataset", "prompt_field", "response_field", "use_chat_template", "max_length", "seed",
)  # fmt: skip
PROBE, FIRST_BATCH = "probe", "first batch"


# Tolerances by device and compute dtype; fp32 on a CPU reads each backend's own (its table entry's
# ``cpu_tolerance``, nbhelpers.kernels.registry).
TOLERANCES: dict[tuple[str, str], Tolerance] = {
    ("cuda", "fp32"): Tolerance(1e-3, "fp32 weights on GPU: TF32 matmuls are allowed"),
    ("any", "bf16"): Tolerance(2e-2, "bf16 compute: 8 mantissa bits, sums in another order"),
}


# One parameter's gradient norm (the probe's fingerprint of a few named tensors) has its own, looser bound: a small
# tensor such as the final norm's weight sums one term per token, so rounding that leans one way shows there while
# the totals above stay within their tolerance. Of the rows stored from an H200 (benchmarks/gpu), the 173 without
# Cut Cross-Entropy read at most 4.5% (the 2B hybrid's reference path, packed against padded, bf16; float8 rows at
# most 1.4%); CCE's bf16 sums of the hidden-state gradient read 10.0-10.5% on the 1.7B's final norm (15 rows).
# The bound is the larger of this and the pair's tolerance.
PARAMETER_GRADIENT = Tolerance(7.5e-2, "one parameter's gradient norm: rows without a biased kernel read up to 4.5%")


def _device_type(record: RunRecord) -> str:
    return str(record.environment.get("device_type", "cpu"))


def _dtype_of(record: RunRecord) -> str:
    return str(record.metrics.get("compute_dtype") or record.config.get("dtype", "fp32"))


def tolerance_for(record: RunRecord) -> Tolerance:
    """The tolerance a record's parity is judged by: bf16 anywhere, fp32 on a GPU, else the backend's own
    CPU tolerance (its entry in nbhelpers.kernels.registry); a lower-precision backend's (float8) or a quantized
    frozen base's (its entry in nbhelpers.models.frozen_base, from the format's rounding) where looser."""
    kernels = str(record.config.get("kernels", BASELINE_BACKEND))
    if "bf16" in _dtype_of(record):
        chosen = TOLERANCES[("any", "bf16")]
    elif _device_type(record) == "cuda":
        chosen = TOLERANCES[("cuda", "fp32")]
    else:
        chosen = cpu_tolerance(kernels)
    lower = precision_tolerance(kernels)
    chosen = lower if lower is not None and lower.rel > chosen.rel else chosen
    quantized = frozen_base_tolerance(str(record.config.get("frozen_base", BF16_BASE)))
    return Tolerance(*quantized) if quantized is not None and quantized[0] > chosen.rel else chosen


def pair_tolerance(record: RunRecord, baseline: RunRecord) -> Tolerance:
    """The tolerance of a record against its baseline: the record's own, or, where the two ran at different
    precisions (bf16-master against fp32 weights), the looser of the two, its basis saying so."""
    own = tolerance_for(record)
    if _dtype_of(record) == _dtype_of(baseline):
        return own
    looser = max(own, tolerance_for(baseline), key=lambda t: t.rel)
    basis = f"precisions differ ({_dtype_of(record)} vs the baseline's {_dtype_of(baseline)}): {looser.basis}"
    return Tolerance(looser.rel, basis)


def rel_diff(value: float, reference: float) -> float:
    """|value - reference| / |reference| (absolute difference when the reference is 0)."""
    scale = abs(reference)
    return abs(value - reference) / scale if scale > 0 else abs(value - reference)


def comparable(record: RunRecord, baseline: RunRecord) -> str:
    """'' when both records ran the same first batch from the same weights on one machine, else why not."""
    if record.machine != baseline.machine:
        return f"other machine ({record.machine} vs {baseline.machine})"
    differ = [f for f in SAME_BATCH_FIELDS if record.config.get(f) != baseline.config.get(f)]
    paddings = (record.config.get("padding"), baseline.config.get("padding"))
    if not all(p in SAME_FIRST_BATCH_STRATEGIES for p in paddings):
        differ += [f for f in PLAN_FIELDS if record.config.get(f) != baseline.config.get(f)]
    return f"different {', '.join(differ)}" if differ else ""


def probe_of(record: RunRecord) -> dict[str, Any] | None:
    """The record's parity probe, or None when it has none (or its probe failed)."""
    probe = record.metrics.get("parity_probe")
    if isinstance(probe, dict) and "error" not in probe and "total_loss" in probe:
        return probe
    return None


def probe_comparable(record: RunRecord, baseline: RunRecord) -> str:
    """'' when both records probed the same sequences from the same weights on one machine, else why not."""
    if record.machine != baseline.machine:
        return f"other machine ({record.machine} vs {baseline.machine})"
    probe, base = probe_of(record), probe_of(baseline)
    if probe is None or base is None:
        return "no parity probe in " + ("the record" if probe is None else "the baseline")
    differ = [f for f in PROBE_FIELDS if record.config.get(f) != baseline.config.get(f)]
    if differ:
        return f"different {', '.join(differ)}"
    if probe.get("samples") != base.get("samples"):
        return f"the probes took other samples ({len(probe.get('samples') or [])} vs {len(base.get('samples') or [])})"
    return ""


def _finite(values: Iterable[Any]) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _judge_probe(record: RunRecord, baseline: RunRecord, tolerance: Tolerance) -> dict[str, Any]:
    """Status and differences of two comparable probes: per-sequence summed losses, total, gradient norm."""
    probe, base = probe_of(record), probe_of(baseline)
    assert probe is not None and base is not None
    out: dict[str, Any] = {"method": PROBE}
    pairs = [(probe.get(k), base.get(k)) for k in ("total_loss", "grad_norm")]
    if not _finite(v for pair in pairs for v in pair):
        return out | {"status": FAIL, "note": "the probe's total loss or gradient norm is not finite"}
    (loss, base_loss), (grad, base_grad) = pairs
    out |= {"loss_rel_diff": rel_diff(loss, base_loss), "grad_norm_rel_diff": rel_diff(grad, base_grad)}
    diffs = [out["loss_rel_diff"], out["grad_norm_rel_diff"]]
    notes = [n for n in (probe.get("note"), base.get("note")) if n]
    sums, base_sums = probe.get("sequence_loss_sums"), base.get("sequence_loss_sums")
    if sums is not None and base_sums is not None:
        if probe.get("sequence_loss_tokens") != base.get("sequence_loss_tokens"):
            return out | {"status": FAIL, "note": "the sequences' loss-token counts differ from the baseline's"}
        if not _finite(sums):
            return out | {"status": FAIL, "note": "a sequence's loss is not finite"}
        per_sequence = max((rel_diff(a, b) for a, b in zip(sums, base_sums)), default=0.0)
        out["per_sequence_max_rel_diff"] = per_sequence
        diffs.append(per_sequence)
        notes.append(f"{len(sums)} sequences compared one by one")
    else:
        notes.append("per-sequence losses not compared")
    ok = all(d <= tolerance.rel for d in diffs)
    fingerprint, base_fingerprint = probe.get("param_grad_norms") or {}, base.get("param_grad_norms") or {}
    shared = [n for n in fingerprint if n in base_fingerprint]
    if shared and _finite([*fingerprint.values(), *base_fingerprint.values()]):
        by_name = {n: rel_diff(fingerprint[n], base_fingerprint[n]) for n in shared}
        worst = max(by_name, key=by_name.__getitem__)
        out["param_grad_max_rel_diff"] = diff = by_name[worst]
        bound = max(PARAMETER_GRADIENT.rel, tolerance.rel)
        if diff > bound:
            ok = False
            notes.append(f"the gradient of {worst} is {diff:.1%} off the baseline's (one parameter's bound {bound:g})")
    return out | {"status": PASS if ok else FAIL, "note": "; ".join(dict.fromkeys(notes))}


def _judge_first_batch(record: RunRecord, baseline: RunRecord, tolerance: Tolerance) -> dict[str, Any]:
    """Status and differences of the first step's loss and gradient norm (records without a probe)."""
    out: dict[str, Any] = {"method": FIRST_BATCH}
    why = comparable(record, baseline)
    if why:
        return out | {"note": why}
    keys = ("loss_first", "grad_norm_first")
    values = [metric_value(r, k, None, finite=False) for r in (record, baseline) for k in keys]
    if any(v is None for v in values):
        return out | {"note": "no loss_first / grad_norm_first in the metrics"}
    loss, grad, base_loss, base_grad = values  # type: ignore[misc]
    if not all(math.isfinite(v) for v in values):  # type: ignore[arg-type]
        return out | {"status": FAIL, "note": "a loss or gradient norm is not finite"}
    loss_diff, grad_diff = rel_diff(loss, base_loss), rel_diff(grad, base_grad)
    ok = loss_diff <= tolerance.rel and grad_diff <= tolerance.rel
    return out | {"status": PASS if ok else FAIL, "loss_rel_diff": loss_diff, "grad_norm_rel_diff": grad_diff}


def _probe_errors(record: RunRecord, baseline: RunRecord) -> str:
    errors = []
    for which, name in ((record, "record"), (baseline, "baseline")):
        probe = which.metrics.get("parity_probe")
        if isinstance(probe, dict) and probe.get("error"):
            errors.append(f"{name}'s parity probe failed: {str(probe['error'])[:200]}")
    return "; ".join(errors)


def check_parity(record: RunRecord, baseline: RunRecord) -> dict[str, Any]:
    """The parity verdict of one record against the baseline, as stored in ``metrics["parity"]``.

    The probe when both records have one and probed the same workload (``method`` "probe"), else the
    first batch (``method`` "first batch"); see the module's docstring.
    """
    tolerance = pair_tolerance(record, baseline)
    verdict: dict[str, Any] = {
        "status": NOT_CHECKED,
        "loss_rel_diff": None,
        "grad_norm_rel_diff": None,
        "per_sequence_max_rel_diff": None,
        "param_grad_max_rel_diff": None,
        "tolerance": tolerance.rel,
        "tolerance_basis": tolerance.basis,
        "baseline": baseline.label,
        "baseline_record_id": baseline.record_id,
        "method": "",
        "note": "",
    }
    if record.record_id == baseline.record_id:
        return verdict | {
            "status": BASELINE, "loss_rel_diff": 0.0, "grad_norm_rel_diff": 0.0, "tolerance": None,
            "tolerance_basis": "the reference every other configuration is compared with",
            "method": PROBE if probe_of(record) else FIRST_BATCH,
        }  # fmt: skip
    for which, name in ((record, "record"), (baseline, "baseline")):
        if not which.ok:
            return verdict | {"note": f"{name} failed: {which.reason[:200]}", "tolerance": None}
    if not probe_comparable(record, baseline):
        return verdict | _judge_probe(record, baseline, tolerance)
    result = verdict | _judge_first_batch(record, baseline, tolerance)
    errors = _probe_errors(record, baseline)
    if errors:
        result["note"] = "; ".join(n for n in (errors, result["note"]) if n)
    return result


def check_against_first(record: RunRecord, earlier: Sequence[RunRecord]) -> None:
    """For ``run_configs(annotate=...)``: judge each record against the first one measured (its baseline)."""
    if record.ok:
        record.metrics["parity"] = check_parity(record, earlier[0] if earlier else record)


def find_baseline(records: Sequence[RunRecord], baseline_label: str) -> RunRecord:
    """The (last) record with this label; a clear error naming the labels there are."""
    matches = [r for r in records if r.label == baseline_label]
    if not matches:
        labels = ", ".join(repr(r.label) for r in records) or "none"
        raise ValueError(f"no record labelled {baseline_label!r} to compare against; labels: {labels}")
    return matches[-1]


def attach_parity(records: Iterable[RunRecord], baseline_label: str) -> list[RunRecord]:
    """Set ``metrics["parity"]`` on every ok record (call before storing: records are append-only)."""
    records = list(records)
    baseline = find_baseline(records, baseline_label)
    for record in records:
        if record.ok:
            record.metrics["parity"] = check_parity(record, baseline)
    return records


def _row(record: RunRecord, baseline: RunRecord) -> dict[str, Any]:
    verdict = check_parity(record, baseline)
    kernels = str(record.config.get("kernels", ""))
    probe = probe_of(record) if verdict["method"] == PROBE else None
    loss = probe["total_loss"] if probe else metric_value(record, "loss_first", None, finite=False)
    grad = probe["grad_norm"] if probe else metric_value(record, "grad_norm_first", None, finite=False)
    return {
        "backend": record.label,
        "kernels": kernels,
        "liger kernels": ", ".join(record.config.get("liger_kernels") or ()) if uses_liger_switches(kernels) else "",
        "padding": record.config.get("padding", ""),
        "method": verdict["method"],
        "loss": loss,
        "grad norm": grad,
        "loss rel diff": verdict["loss_rel_diff"],
        "grad norm rel diff": verdict["grad_norm_rel_diff"],
        "per-sequence max rel diff": verdict["per_sequence_max_rel_diff"],
        "tolerance": verdict["tolerance"],
        "status": verdict["status"],
        "why this tolerance": verdict["tolerance_basis"],
        "note": verdict["note"],
    }


def parity_table(records: Iterable[RunRecord], baseline_label: str) -> Any:
    """One row per record: the method, the compared loss and gradient norm, relative diffs, tolerance, status.

    With the probe, "loss" is the total summed loss of the probe's sequences and "grad norm" the norm of
    its gradient; without it, the first step's mean loss and gradient norm.
    """
    import pandas as pd

    records = list(records)
    baseline = find_baseline(records, baseline_label)
    return pd.DataFrame([_row(record, baseline) for record in records])


def parity_against_eager(records: Iterable[RunRecord]) -> Any:
    """Records from many runs (shipped GPU results): each non-eager record against a comparable eager one.

    Comparable: same machine and the same probe workload (see PROBE_FIELDS) or the same first batch (see
    SAME_BATCH_FIELDS); among several, the one at the same precision, then with the same attention, then from
    the same source file is preferred. No comparable eager record: not checked.
    """
    import pandas as pd

    records = list(records)
    eager = [r for r in records if r.ok and r.config.get("kernels") == BASELINE_BACKEND]
    rows = []
    for record in records:
        if record.config.get("kernels", BASELINE_BACKEND) == BASELINE_BACKEND:
            continue
        candidates = [e for e in eager if not probe_comparable(record, e) or not comparable(record, e)]

        def preference(e: RunRecord, record: RunRecord = record) -> tuple[bool, bool, bool]:
            same_precision = _dtype_of(e) == _dtype_of(record)
            same_attention = e.config.get("attn_implementation") == record.config.get("attn_implementation")
            return same_precision, same_attention, e.artifacts.get("source") == record.artifacts.get("source")

        baseline = max(candidates, key=preference, default=None)
        row = {"machine": record.machine}
        if baseline is None:
            row |= _row(record, record) | {"status": NOT_CHECKED, "note": "no comparable eager record"}
            row |= {"loss rel diff": None, "grad norm rel diff": None, "baseline": ""}
        else:
            row |= _row(record, baseline) | {"baseline": baseline.label}
        row["validity"] = record.metrics.get("validity", "")
        rows.append(row)
    columns = ["machine", "backend", "baseline", "kernels", "loss", "grad norm", "loss rel diff", "grad norm rel diff",
               "tolerance", "status", "note", "validity"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def cpu_unchecked_table(records: Iterable[RunRecord]) -> Any:
    """Liger kernels that could not run on this CPU: kernel, status and the failed record's reason."""
    import pandas as pd

    rows = [
        {
            "kernel": ", ".join(r.config.get("liger_kernels") or ()),
            "status": "ran" if r.ok else "failed: not checked on CPU",
            "reason": r.reason,
        }
        for r in records
    ]
    return pd.DataFrame(rows, columns=["kernel", "status", "reason"])


def store_checked(store: Any, records: Iterable[RunRecord], baseline_label: str) -> list[RunRecord]:
    """Attach each record's parity verdict, then append them to the (append-only) store, in order; a reused
    record (already there) is not appended again, nor one listed twice (a grid row that was also the cold start)."""
    records = attach_parity(list({r.record_id: r for r in records}.values()), baseline_label)
    for record in records:
        if not record.reused:
            store.append(record)
    return records
