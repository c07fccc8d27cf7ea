"""Generated tables inside a Markdown page: each between a start and an end marker, rewritten whole.

    <!-- table NAME: generated from the records by python -m nbhelpers.bench.tables -->
    | ... |
    <!-- end table NAME -->
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

START = "<!-- table {name}: generated from the records by python -m nbhelpers.bench.tables -->"
END = "<!-- end table {name} -->"
BLOCK = re.compile(r"<!-- table (?P<name>[\w-]+):[^\n]*-->\n(?P<body>.*?)<!-- end table (?P=name) -->", re.DOTALL)


def markdown(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (every row as wide as the headers)."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"a row of {len(row)} cells under {len(headers)} headers: {row}")
    lines = [headers, ["---"] * len(headers), *rows]
    return "".join("| " + " | ".join(line) + " |\n" for line in lines)


def blocks(text: str) -> dict[str, str]:
    """The generated tables a page holds now, by name."""
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}


def fill(text: str, tables: Mapping[str, str]) -> str:
    """``text`` with every table of ``tables`` written between its markers; ValueError naming a table the page has
    no markers for, or markers no table fills."""
    present = blocks(text)
    missing, unknown = sorted(set(tables) - set(present)), sorted(set(present) - set(tables))
    if missing or unknown:
        raise ValueError(f"tables without markers in the page: {missing}; markers without a table: {unknown}")

    def body(match: re.Match[str]) -> str:
        name = match.group("name")
        return f"{START.format(name=name)}\n{tables[name]}{END.format(name=name)}"

    return BLOCK.sub(body, text)


def stale(text: str, tables: Mapping[str, str]) -> list[str]:
    """The names of the tables whose rows in ``text`` differ from ``tables`` (a missing one counts)."""
    present = blocks(text)
    return sorted(name for name, body in tables.items() if present.get(name) != body)
