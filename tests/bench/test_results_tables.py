"""docs/results.md's generated tables agree with the shipped records, and the generator catches one that does not."""

from __future__ import annotations

import pytest

from nbhelpers.bench import tables
from nbhelpers.bench.page import END, START, blocks, fill, markdown, stale


def test_every_generated_table_agrees_with_its_records():
    text = tables.PAGE.read_text(encoding="utf-8")
    rendered = tables.render()
    assert set(blocks(text)) == set(tables.TABLES), "docs/results.md and the table specs name different tables"
    assert stale(text, rendered) == [], "run python -m nbhelpers.bench.tables: a table differs from its records"
    assert tables.main(["--check"]) == 0


def test_a_changed_number_or_a_missing_marker_is_caught(tmp_path):
    text = tables.PAGE.read_text(encoding="utf-8")
    body = blocks(text)["padding-strategies"]
    edited = text.replace(body, body.replace("4,750", "4,751", 1))
    assert stale(edited, tables.render()) == ["padding-strategies"]
    page = tmp_path / "results.md"
    page.write_text(edited)
    assert tables.main(["--check", "--page", str(page)]) == 1
    assert tables.main(["--page", str(page)]) == 0 and page.read_text() == text  # rewritten from the records
    with pytest.raises(ValueError, match="markers without a table"):
        fill(text, {})


def test_the_page_machinery_writes_between_markers():
    page = f"intro\n{START.format(name='t')}\nold\n{END.format(name='t')}\nafter\n"
    table = markdown(["a", "b"], [["1", "2"]])
    assert fill(page, {"t": table}) == f"intro\n{START.format(name='t')}\n{table}{END.format(name='t')}\nafter\n"
    with pytest.raises(ValueError, match="a row of 1 cells"):
        markdown(["a", "b"], [["1"]])


def test_a_table_names_only_records_that_exist(tmp_path):
    from nbhelpers.bench.cells import Shelf

    with pytest.raises(FileNotFoundError, match="absent"):
        tables.padding_strategies(Shelf(tmp_path))


def test_a_capped_table_shows_each_reference_measured_at_its_cap_and_no_other():
    rendered = tables.render()
    header = {cap: rendered[name].splitlines()[0] for cap, name in (
        (24, "memory-caps-27b-h100"), (48, "memory-caps-27b-48-h100"), (79, "memory-caps-27b-79-h100"))}  # fmt: skip
    for cap in (24, 48):  # the reference path refused by the planner there; Unsloth and TRL measured
        assert "vs Unsloth" in header[cap] and "vs TRL's defaults" in header[cap]
        assert "vs the reference path" not in header[cap]
    assert "vs the reference path" in header[79] and "Unsloth" not in header[79]  # the peers not yet run there
    reference_row = next(line for line in rendered["memory-caps-27b-79-h100"].splitlines()
                         if line.startswith("| transformers' reference path"))  # fmt: skip
    assert "| 1.00x |" in reference_row


def test_a_rate_is_shown_over_the_reference_measured_on_the_same_samples():
    from nbhelpers.bench import capped_tables as ct
    from nbhelpers.bench.cells import Shelf, ratio

    rows = ct.CAPS_27B_24_OFFLOAD_ROWS
    shelf = Shelf(tables.PAGE.parent.parent / "benchmarks" / "gpu")
    records = {label: shelf((f"{ct.CAPS_27B}{file}.jsonl", i)) for label, file, i in rows}
    unsloth = {r.config["num_samples"]: r for r in records.values() if r.config.get("engine") == "unsloth"}
    assert sorted(unsloth) == [32, 128]  # one Unsloth row on each set of samples: each row divides by its own
    lines = tables.render()["memory-caps-27b-24-offload-h100"].splitlines()
    for label, record in records.items():
        line = next(line for line in lines if line.startswith(f"| {label} |"))
        assert line.split(" | ")[2].strip("*") == ratio(record, unsloth[record.config["num_samples"]])
    # without a row on their samples, the 128-sample rows show no rate over Unsloth
    only_32 = [row for row in rows if records[row[0]].config["num_samples"] == 128
               and records[row[0]].config.get("engine") != "unsloth"]  # fmt: skip
    only_32.append(next(row for row in rows if records[row[0]] is unsloth[32]))
    table = ct.capped_27b_table(shelf, only_32, 24).splitlines()[2:]
    assert len(table) == len(only_32) and [line.split(" | ")[2] for line in table[:-1]] == [""] * (len(table) - 1)
