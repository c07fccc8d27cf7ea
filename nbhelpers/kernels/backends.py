"""Kernel backends applied and verified on the model instance, one config per backend, and their kernel diff.

What each backend is and does lives in the table (:mod:`nbhelpers.kernels.registry`). Liger's patch
rebinds module-level names for the whole process and cannot be undone: run each backend in its own
subprocess (the runner does), never in a notebook's kernel.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import ConfigError

from .liger import CPU_INTERPRETABLE_LIGER_KERNELS, LIGER_BACKEND, LIGER_KERNELS, liger_status
from .registry import (
    BASELINE_BACKEND,
    ELEMENTARY_BACKENDS,
    KERNEL_BACKENDS,
    KERNEL_CHECKS,
    REPORT_KEYS,
    kernel_backend,
    requested_kernels,
    uses_liger_switches,
)
from .spec import BackendUnavailable


def patch_report(model: Any) -> dict[str, bool]:
    """Which kernels are really replaced, read off the model instance and the names it calls.

    Every backend in the table reports its own keys; a kernel counts as replaced only when every place
    that runs it is replaced (see KERNEL_CHECKS).
    """
    report = dict.fromkeys(REPORT_KEYS, False)
    for backend in ELEMENTARY_BACKENDS:
        report.update(backend.report(model))
    return report


def apply_backend(model: Any, kernels: str, liger_kernels: tuple[str, ...], device: str) -> dict[str, bool]:
    """Apply a backend of the table (e.g. 'eager', 'liger', 'compile', 'liger+compile'); the verified report."""
    backend = kernel_backend(kernels)
    backend.apply(model, liger_kernels, device)
    report = patch_report(model)
    missing = sorted(k for k in backend.requested(liger_kernels) if not report.get(k))
    if missing:
        raise BackendUnavailable(f"patch did not replace: {', '.join(missing)} (verified on the model)")
    return report


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


def parse_list(name: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated parameter as a tuple; an unknown item raises ConfigError naming the parameter."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    unknown = [item for item in items if item not in allowed]
    if unknown:
        raise ConfigError(name, text, "a comma-separated list drawn from " + ", ".join(allowed))
    return items


def backend_configs(
    base: RunConfig, backends: str, liger_kernels: str, device: str = "cpu", parameter: str = "BACKENDS"
) -> list[RunConfig]:
    """One config per backend (label = backend; 'eager' required). On a CPU, Liger keeps only the
    kernels Triton's interpreter runs.

    The Liger kernels a CPU cannot run are listed by :func:`cpu_skipped_kernels`; the notebook runs
    them separately to show why. ``parameter`` names the notebook parameter in errors.
    """
    names = parse_list(parameter, backends, KERNEL_BACKENDS)
    if BASELINE_BACKEND not in names:
        raise ConfigError(parameter, backends, "a list that includes 'eager' (the parity and speed baseline)")
    switches = parse_list("LIGER_KERNELS", liger_kernels, LIGER_KERNELS)
    if device == "cpu":
        switches = tuple(k for k in switches if k in CPU_INTERPRETABLE_LIGER_KERNELS)
    configs = []
    for name in names:
        uses_switches = uses_liger_switches(name)
        if uses_switches and not switches:
            raise ConfigError("LIGER_KERNELS", liger_kernels, "at least one kernel this device can run")
        configs.append(base.replace(label=name, kernels=name, liger_kernels=switches if uses_switches else ()))
    return configs


def kernel_grid(
    base: RunConfig, backends: str, liger_kernels: str, device: str = "cpu", parameter: str = "KERNELS"
) -> tuple[list[RunConfig], dict[str, str]]:
    """The kernel axis of a measured grid: one config per backend that can run here, and what is left out, with why.

    Like :func:`backend_configs`, but a backend that cannot run on ``device`` (Liger without its packages, or
    with no requested switch this device runs) is skipped with its reason instead of refused, and the Liger
    switches a CPU cannot run are listed as skipped too. Keys of the skipped dict say what was left out.
    """
    names = parse_list(parameter, backends, KERNEL_BACKENDS)
    if BASELINE_BACKEND not in names:
        raise ConfigError(parameter, backends, "a list that includes 'eager' (the parity and speed baseline)")
    switches = parse_list("LIGER_KERNELS", liger_kernels, LIGER_KERNELS)
    skipped: dict[str, str] = {}
    if device == "cpu" and any(uses_liger_switches(name) for name in names):
        left_out = [k for k in switches if k not in CPU_INTERPRETABLE_LIGER_KERNELS]
        switches = tuple(k for k in switches if k in CPU_INTERPRETABLE_LIGER_KERNELS)
        if left_out:
            skipped[f"Liger switches {', '.join(left_out)}"] = (
                "Triton's CPU interpreter fails on them (notebook 02 runs them to show it); they run on a GPU"
            )
    configs = []
    for name in names:
        uses_switches = uses_liger_switches(name)
        why = liger_status(device) if uses_switches else ""
        if uses_switches and not why and not switches:
            why = f"none of LIGER_KERNELS={liger_kernels!r} runs on {device}"
        if why:
            skipped[f"kernels {name}"] = why
            continue
        configs.append(base.replace(label=name, kernels=name, liger_kernels=switches if uses_switches else ()))
    return configs, skipped


def cpu_skipped_kernels(liger_kernels: str, backends: str = LIGER_BACKEND, device: str = "cpu") -> tuple[str, ...]:
    """Requested Liger kernels that Triton's CPU interpreter cannot run (none off a CPU or without Liger)."""
    switches = parse_list("LIGER_KERNELS", liger_kernels, LIGER_KERNELS)
    if device != "cpu" or not any(uses_liger_switches(name.strip()) for name in backends.split(",")):
        return ()
    return tuple(k for k in switches if k not in CPU_INTERPRETABLE_LIGER_KERNELS)


def cpu_unsupported_configs(base: RunConfig, kernels: Iterable[str]) -> list[RunConfig]:
    """One Liger config per kernel, to run on a CPU and show (by its failed record) why it is not checked."""
    return [
        base.replace(
            label=f"{LIGER_BACKEND} {k} (CPU interpreter)", kernels=LIGER_BACKEND, liger_kernels=(k,), profile=False
        )
        for k in kernels
    ]


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


def kernel_diff_plot(diff: dict[str, Any]) -> Any:
    """Time per step by category before and after (HoloViews), or a note when there is no diff."""
    if diff["categories"].empty:
        import holoviews as hv

        return hv.Div(f"<p>{diff['headline']}</p>")
    from nbhelpers.profiling.plots import category_diff_bars

    return category_diff_bars(diff["categories"])


def describe_backends(configs: Iterable[RunConfig], skipped: Iterable[str], device: str) -> str:
    """Two lines: what is measured where, and which Liger kernels this device leaves unchecked."""
    configs = list(configs)
    liger = next((c.liger_kernels for c in configs if uses_liger_switches(c.kernels)), ())
    return (
        f"device {device}: backends {', '.join(c.label for c in configs)} (baseline {BASELINE_BACKEND}); "
        f"Liger kernels {', '.join(liger) or 'none'}\n"
        f"Liger kernels not checked on this device: {', '.join(skipped) or 'none'}"
    )
