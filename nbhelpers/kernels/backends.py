"""Kernel backends (eager, Liger, torch.compile) and a patch report verified on the model instance.

Liger's patch rebinds module-level names for the whole process and cannot be undone: run each
backend in its own subprocess (the runner does), never in a notebook's kernel.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Iterable
from typing import Any

from nbhelpers.measure.config import KERNEL_BACKENDS, LIGER_KERNELS, RunConfig
from nbhelpers.validation import ConfigError

# Kernels that Triton's interpreter runs on a CPU (measured: RMSNorm and SwiGLU fail inside it).
CPU_INTERPRETABLE_LIGER_KERNELS = ("rope", "cross_entropy", "fused_linear_cross_entropy")
REPORT_KEYS = (*LIGER_KERNELS, "compile")
BASELINE_BACKEND = "eager"  # parity and speedups are measured against it

# What patch_report checks for each kernel, on the model instance and the names it calls at run time.
KERNEL_CHECKS: dict[str, str] = {
    "rope": "the modeling module's apply_rotary_pos_emb (attention looks it up at call time) is Liger's "
    "liger_rotary_pos_emb",
    "rms_norm": "every *RMSNorm module of the model (final norm; each layer's input, post-attention, q and k "
    "norms) runs LigerRMSNorm.forward",
    "swiglu": "every decoder layer's mlp runs LigerSwiGLUMLP.forward",
    "fused_linear_cross_entropy": "model.forward is Liger's lce_forward (the lm head and the loss fused; "
    "no full logits tensor)",
    "cross_entropy": "torch.nn.functional.cross_entropy (what transformers' loss calls) is Liger's cross-entropy",
    "compile": "model.compile() set the module's compiled call (model._compiled_call_impl)",
}


class BackendUnavailable(RuntimeError):
    """The requested kernel backend cannot run here (no Triton driver, unsupported model type, ...)."""


def liger_apply_function(model_type: str) -> Any:
    """Liger's patch function for a model type, or a clear error naming the supported types."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError as error:
        raise BackendUnavailable(f"missing package: liger-kernel is not importable ({error})") from error
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        supported = ", ".join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))
        raise BackendUnavailable(f"Liger has no patch for model_type={model_type!r}; supported: {supported}")
    return MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]


def check_triton_driver(device: str) -> None:
    """Liger's kernels are Triton: a GPU with Triton, or on a CPU the interpreter (TRITON_INTERPRET=1)."""
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailable("missing package: triton is not installed, and Liger's kernels are Triton")
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise BackendUnavailable(
            "no Triton driver on CPU: Liger needs a GPU, or TRITON_INTERPRET=1 for the kernels the "
            f"interpreter runs ({', '.join(CPU_INTERPRETABLE_LIGER_KERNELS)})"
        )


def apply_liger(model: Any, switches: tuple[str, ...], device: str) -> None:
    """Patch a model instance with the chosen Liger kernels (switch names as in RunConfig)."""
    check_triton_driver(device)
    apply = liger_apply_function(model.config.model_type)
    accepted = set(inspect.signature(apply).parameters)
    ignored = sorted(set(switches) - accepted)
    if ignored:
        raise BackendUnavailable(
            f"Liger's patch for model_type={model.config.model_type!r} has no switch for: {', '.join(ignored)}"
        )
    options = {name: name in switches for name in LIGER_KERNELS if name in accepted}
    apply(model=model, **options)


def _bound_to(method: Any, function: Any) -> bool:
    return getattr(method, "__func__", None) is function


def _base_model(model: Any) -> Any:
    return getattr(model, getattr(model, "base_model_prefix", "model"), model)


def _rms_norm_modules(model: Any) -> list[Any]:
    return [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]


def _is_compiled(model: Any) -> bool:
    return getattr(model, "_compiled_call_impl", None) is not None


