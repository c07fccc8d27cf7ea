"""Why a measured record ends its branch of the tuner's search: failed, a non-finite loss, no throughput, or a
failed parity against the baseline."""

from __future__ import annotations

import math

from nbhelpers.analysis.records import metric_value, tokens_per_s
from nbhelpers.measure.store import RunRecord


def problem_of(record: RunRecord) -> str:
    """Why a measured record ends its branch: failed, a non-finite loss, or a failed parity ('' if none)."""
    if not record.ok:
        return f"failed: {record.reason}"
    losses = [metric_value(record, "loss_first", None, finite=False)] + list(record.metrics.get("losses") or [])
    if any(not isinstance(v, (int, float)) or not math.isfinite(v) for v in losses):
        return "non-finite loss"
    if tokens_per_s(record) is None:
        return "no real tok/s in the record"
    parity = record.metrics.get("parity")
    if isinstance(parity, dict) and parity.get("status") == "fail":
        diffs = ", ".join(
            f"{k} {parity[k]:.2e}" for k in ("loss_rel_diff", "grad_norm_rel_diff") if isinstance(parity.get(k), float)
        )
        detail = diffs or parity.get("note", "")
        return f"parity fail against the baseline ({detail}; tolerance {parity.get('tolerance')})"
    return ""


__all__ = ["problem_of"]
