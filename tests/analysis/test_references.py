"""The two references of every speedup (``analysis.references``): the reference path and "without the workbook"."""

from __future__ import annotations

import math

import pytest

from nbhelpers.analysis import references
from nbhelpers.analysis.speedup import build_table, waterfall_steps
from nbhelpers.formatting import MISSING, format_table
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import ENGINES

WITHOUT = references.WITHOUT_WORKBOOK_ENGINE


def _run(make_record, without_rate: float | None, status: str = "ok", reason: str = "", run_name: str = "r"):
    records = [
        make_record("baseline", 1000.0, run_name=run_name),
        make_record("liger", 1500.0, kernels="liger", run_name=run_name, parity="pass"),
        make_record("packed", 3000.0, padding="packed", run_name=run_name, parity="pass"),
    ]
    if status != "absent":
        records.append(make_record("trl defaults", without_rate, engine=WITHOUT, status=status, reason=reason,
                                   run_name=run_name))  # fmt: skip
    return records


def test_the_row_is_the_engines_table_entry_of_trls_defaults():
    engine = ENGINES[WITHOUT]
    assert engine.is_trl and engine.description in references.WITHOUT_WORKBOOK_WHAT
    flags, _ = engine.sft_flags({"batch_size": 4, "max_length": 256}, "cuda")
    assert flags == {"per_device_train_batch_size": 4, "max_length": 256}  # nothing else: TRL's own defaults
    base = RunConfig(run_name="r", label="baseline", batch_size=4, max_length=256, profile=True)
    config = references.without_workbook_config(base)
    assert (config.engine, config.profile, config.label) == (WITHOUT, False, f"{engine.label}, b4x256")
    assert config.replace(engine=base.engine, label=base.label, profile=True) == base  # the same workload


def test_speedups_over_both_references(make_record):
    frame = references.both_references(_run(make_record, 1200.0)).set_index("label")
    assert frame.loc["packed", references.VS_REFERENCE] == pytest.approx(3.0)
    assert frame.loc["packed", references.VS_WITHOUT] == pytest.approx(2.5)
    assert frame.loc["trl defaults", references.VS_REFERENCE] == pytest.approx(1.2)
    assert frame.loc["trl defaults", references.VS_WITHOUT] == pytest.approx(1.0)
    assert frame.loc["baseline", references.VS_WITHOUT] == pytest.approx(1000 / 1200)
    assert set(frame["note"]) == {""}
    table = build_table(_run(make_record, 1200.0)).set_index("label")
    assert table.loc["liger", "speedup"] == pytest.approx(1.5)
    assert table.loc["liger", references.VS_WITHOUT] == pytest.approx(1.25)
    steps = waterfall_steps(_run(make_record, 1200.0)).set_index("stage")
    assert steps.loc["padding only", references.VS_WITHOUT] == pytest.approx(2.5)
    assert "trl defaults" not in set(steps["label"])  # a peer row is never a waterfall stage


def test_a_missing_second_reference_says_so(make_record):
    frame = references.both_references(_run(make_record, None, status="absent"))
    assert frame[references.VS_WITHOUT].isna().all() and frame[references.VS_REFERENCE].notna().all()
    assert set(frame["note"]) == {references.NOT_MEASURED}
    shown = format_table(build_table(_run(make_record, None, status="absent"))).set_index("label")
    assert shown.loc["packed", references.VS_WITHOUT] == MISSING and shown.loc["packed", "speedup"] == "3.00x"
    assert "not measured" in references.references_text(_run(make_record, None, status="absent"))


def test_a_failed_second_reference_gives_its_reason(make_record):
    records = _run(make_record, None, status="failed", reason="ImportError: trl is not installed\nmore")
    frame = references.both_references(records)
    assert len(frame) == 3 and frame[references.VS_WITHOUT].isna().all()
    assert set(frame["note"]) == {"'without the workbook' failed: ImportError: trl is not installed"}


def test_each_group_has_its_own_second_reference(make_record):
    records = _run(make_record, 1200.0, run_name="a") + _run(make_record, None, status="absent", run_name="b")
    frame = references.both_references(records)
    a, b = frame[frame["run"] == "a"], frame[frame["run"] == "b"]
    assert a[references.VS_WITHOUT].notna().all() and b[references.VS_WITHOUT].isna().all()
    text = references.references_text(records)
    assert "run a" in text and "1.20x the reference path" in text and "run b" in text
    assert math.isnan(references.over(records[0], None)[0])


def test_the_plot_draws_both_references_and_names_a_missing_one(make_record):
    import holoviews as hv

    from nbhelpers.views import report_plots

    hv.extension("bokeh")
    both = report_plots.references_plot(references.both_references(_run(make_record, 1200.0)))
    drawn = {(row.configuration_over_references, row.reference): row.speedup for row in both.dframe().itertuples()}
    assert drawn[("packed", references.VS_REFERENCE)] == pytest.approx(3.0)
    assert drawn[("packed", references.VS_WITHOUT)] == pytest.approx(2.5)
    alone = report_plots.references_plot(references.both_references(_run(make_record, None, status="absent")))
    assert set(alone.dframe()["reference"]) == {references.VS_REFERENCE}  # no invented bar
    assert "not measured" in alone.opts.get().kwargs["title"]


def test_the_peer_table_shows_both_references(make_record):
    from nbhelpers.analysis.peers import peer_table
    from nbhelpers.analysis.recommend import recommend

    records = _run(make_record, 1200.0) + [make_record("TRL best", 2000.0, engine="trl_best", run_name="r")]
    table = peer_table(records, recommend(records)).set_index("label")
    assert table.loc["packed", "speedup"] == pytest.approx(3.0)
    assert table.loc["packed", references.VS_WITHOUT] == pytest.approx(2.5)
    assert table.loc["TRL best", references.VS_WITHOUT] == pytest.approx(2000 / 1200)
    alone = peer_table(records[:3] + records[4:], recommend(records[:3])).set_index("label")
    assert alone[references.VS_WITHOUT].isna().all()  # no second reference in the run: nothing invented


def test_the_recommendation_states_both_references(make_record):
    from nbhelpers.analysis.recommend import recommend

    rec = recommend(_run(make_record, 1200.0))
    assert (rec.label, rec.speedup, rec.over_without) == ("packed", pytest.approx(3.0), pytest.approx(2.5))
    assert "2.50x over without the workbook (trl defaults)." in rec.summary()
    assert rec.to_dict()["measured"]["vs_without_the_workbook"] == pytest.approx(2.5)
    alone = recommend(_run(make_record, None, status="absent"))
    assert alone.over_without is None and f"Over without the workbook: {MISSING} ({NOT})" in alone.summary()


NOT = references.NOT_MEASURED