def patch_report(model: Any) -> dict[str, bool]:
    """Which kernels are really replaced, read off the model instance and the names it calls.

    A kernel counts as replaced only when every place that runs it is replaced (see KERNEL_CHECKS).
    """
    report = dict.fromkeys(LIGER_KERNELS, False)
    report["compile"] = _is_compiled(model)
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
        from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
    except ImportError:
        return report
    modeling = sys.modules[type(model).__module__]
    report["rope"] = getattr(modeling, "apply_rotary_pos_emb", None) is liger_rotary_pos_emb
    norms = _rms_norm_modules(model)
    report["rms_norm"] = bool(norms) and all(_bound_to(m.forward, LigerRMSNorm.forward) for m in norms)
    mlps = [layer.mlp for layer in getattr(_base_model(model), "layers", []) if hasattr(layer, "mlp")]
    report["swiglu"] = bool(mlps) and all(_bound_to(m.forward, LigerSwiGLUMLP.forward) for m in mlps)
    forward = getattr(model.forward, "__func__", None)
    report["fused_linear_cross_entropy"] = forward is not None and forward.__module__.startswith("liger_kernel")
    import torch

    loss = getattr(torch.nn.functional.cross_entropy, "__module__", "") or ""
    report["cross_entropy"] = loss.startswith("liger_kernel")
    return report


def requested_kernels(kernels: str, liger_kernels: Iterable[str]) -> tuple[str, ...]:
    """The report keys a backend asks for: its Liger switches, plus 'compile'."""
    wanted = tuple(liger_kernels) if "liger" in kernels else ()
    return wanted + (("compile",) if "compile" in kernels else ())


def apply_backend(model: Any, kernels: str, liger_kernels: tuple[str, ...], device: str) -> dict[str, bool]:
    """Apply a backend ('eager', 'liger', 'compile', 'liger+compile') and return the verified report."""
    if kernels not in KERNEL_BACKENDS:
        raise BackendUnavailable(f"kernels={kernels!r}: backends are {', '.join(KERNEL_BACKENDS)}")
    if "liger" in kernels:
        apply_liger(model, liger_kernels, device)
    if "compile" in kernels:
        model.compile()
    report = patch_report(model)
    missing = sorted(k for k in requested_kernels(kernels, liger_kernels) if not report.get(k))
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
        requested = requested_kernels(str(config.get("kernels", "eager")), config.get("liger_kernels") or ())
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


def backend_configs(base: RunConfig, backends: str, liger_kernels: str, device: str = "cpu") -> list[RunConfig]:
    """One config per backend (label = backend; 'eager' required). On a CPU, Liger keeps only the
    kernels Triton's interpreter runs.

    The Liger kernels a CPU cannot run are listed by :func:`cpu_skipped_kernels`; the notebook runs
    them separately to show why.
    """
    names = parse_list("BACKENDS", backends, KERNEL_BACKENDS)
    if BASELINE_BACKEND not in names:
        raise ConfigError("BACKENDS", backends, "a list that includes 'eager' (the parity and speed baseline)")
    switches = parse_list("LIGER_KERNELS", liger_kernels, LIGER_KERNELS)
    if device == "cpu":
        switches = tuple(k for k in switches if k in CPU_INTERPRETABLE_LIGER_KERNELS)
    configs = []
    for name in names:
        if "liger" in name and not switches:
            raise ConfigError("LIGER_KERNELS", liger_kernels, "at least one kernel this device can run")
        configs.append(base.replace(label=name, kernels=name, liger_kernels=switches if "liger" in name else ()))
    return configs


def cpu_skipped_kernels(liger_kernels: str, backends: str = "liger", device: str = "cpu") -> tuple[str, ...]:
    """Requested Liger kernels that Triton's CPU interpreter cannot run (none off a CPU or without Liger)."""
    switches = parse_list("LIGER_KERNELS", liger_kernels, LIGER_KERNELS)
    if device != "cpu" or "liger" not in backends:
        return ()
    return tuple(k for k in switches if k not in CPU_INTERPRETABLE_LIGER_KERNELS)


def cpu_unsupported_configs(base: RunConfig, kernels: Iterable[str]) -> list[RunConfig]:
    """One Liger config per kernel, to run on a CPU and show (by its failed record) why it is not checked."""
    return [
        base.replace(label=f"liger {k} (CPU interpreter)", kernels="liger", liger_kernels=(k,), profile=False)
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
    liger = next((c.liger_kernels for c in configs if "liger" in c.kernels), ())
    return (
        f"device {device}: backends {', '.join(c.label for c in configs)} (baseline {BASELINE_BACKEND}); "
        f"Liger kernels {', '.join(liger) or 'none'}\n"
        f"Liger kernels not checked on this device: {', '.join(skipped) or 'none'}"
    )
