"""A formatted table as HTML for the report: each cell names its column, text columns align left, a failed row is
marked."""

from __future__ import annotations

import html
from typing import Any

_TEXT_COLUMNS = ("label", "machine", "run", "status", "reason", "parity", "stage", "path", "installed", "compatible",
                 "correct", "verdict", "notes", "engine", "workload", "note")  # fmt: skip


def html_table(frame: Any, css_class: str, machine: str = "") -> str:
    """A formatted (string) DataFrame as an HTML table; each cell carries its column name."""
    columns = list(frame.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for column in columns:
            value = str(row[column])
            cls = ' class="text"' if column in _TEXT_COLUMNS else ""
            cells.append(f'<td data-col="{html.escape(str(column))}"{cls}>{html.escape(value)}</td>')
        status = row.get("status", "ok") if hasattr(row, "get") else "ok"
        row_class = ' class="failed"' if status not in ("ok", "") and "status" in columns else ""
        body.append(f"<tr{row_class}>{''.join(cells)}</tr>")
    return (
        f'<table class="nbh-table {css_class}" data-machine="{html.escape(machine)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )
