"""What the kernel backends' records show: patch reports side by side, and the kernel diff of two profiled records.

The kernels a backend replaces are read off the model when it is applied (:mod:`nbhelpers.kernels.backends`);
the traces are read by :mod:`nbhelpers.profiling`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.kernels.registry import BASELINE_BACKEND, KERNEL_CHECKS, REPORT_KEYS, requested_kernels


def patch_report_frame(report: dict[str, bool], requested: Iterable[str] = ()) -> Any:
    """One row per kernel: requested, replaced (verified on the model), what was checked, verdict."""
    import pandas as pd

    wanted = set(requested)
    rows = []
    for kernel in REPORT_KEYS:
        replaced = bool(report.get(kernel, False))
        asked = kernel in wanted
        verdict = "replaced" if asked and replaced else "NOT replaced" if asked else "extra" if replaced else "off"
        row = {"kernel": kernel, "requested": asked, "replaced": replaced, "verdict": verdict}
        rows.append(row | {"checked": KERNEL_CHECKS[kernel]})
    return pd.DataFrame(rows)


def patch_reports_frame(records: Iterable[Any]) -> Any:
    """Patch reports of several records side by side: one row per kernel, one column per backend.

    A cell reads "replaced", "off", "NOT replaced" (requested, not found) or "extra" (found, not
    requested); a failed record shows "failed" in every cell (its reason is in the record).
    """
    import pandas as pd

    frame = pd.DataFrame({"kernel": list(REPORT_KEYS)})
    for record in records:
        config = record.config
        requested = requested_kernels(str(config.get("kernels", BASELINE_BACKEND)), config.get("liger_kernels") or ())
        report = record.metrics.get("patch_report")
        if record.ok and isinstance(report, dict):
            column = patch_report_frame(report, requested)["verdict"].tolist()
        else:
            column = ["failed" if k in requested else "off" for k in REPORT_KEYS]
        frame[record.label] = column
    frame["checked"] = [KERNEL_CHECKS[k] for k in REPORT_KEYS]
    return frame


def best_other_backend(records: Iterable[Any], baseline_label: str) -> Any | None:
    """The fastest ok record (real tok/s) other than the baseline, with a trace and parity not failed."""
    candidates = [
        r
        for r in records
        if r.ok
        and r.label != baseline_label
        and r.artifacts.get("trace")
        and (r.metrics.get("parity") or {}).get("status") != "fail"
        and r.metrics.get("real_tokens_per_s")
    ]
    return max(candidates, key=lambda r: r.metrics["real_tokens_per_s"], default=None)


def kernel_diff(before: Any, after: Any, rel_tol: float = 0.05) -> dict[str, Any]:
    """What changed at kernel level between two profiled records.

    Returns ``summary`` (launches, kernel time, kernel names by status, peak memory, step time: before,
    after, ratio), ``kernels`` (diff_traces) and ``categories`` (diff_categories) as DataFrames.
    """
    import pandas as pd

    from nbhelpers.profiling.diff import diff_categories, diff_summary, diff_traces
    from nbhelpers.profiling.parse import load_trace

    for record in (before, after):
        if not record.artifacts.get("trace"):
            raise ValueError(f"{record.label!r} has no trace: run it with profile=True")
    old, new = load_trace(before.artifacts["trace"]), load_trace(after.artifacts["trace"])
    head = diff_summary(old, new, rel_tol)
    rows = [
        ("launches per step", head["launches_per_step_before"], head["launches_per_step_after"]),
        ("kernel time per step (us)", head["kernel_time_per_step_us_before"], head["kernel_time_per_step_us_after"]),
        ("peak memory GiB", before.metrics.get("peak_memory_gib"), after.metrics.get("peak_memory_gib")),
        ("step time median (s)", before.metrics.get("step_time_median_s"), after.metrics.get("step_time_median_s")),
    ]
    summary = pd.DataFrame(rows, columns=["measure", before.label, after.label])
    summary["after / before"] = [a / b if a is not None and b else None for _, b, a in rows]
    names = pd.DataFrame([head["names"]], index=["kernel names"])
    summary.attrs.update(unit=head["unit_after"], names=head["names"])
    return {
        "summary": summary,
        "names": names,
        "kernels": diff_traces(old, new, rel_tol),
        "categories": diff_categories(old, new),
        "unit": head["unit_after"],
    }


def backend_kernel_diff(records: Iterable[Any], baseline_label: str = BASELINE_BACKEND) -> dict[str, Any]:
    """The kernel diff of the baseline against the best other backend (see :func:`best_other_backend`).

    Always a dict with a ``headline``; without a profiled candidate the frames are empty and the
    headline says why.
    """
    import pandas as pd

    records = list(records)
    before = next((r for r in records if r.label == baseline_label and r.ok and r.artifacts.get("trace")), None)
    after = best_other_backend(records, baseline_label)
    if before is None or after is None:
        missing = f"a profiled ok {baseline_label!r} record" if before is None else "another profiled ok backend"
        empty = pd.DataFrame()
        return {"headline": f"No kernel diff: it needs {missing} whose parity did not fail.", "summary": empty,
                "names": empty, "kernels": empty, "categories": empty, "unit": ""}  # fmt: skip
    diff = kernel_diff(before, after)
    head = diff["summary"].set_index("measure")["after / before"]
    diff["headline"] = (
        f"{baseline_label} -> {after.label} (the fastest other backend), {diff['unit']} per step: "
        f"launches x{head['launches per step']:.2f}, time x{head['kernel time per step (us)']:.2f}, "
        f"kernel names {diff['summary'].attrs['names']}"
    )
    return diff
