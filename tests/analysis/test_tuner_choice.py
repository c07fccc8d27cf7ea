"""The tuner's winner (the record its tuned.json names) is recommended over a faster point estimate only where its
interval reaches that record's; the report's loader marks it, nothing is written."""

from __future__ import annotations

import json

import pytest

from nbhelpers.analysis.overview import load_report_records
from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.tuner_choice import TUNED_FILE, TUNER_WINNER, mark_tuner_winner, prefer_tuner_winner
from nbhelpers.measure.store import RunStore

CPU = {"device_name": "cpu", "hostname": "laptop", "device_type": "cpu"}


def _measured(make_record, label, rate, low, high, **kwargs):
    record = make_record(label, rate, **CPU, parity="pass", **kwargs)
    record.metrics["real_tokens_per_s_interval"] = [low, high]
    return record


@pytest.mark.parametrize(("packed_span", "packed_wins"), [((627.0, 667.0), True), ((500.0, 560.0), False)])
def test_the_winner_stands_over_a_faster_point_only_where_its_interval_reaches_it(make_record, packed_span,
                                                                                   packed_wins):
    """The case a 2-core machine produced: static 683 [572-821] on 2 steps, the tuner's winner (packed) 648
    [627-667], the rungs having timed packed 770 [719-823] against static 540 [443-638] over 6 steps."""
    static = _measured(make_record, "eager static", 683.0, 572.0, 821.0)
    packed = _measured(make_record, "eager packed", sum(packed_span) / 2, *packed_span, padding="packed")
    packed.metrics[TUNER_WINNER] = True
    chosen, note = prefer_tuner_winner(static, [static, packed])
    assert (chosen is packed) is packed_wins
    if packed_wins:
        assert note.startswith("eager packed is the tuner's winner (647 [627-667] real tok/s), not measurably slower")
        assert "than eager static (683 [572-821] real tok/s)" in note
    else:
        assert note == ""
    unmarked = _measured(make_record, "eager packed", 647.0, 627.0, 667.0, padding="packed")
    assert prefer_tuner_winner(static, [static, unmarked]) == (static, "")  # no tuner: the fastest stands


def test_the_loader_marks_what_tuned_json_names_and_recommend_follows_it(make_record, runs_root):
    static = _measured(make_record, "eager static", 683.0, 572.0, 821.0)
    packed = _measured(make_record, "eager packed", 648.0, 627.0, 667.0, padding="packed")
    store = RunStore.for_run("cpu-run")
    for record in (static, packed):
        store.append(record)
    assert recommend(load_report_records("cpu-run")).label == "eager static"  # no tuner ran
    (runs_root / "cpu-run" / TUNED_FILE).write_text(json.dumps({"record_id": packed.record_id}))
    before = (runs_root / "cpu-run" / "records.jsonl").read_bytes()
    rec = recommend(load_report_records("cpu-run"))
    assert rec.label == "eager packed" and "the tuner's winner" in rec.note
    assert (runs_root / "cpu-run" / "records.jsonl").read_bytes() == before  # marked in memory only


def test_an_unreadable_tuned_json_marks_nothing(make_record, tmp_path):
    record = make_record("r", 1.0)
    (tmp_path / TUNED_FILE).write_text("[not an object")
    mark_tuner_winner([record], tmp_path)
    (tmp_path / TUNED_FILE).write_text("[1, 2]")
    mark_tuner_winner([record], tmp_path)
    assert TUNER_WINNER not in record.metrics
