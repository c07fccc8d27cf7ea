"""Number formats shared by every table, sentence and report (``nbhelpers.formatting``)."""

from __future__ import annotations

import pandas as pd

from nbhelpers.formatting import (
    MISSING,
    fmt_count,
    fmt_gib,
    fmt_percent,
    fmt_rate,
    fmt_speedup,
    fmt_us,
    format_table,
)


def test_formatting():
    assert fmt_rate(15059.4) == "15,059" and fmt_rate(34.56) == "34.6"
    assert fmt_rate(2.345) == "2.35"
    assert fmt_speedup(2.3651) == "2.37x" and fmt_percent(0.075) == "7.5%"
    assert fmt_gib(float("nan")) == "—" and fmt_count(6458.0) == "6,458"


def test_percent_format_keeps_small_shares_readable() -> None:
    assert fmt_percent(0.98) == "98.0%"
    assert fmt_percent(0.000203) == "0.02%"
    assert fmt_percent(0) == "0%"
    assert fmt_percent(None) == MISSING
    assert fmt_us(653_000) == "653.0 ms" and fmt_us(6_390_000) == "6.39 s"


def test_fixed_percent_keeps_one_decimal_in_the_speedup_table() -> None:
    """One function, both former formats: readable small shares by default, one decimal with fixed=True."""
    assert fmt_percent(0.075, fixed=True) == fmt_percent(0.075) == "7.5%"
    assert fmt_percent(0.98, fixed=True) == fmt_percent(0.98) == "98.0%"
    assert fmt_percent(0, fixed=True) == "0.0%" and fmt_percent(0.000203, fixed=True) == "0.0%"
    assert fmt_percent(0.00123, fixed=True) == "0.1%" and fmt_percent(0.00123) == "0.12%"
    assert fmt_percent(float("nan"), fixed=True) == MISSING
    table = pd.DataFrame({"MFU": [0.0, 0.00123, 0.2], "padding fraction": [0.0, 0.5, None]})
    assert format_table(table).values.tolist() == [["0.0%", "0.0%"], ["0.1%", "50.0%"], ["20.0%", MISSING]]
