"""What each kernel entry bought at the best padding: gains over the baseline's kernels and over a composite's parts."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis.entry_gains import entry_gains


def budget(make_record, label, rate, kernels, attn="torch_varlen", **kw):
    return make_record(label, rate, kernels=kernels, padding="token_budget", attn=attn, token_budget=16384,
                       parity="pass", liger_kernels=["cross_entropy"], **kw)  # fmt: skip


def test_each_entry_at_the_best_padding_over_the_baseline_kernels_and_its_parts(make_record):
    records = [
        make_record("baseline", 5000.0),
        make_record("liger, static", 6000.0, kernels="liger", parity="pass"),  # another padding: not in the table
        budget(make_record, "eager, budget", 20000.0, "eager"),
        budget(make_record, "eager, budget, sdpa", 15000.0, "eager", attn="sdpa"),
        budget(make_record, "liger, budget", 40000.0, "liger"),
        budget(make_record, "regional, budget", 42000.0, "regional_compile"),
        budget(make_record, "liger+regional, budget", 44100.0, "liger+regional_compile"),
        budget(make_record, "liger+regional, budget, slower repeat", 43000.0, "liger+regional_compile"),
    ]
    table = entry_gains(records, "baseline")
    assert table["entry"].tolist() == [
        "eager", "eager", "liger (cross_entropy)", "regional_compile", "liger+regional_compile (cross_entropy)",
    ]  # fmt: skip
    assert table["attention"].tolist() == ["sdpa", "torch_varlen", "torch_varlen", "torch_varlen", "torch_varlen"]
    assert set(table["padding"]) == {"token budget, 16,384 tokens a step"}
    gains = dict(zip(table["entry"] + " " + table["attention"], table["over baseline kernels"], strict=True))
    assert gains["eager sdpa"] == 1.0 and gains["liger (cross_entropy) torch_varlen"] == pytest.approx(2.0)
    top = table.iloc[-1]
    assert top["real tok/s"] == 44100.0 and top["speedup"] == pytest.approx(44100 / 5000)
    assert top["over baseline kernels"] == pytest.approx(44100 / 20000)  # eager at that padding and attention
    assert top["over its parts"] == pytest.approx(44100 / 42000)  # regional compile, the faster of its two parts
    assert math.isnan(table.iloc[2]["over its parts"]) and top["note"] == ""


def test_a_reference_not_measured_leaves_the_gain_empty_and_says_why(make_record):
    records = [
        make_record("baseline", 5000.0),
        budget(make_record, "liger+regional, budget", 44000.0, "liger+regional_compile"),
        budget(make_record, "failed parity", 90000.0, "cce"),
    ]
    records[-1].metrics["parity"]["status"] = "fail"  # a failed parity check is never an entry
    [row] = entry_gains(records, "baseline").to_dict("records")
    assert row["entry"] == "liger+regional_compile (cross_entropy)" and math.isnan(row["over baseline kernels"])
    assert math.isnan(row["over its parts"])
    assert "baseline's kernels were not measured" in row["note"] and "liger, regional_compile" in row["note"]


def test_no_candidate_no_rows(make_record):
    assert entry_gains([make_record("baseline", None, status="failed", reason="OOM")]).empty


def test_another_attention_is_the_reference_only_where_the_same_one_was_not_measured(make_record):
    records = [
        make_record("baseline", 5000.0),
        budget(make_record, "eager, budget, sdpa", 15000.0, "eager", attn="sdpa"),
        budget(make_record, "liger, budget, varlen", 40000.0, "liger"),
    ]
    row = entry_gains(records, "baseline").set_index("entry").loc["liger (cross_entropy)"]
    assert row["over baseline kernels"] == pytest.approx(40000 / 15000)
    assert "with sdpa (not measured with torch_varlen" in row["note"]


def test_the_entries_are_drawn_after_the_waterfall_with_each_gain_written_on_its_bar(make_record):
    from nbhelpers.analysis.speedup import build_table, waterfall_steps
    from nbhelpers.views import report_plots

    records = [
        make_record("baseline", 5000.0),
        budget(make_record, "eager, budget", 20000.0, "eager"),
        budget(make_record, "liger+regional, budget", 44000.0, "liger+regional_compile"),
    ]
    entries = entry_gains(records, "baseline")
    plot = report_plots.entries_plot(entries)
    bars, labels = plot.Bars.I, plot.Labels.I
    assert list(bars.data["entry"]) == ["eager (torch_varlen)", "liger+regional_compile (cross_entropy) (torch_varlen)"]
    assert list(bars.data["gain"]) == [1.0, pytest.approx(2.2)] and list(labels.data["text"]) == ["1.00x", "2.20x"]
    table, steps = build_table(records, "baseline"), waterfall_steps(records, "baseline")
    column = report_plots.machine_plots(table, steps, entries=entries)
    assert [type(p).__name__ for p in column] == ["Overlay", "Overlay", "Bars", "Bars"]  # waterfall, entries, ...
    assert report_plots.entries_plot(entries.iloc[0:0]) is None
