"""Diff two traces: which kernels were removed, added or changed, per step.

A name present in both is "changed" when its calls per step differ or its time per step moved by
more than ``rel_tol`` of the larger of the two; otherwise "unchanged".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .parse import Trace

STATUSES = ("removed", "added", "changed", "unchanged")


def _per_step(trace: Trace, key: str) -> pd.DataFrame:
    ops = trace.ops
    grouped = ops.groupby(key, sort=False).agg(calls=("dur_us", "size"), time=("dur_us", "sum"))
    frame = pd.DataFrame(
        {
            "calls_per_step": grouped["calls"] / trace.num_steps,
            "time_per_step_us": grouped["time"] / trace.num_steps,
        }
    )
    if key == "name":
        frame["category"] = ops.groupby("name", sort=False)["category"].first()
    return frame


def _outer(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    return pd.merge(old, new, how="outer", left_index=True, right_index=True, suffixes=("_before", "_after"))


def diff_traces(before: Trace, after: Trace, rel_tol: float = 0.05) -> pd.DataFrame:
    """Kernels by name: calls and time per step before/after, delta, category, status.

    Sorted by the size of the time change per step (largest first).
    """
    old, new = _per_step(before, "name"), _per_step(after, "name")
    frame = _outer(old, new)
    in_old = frame["calls_per_step_before"].notna().to_numpy()
    in_new = frame["calls_per_step_after"].notna().to_numpy()
    frame["category"] = frame["category_before"].fillna(frame["category_after"])
    for column in ("calls_per_step", "time_per_step_us"):
        frame[f"{column}_before"] = frame[f"{column}_before"].fillna(0.0)
        frame[f"{column}_after"] = frame[f"{column}_after"].fillna(0.0)
    frame["delta_calls_per_step"] = frame["calls_per_step_after"] - frame["calls_per_step_before"]
    frame["delta_time_per_step_us"] = frame["time_per_step_us_after"] - frame["time_per_step_us_before"]
    larger = np.maximum(frame["time_per_step_us_before"], frame["time_per_step_us_after"]).to_numpy()
    moved = np.abs(frame["delta_time_per_step_us"].to_numpy()) > rel_tol * larger
    calls_differ = ~np.isclose(frame["calls_per_step_before"], frame["calls_per_step_after"])
    status = np.where(
        ~in_new, "removed", np.where(~in_old, "added", np.where(calls_differ | moved, "changed", "unchanged"))
    )
    frame["status"] = status
    frame = frame.rename_axis("name").reset_index()
    frame["abs_delta"] = frame["delta_time_per_step_us"].abs()
    frame = frame.sort_values(["abs_delta", "name"], ascending=[False, True]).reset_index(drop=True)
    columns = [
        "name",
        "category",
        "status",
        "calls_per_step_before",
        "calls_per_step_after",
        "delta_calls_per_step",
        "time_per_step_us_before",
        "time_per_step_us_after",
        "delta_time_per_step_us",
    ]
    frame = frame[columns]
    frame.attrs["unit"] = after.unit
    return frame


def diff_categories(before: Trace, after: Trace) -> pd.DataFrame:
    """Per category: time and launches per step before, after and delta (largest time change first)."""
    old, new = _per_step(before, "category"), _per_step(after, "category")
    frame = _outer(old, new).fillna(0.0)
    result = pd.DataFrame(
        {
            "category": frame.index.astype(str),
            "time_per_step_us_before": frame["time_per_step_us_before"].to_numpy(),
            "time_per_step_us_after": frame["time_per_step_us_after"].to_numpy(),
            "launches_per_step_before": frame["calls_per_step_before"].to_numpy(),
            "launches_per_step_after": frame["calls_per_step_after"].to_numpy(),
        }
    )
    result["delta_time_per_step_us"] = result["time_per_step_us_after"] - result["time_per_step_us_before"]
    result["delta_launches_per_step"] = result["launches_per_step_after"] - result["launches_per_step_before"]
    result["abs_delta"] = result["delta_time_per_step_us"].abs()
    result = result.sort_values(["abs_delta", "category"], ascending=[False, True]).reset_index(drop=True)
    result = result[
        [
            "category",
            "time_per_step_us_before",
            "time_per_step_us_after",
            "delta_time_per_step_us",
            "launches_per_step_before",
            "launches_per_step_after",
            "delta_launches_per_step",
        ]
    ]
    result.attrs["unit"] = after.unit
    return result


def diff_summary(before: Trace, after: Trace, rel_tol: float = 0.05) -> dict[str, Any]:
    """Headline numbers of a diff as plain JSON-ready values."""
    kernels = diff_traces(before, after, rel_tol)
    launches_before = len(before.ops) / before.num_steps
    launches_after = len(after.ops) / after.num_steps
    time_before = float(before.ops["dur_us"].sum()) / before.num_steps
    time_after = float(after.ops["dur_us"].sum()) / after.num_steps
    counts = kernels["status"].value_counts()
    return {
        "unit_before": before.unit,
        "unit_after": after.unit,
        "launches_per_step_before": launches_before,
        "launches_per_step_after": launches_after,
        "launches_ratio": launches_after / launches_before if launches_before else None,
        "kernel_time_per_step_us_before": time_before,
        "kernel_time_per_step_us_after": time_after,
        "kernel_time_ratio": time_after / time_before if time_before else None,
        "names": {status: int(counts.get(status, 0)) for status in STATUSES},
    }
