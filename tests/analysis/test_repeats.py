"""Repeated measurements of one configuration: each speedup divides by the baseline measured nearest in time, and
measurements whose intervals do not overlap are flagged in the table, the waterfall and the report."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.repeats import disagreement_table, disagreements, nearest_baseline
from nbhelpers.analysis.speedup import build_table, waterfall_steps


def _at(record, minute: int, interval: tuple[float, float], notebook: str):
    """The record created at 12:MM with this interval of its rate, from ``notebook``."""
    record.created_at = f"2026-12-01T12:{minute:02d}:00+00:00"
    record.notebook = notebook
    record.metrics.update(real_tokens_per_s_interval=list(interval), timed_steps=12, thin=False)
    return record


@pytest.fixture
def drifting_run(make_record):
    """The CPU case of the main command: notebook 01's baseline read 436 tok/s, notebook 03's identical
    eager/static row 162 later in the same run, as the machine got busy; 03's packed row is 1.3x its own."""
    first = _at(make_record("baseline", 436.0, run_name="r"), 1, (420.0, 450.0), "01_baseline_profile.ipynb")
    later = _at(make_record("eager, static", 162.0, run_name="r"), 20, (150.0, 170.0), "03_dynamic_padding.ipynb")
    packed = _at(
        make_record("eager, packed", 210.0, run_name="r", padding="packed", parity="pass"),
        22, (200.0, 220.0), "03_dynamic_padding.ipynb",
    )  # fmt: skip
    return first, later, packed


def test_each_record_divides_by_the_baseline_measured_nearest_in_time(drifting_run):
    first, later, packed = drifting_run
    members = list(drifting_run)
    assert nearest_baseline(packed, first, members) is later
    assert nearest_baseline(first, first, members) is first
    rows = build_table(members).set_index("label")
    assert rows.loc["eager, packed", "speedup"] == pytest.approx(210 / 162)
    assert rows.loc["eager, packed", "baseline record"] == later.record_id
    assert rows.loc["eager, static", "speedup"] == pytest.approx(1.0)


def test_the_recommendations_speedup_divides_by_its_nearest_baseline(drifting_run):
    first, later, packed = drifting_run
    packed.metrics.update(real_tokens_per_s=480.0, real_tokens_per_s_interval=[470.0, 490.0])
    rec = recommend(list(drifting_run))
    assert rec.record_id == packed.record_id and rec.speedup == pytest.approx(480 / 162)


def test_the_waterfall_stages_agree_with_their_own_baselines(drifting_run):
    first, later, packed = drifting_run
    steps = waterfall_steps(list(drifting_run)).set_index("stage")
    assert steps.loc["padding only", "speedup"] == pytest.approx(210 / 162)  # not 210 / 436 = 0.48x
    assert steps.loc["padding only", "step gain"] == pytest.approx(210 / 162)
    assert "measured apart beyond the spread: 436 [420-450] (01_baseline_profile.ipynb)" in (
        steps.loc["padding only", "note"]
    )


def test_measurements_whose_intervals_do_not_overlap_are_flagged(drifting_run, make_record):
    first, later, packed = drifting_run
    found = disagreements(list(drifting_run))
    assert len(found) == 1 and {r.record_id for r in found[0].records} == {first.record_id, later.record_id}
    table = disagreement_table(list(drifting_run))
    assert table["measurements"].tolist() == [
        "436 [420-450] (01_baseline_profile.ipynb), 162 [150-170] (03_dynamic_padding.ipynb)"
    ]
    rows = build_table(list(drifting_run)).set_index("label")
    assert rows.loc["baseline", "repeats"].startswith("measured apart beyond the spread")
    assert rows.loc["eager, packed", "repeats"] == ""


def test_measurements_that_overlap_are_one_measurement_twice(make_record):
    first = _at(make_record("baseline", 436.0, run_name="r"), 1, (400.0, 450.0), "01")
    again = _at(make_record("eager, static", 420.0, run_name="r"), 9, (405.0, 440.0), "02")
    other_workload = _at(make_record("eager, static", 100.0, run_name="r", batch_size=1), 9, (90.0, 110.0), "02")
    assert disagreements([first, again, other_workload]) == []
    assert len(disagreement_table([first, again])) == 0


def test_the_report_shows_the_configurations_measured_apart(drifting_run, tmp_path):
    from nbhelpers.views.report import write_html_report

    path = write_html_report(list(drifting_run), tmp_path / "report.html")
    text = path.read_text()
    assert 'class="disagreement"' in text and "Measured apart" in text
    assert "436 [420-450] (01_baseline_profile.ipynb), 162 [150-170] (03_dynamic_padding.ipynb)" in text


def test_every_measurement_of_the_baseline_configuration_reads_baseline_in_the_parity_column(drifting_run):
    rows = build_table(list(drifting_run)).set_index("label")
    assert rows.loc["baseline", "parity"] == "baseline" and rows.loc["eager, static", "parity"] == "baseline"
    assert rows.loc["eager, packed", "parity"] == "pass"
