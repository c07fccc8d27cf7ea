"""Numbers as display text, one format per kind of number, shared by every table, sentence and report.

A missing value (None or NaN) reads :data:`MISSING` everywhere. :func:`format_table` turns a speedup table
or a waterfall (``nbhelpers.analysis.speedup``) into the strings the notebook shows and the HTML report
embeds. This module imports nothing from nbhelpers: profiling, analysis and views all format with it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

MISSING = "—"


def is_missing(value: Any) -> bool:
    """None or a float NaN: a number that was not measured."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_rate(value: Any) -> str:
    """Tokens per second: thousands separators, more decimals for small (CPU) rates."""
    if is_missing(value):
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_speedup(value: Any) -> str:
    """A ratio of throughputs: ``2.37x``."""
    return MISSING if is_missing(value) else f"{value:.2f}x"


def fmt_interval(value: Any) -> str:
    """A speedup's interval, "7.6-8.6x"; "" when there is none."""
    if not isinstance(value, (tuple, list)) or len(value) != 2 or any(is_missing(v) for v in value):
        return ""
    return f"{value[0]:.2f}-{value[1]:.2f}x"


def fmt_thin(value: Any) -> str:
    """A record's floor: "thin" below it, "" at or above it or when unknown."""
    value = value.item() if hasattr(value, "item") else value  # a numpy bool from a pandas column
    return "thin" if value is True else ""


def fmt_percent(value: Any, fixed: bool = False) -> str:
    """A fraction as a percentage: one decimal from 1% (0.075 -> 7.5%), two significant digits below
    (0.000203 -> 0.02%), and 0 as 0%, so small shares of a trace stay readable.

    ``fixed=True`` gives one decimal everywhere (0 -> 0.0%, 0.00123 -> 0.1%): the speedup table's columns.
    """
    if is_missing(value):
        return MISSING
    percent = 100.0 * float(value)
    if fixed or abs(percent) >= 1:
        return f"{percent:.1f}%"
    if percent == 0:
        return "0%"
    return f"{percent:.2g}%"


def fmt_gib(value: Any) -> str:
    """Memory in GiB with two decimals."""
    return MISSING if is_missing(value) else f"{value:.2f}"


def fmt_count(value: Any) -> str:
    """A count rounded to a whole number, with thousands separators."""
    return MISSING if is_missing(value) else f"{int(round(value)):,}"


def fmt_num(value: Any, decimals: int = 0) -> str:
    """A number with thousands separators (``decimals`` after the point)."""
    if is_missing(value):
        return MISSING
    return f"{float(value):,.{decimals}f}"


def fmt_per_step(value: Any) -> str:
    """A count per step: whole numbers as such (6,633), fractions of a count with one decimal (4.5)."""
    if is_missing(value):
        return MISSING
    value = float(value)
    return fmt_num(value, 0 if value.is_integer() else 1)


def fmt_us(value: Any) -> str:
    """A duration given in microseconds, in the unit that reads best (us, ms or s)."""
    if is_missing(value):
        return MISSING
    value = float(value)
    if abs(value) >= 1e6:
        return f"{value / 1e6:,.2f} s"
    if abs(value) >= 1e3:
        return f"{value / 1e3:,.1f} ms"
    return f"{value:,.1f} us"


def fmt_hours(value: Any) -> str:
    """A duration given in hours, as a person reads it: "7 h 52 min"; "52 min" under an hour, "4 min 10 s" under ten
    minutes, "45 s" under one; "unbounded" for infinity (a rate whose interval reaches 0)."""
    if is_missing(value):
        return MISSING
    if not math.isfinite(float(value)):
        return "unbounded"
    sign, seconds = "-" if value < 0 else "", round(abs(float(value)) * 3600)
    if seconds < 600:
        minutes, rest = divmod(seconds, 60)
        return sign + " ".join([f"{minutes} min"] * bool(minutes) + [f"{rest} s"] * bool(rest or not minutes))
    hours, minutes = divmod(round(seconds / 60), 60)
    if not hours:
        return f"{sign}{minutes} min"
    return f"{sign}{hours:,} h {minutes} min" if minutes else f"{sign}{hours:,} h"


def fmt_money(value: Any) -> str:
    """An amount of money with two decimals: ``$12.30``."""
    if is_missing(value):
        return MISSING
    return f"-${-float(value):,.2f}" if value < 0 else f"${float(value):,.2f}"


def fmt_reason(value: Any, limit: int = 160) -> str:
    """First line of a failure reason, shortened for a table cell."""
    if not value:
        return ""
    line = str(value).strip().splitlines()[0] if str(value).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


COLUMN_FORMATS: dict[str, Callable[[Any], str]] = {
    "real tok/s": fmt_rate,
    "speedup": fmt_speedup,
    "speedup interval": fmt_interval,
    "vs reference path": fmt_speedup,
    "vs reference path interval": fmt_interval,
    "vs without the workbook": fmt_speedup,
    "vs without the workbook interval": fmt_interval,
    "thin": fmt_thin,
    "timed steps": fmt_count,
    "MFU": functools.partial(fmt_percent, fixed=True),
    "peak memory GiB": fmt_gib,
    "kernels/step": fmt_count,
    "padding fraction": functools.partial(fmt_percent, fixed=True),
    "reason": fmt_reason,
    "step gain": fmt_speedup,
    "over baseline kernels": fmt_speedup,
    "over its parts": fmt_speedup,
    "recommended vs this": fmt_speedup,
    "relative difference": lambda v: "" if is_missing(v) else f"{float(v):.2e}",
    "recommended loss": lambda v: "" if is_missing(v) else f"{float(v):.5f}",
    "baseline loss": lambda v: "" if is_missing(v) else f"{float(v):.5f}",
    # notebook 05's scaling rows (analysis.scaling) and the memory planner beside them (analysis.memory_plan)
    "real_tok_s": fmt_rate,
    "real_tok_s_per_gpu": fmt_rate,
    "scaling_efficiency": functools.partial(fmt_percent, fixed=True),
    "mfu": functools.partial(fmt_percent, fixed=True),
    "first_loss": lambda v: "" if is_missing(v) else f"{float(v):.5f}",
    "communication_ms_per_step": lambda v: "" if is_missing(v) else f"{float(v):.2f}",
    "planned_gib": fmt_gib,
    "measured_gib": fmt_gib,
    "error": lambda v: "" if is_missing(v) else f"{float(v):+.1%}",
}


class Note(str):
    """A sentence shown where a table would have a header and no row (a notebook renders it as Markdown)."""

    def _repr_markdown_(self) -> str:
        return str(self)


def table_or_note(table: Any, note: str) -> Any:
    """``table`` when it has a row, else :class:`Note` ``note``: a reader sees why, not an empty header."""
    return table if len(table) else Note(note)


def format_table(table: Any, drop: Sequence[str] = ("record_id", "baseline")) -> Any:
    """The table as display strings: the notebook shows this, and the HTML report embeds the same."""
    shown = table.drop(columns=[c for c in drop if c in table.columns])
    out = shown.copy()
    for column in shown.columns:
        formatter = COLUMN_FORMATS.get(column)
        out[column] = [formatter(v) if formatter else ("" if is_missing(v) else str(v)) for v in shown[column]]
    return out


def format_waterfall(steps: Any) -> Any:
    """A waterfall (``speedup.waterfall_steps``) as display strings, without its record ids."""
    return format_table(steps, drop=("record_id",))
