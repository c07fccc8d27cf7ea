"""A backend that compiles at start is recommended only where its interval lies above every one that does not."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.recommend import recommend
from nbhelpers.analysis.start_cost import compiles_at_start, without_needless_compile

CPU = {"device_name": "cpu", "hostname": "laptop", "device_type": "cpu"}


def _measured(make_record, label, rate, low, high, first_step_s=1.0, **kwargs):
    record = make_record(label, rate, **CPU, **kwargs)
    record.metrics.update(real_tokens_per_s_interval=[low, high], first_step_s=first_step_s)
    return record


def test_which_backends_compile_at_start(make_record):
    assert compiles_at_start(make_record("c", kernels="compile"))
    assert compiles_at_start(make_record("l", kernels="liger"))
    assert not compiles_at_start(make_record("e", kernels="eager"))
    assert not compiles_at_start(make_record("x", kernels="some-future-backend"))  # unknown: nothing to set aside


def test_a_compiling_leader_within_the_spread_of_plain_ones_gives_way_to_the_fastest_plain_one(make_record):
    compiled = _measured(make_record, "compile", 528.0, 500.0, 556.0, first_step_s=45.2, kernels="compile")
    static = _measured(make_record, "eager static", 524.0, 510.0, 538.0)
    packed = _measured(make_record, "eager packed", 517.0, 505.0, 530.0, padding="packed")
    apart = _measured(make_record, "eager slow", 300.0, 290.0, 310.0)  # measurably slower: never chosen
    chosen, note = without_needless_compile(compiled, [compiled, packed, static, apart])
    assert chosen is static
    assert "not measurably faster than eager static" in note and "its first step 45.2 s" in note
    assert "528 [500-556] real tok/s" in note


@pytest.mark.parametrize(
    ("compiled_span", "plain_span"),
    [((590.0, 610.0), (510.0, 538.0)),  # measurably faster: it stands
     (None, (510.0, 538.0)),  # no interval to compare (an older record): it stands
     ((500.0, 556.0), None)],  # fmt: skip
)
def test_a_compiling_leader_stands_where_the_data_cannot_set_it_aside(make_record, compiled_span, plain_span):
    compiled = make_record("compile", 600.0, kernels="compile", **CPU)
    plain = make_record("eager", 524.0, **CPU)
    for record, span in ((compiled, compiled_span), (plain, plain_span)):
        record.metrics.pop("real_tokens_per_s_interval", None)
        if span is not None:
            record.metrics["real_tokens_per_s_interval"] = list(span)
    assert without_needless_compile(compiled, [compiled, plain]) == (compiled, "")


def test_the_recommendation_says_why_it_set_the_compiling_leader_aside(make_record):
    records = [
        _measured(make_record, "baseline", 524.0, 510.0, 538.0),
        _measured(make_record, "compile", 528.0, 500.0, 556.0, first_step_s=45.2, kernels="compile", parity="pass"),
        _measured(make_record, "eager packed", 530.0, 505.0, 545.0, padding="packed", parity="pass"),
    ]
    records[1].metrics["real_tokens_per_s"] = 540.0  # the leader by its median
    rec = recommend(records)
    assert rec.label == "eager packed" and rec.to_dict()["measured"]["note"].startswith("compile measured 540")
    assert "Chosen of 3 eligible" in rec.summary() and "is recommended instead." in rec.summary()
    records[1].metrics["real_tokens_per_s_interval"] = [560.0, 600.0]  # now measurably faster
    assert recommend(records).label == "compile" and recommend(records).note == ""
