"""The utilization verdict: one sentence that puts nominal utilization beside SM efficiency and MFU.

It reads a summary of ``analyze.summarize``, a record's metrics with ``trace_`` keys, or a row of shipped
results alike (:func:`plain_summary`), says what is missing instead of guessing, and carries the numbers.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from nbhelpers.formatting import fmt_per_step, fmt_percent
from nbhelpers.profiling.analyze import SHORT_US


def plain_summary(summary: Any) -> dict[str, Any]:
    """A summary as a dict with ``trace_`` prefixes dropped (summarize dicts, record metrics, rows)."""
    if summary is None:
        return {}
    if dataclasses.is_dataclass(summary) and not isinstance(summary, type):
        data = dataclasses.asdict(summary)
    elif isinstance(summary, Mapping):
        data = dict(summary)
    elif hasattr(summary, "to_dict"):  # a pandas Series (one row of gpu_baseline_summary)
        data = dict(summary.to_dict())
    else:
        raise TypeError(f"cannot read a utilization summary from {type(summary).__name__}")
    plain = {}
    for key, value in data.items():
        key = str(key)
        plain.setdefault(key[len("trace_") :] if key.startswith("trace_") else key, value)
    return plain


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def interpret_utilization(summary: Any) -> str:
    """One sentence with the numbers: nominal utilization beside SM efficiency and MFU, and what the gap means.

    ``summary`` is a dict of ``analyze.summarize`` (or a record's metrics with ``trace_`` keys, a row of
    ``baseline.gpu_baseline_summary``, a ``Utilization``). Keys used: nominal_utilization, mfu,
    sm_efficiency_estimate, unit, device, launches_per_step, short_share_of_launches, short_share_of_time,
    short_threshold_us, peak_flops_source; missing ones are said to be missing, never guessed.
    """
    s = plain_summary(summary)
    nominal = _number(s.get("nominal_utilization"))
    mfu = _number(s.get("mfu"))
    sm = _number(s.get("sm_efficiency_estimate"))
    unit = str(s.get("unit") or "")
    gpu = "GPU" in unit or (sm is not None)
    device = s.get("device") or s.get("machine")
    lead = f"On {device}, " if device and str(device).lower() != "cpu" else ("On this CPU, " if not gpu else "")
    if nominal is None:
        return lead + "nominal utilization is unknown: the summary has no busy and wall time."
    if gpu:
        text = (
            f"{lead}nominal GPU utilization was {fmt_percent(nominal)} "
            "(busy time over wall time, what nvidia-smi shows)"
        )
        if sm is not None:
            text += f" and the SM-efficiency estimate {fmt_percent(sm)} (share of SMs the kernels' grids can occupy)"
        else:
            text += " with no SM-efficiency estimate (the trace has no SM count or grids)"
    else:
        text = (
            f"{lead}aten operators were running {fmt_percent(nominal)} of the step's wall time (the CPU stand-in for "
            "nominal GPU utilization; SM efficiency does not exist on a CPU)"
        )
    source = s.get("peak_flops_source")
    peak_note = f" (peak: {source})" if source else ""
    if mfu is None:
        text += (
            ", but MFU is unknown (no model FLOPs or peak FLOP/s for this trace), so busy time cannot be "
            "compared with useful work"
        )
    elif mfu > 1:
        text += (
            f", but MFU came out at {fmt_percent(mfu)}{peak_note}, above 100%: the model FLOPs or the peak given do "
            "not belong to this trace, so no conclusion about useful work can be drawn from it"
        )
    elif mfu > 0 and nominal >= 0.8 and mfu < 0.5 * nominal:
        text += (
            f", yet MFU was only {fmt_percent(mfu)}{peak_note}: the device was busy {nominal / mfu:,.0f}x as long as "
            "its useful model FLOPs would take at peak, so a high utilization figure here means busy, not productive"
        )
    elif nominal < 0.8:
        text += (
            f", and MFU was {fmt_percent(mfu)}{peak_note}: nothing ran for {fmt_percent(1 - nominal)} of the step, "
            "time lost on the host side (Python, kernel launches, data) before any kernel is even slow"
        )
    else:
        text += f", and MFU was {fmt_percent(mfu)}{peak_note}, close to what the utilization figure suggests"
    launches = _number(s.get("launches_per_step"))
    if launches is not None:
        noun = "kernel launches" if gpu else "aten operators"
        text += f"; the step ran {fmt_per_step(launches)} {noun}"
        short_launches = _number(s.get("short_share_of_launches"))
        short_time = _number(s.get("short_share_of_time"))
        if short_launches is not None and short_time is not None:
            threshold = _number(s.get("short_threshold_us")) or SHORT_US
            text += (
                f", {fmt_percent(short_launches)} of them shorter than {threshold:g} us, which together took "
                f"{fmt_percent(short_time)} of the {'kernel' if gpu else 'operator'} time"
            )
    top = top_category(s)
    if top is not None:
        name, top_launches, top_share = top
        text += (
            f"; the largest category was {name}, {fmt_per_step(top_launches)} "
            f"{_plural(top_launches, 'launch' if gpu else 'operator')} per step and "
            f"{fmt_percent(top_share)} of the {'kernel' if gpu else 'operator'} time"
        )
    return text + "."


def _plural(count: float | None, noun: str) -> str:
    """``noun`` for exactly one, else its plural (launch -> launches, operator -> operators)."""
    if count == 1:
        return noun
    return noun + ("es" if noun.endswith("ch") else "s")


def top_category(s: Mapping[str, Any]) -> tuple[str, float | None, float | None] | None:
    """(name, launches per step, share of time) of the largest category, from a summary or a flat row."""
    top = s.get("top_categories")
    if isinstance(top, list) and top and isinstance(top[0], Mapping) and top[0].get("category"):
        first = top[0]
        return str(first["category"]), _number(first.get("launches_per_step")), _number(first.get("share_of_time"))
    if s.get("top_category"):
        return (
            str(s["top_category"]),
            _number(s.get("top_category_launches_per_step")),
            _number(s.get("top_category_share_of_time")),
        )
    return None
