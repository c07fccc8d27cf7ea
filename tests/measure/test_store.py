"""RunStore: append, reload, torn last line, concurrent appenders."""

import json
import multiprocessing

import pytest

from nbhelpers.measure.store import RunRecord, RunStore, records_frame


def _record(i: int) -> RunRecord:
    return RunRecord(config={"label": f"c{i}", "run_name": "t"}, metrics={"real_tokens_per_s": float(i)})


def test_append_and_reload(tmp_path):
    store = RunStore.for_run("t", root=tmp_path)
    for i in range(3):
        store.append(_record(i))
    loaded = store.load()
    assert [r.label for r in loaded] == ["c0", "c1", "c2"]
    assert loaded[2].metrics["real_tokens_per_s"] == 2.0
    assert store.path == tmp_path / "t" / "records.jsonl"
    frame = records_frame(loaded)
    assert list(frame["real_tokens_per_s"]) == [0.0, 1.0, 2.0]


def test_failed_record_keeps_reason(tmp_path):
    store = RunStore(tmp_path / "records.jsonl")
    store.append(RunRecord.failed({"label": "big"}, "out of memory: CUDA"))
    (record,) = store.load()
    assert not record.ok and record.reason == "out of memory: CUDA"


def test_torn_last_line_is_skipped_with_warning_and_next_append_is_whole(tmp_path):
    store = RunStore(tmp_path / "records.jsonl")
    store.append(_record(0))
    with open(store.path, "a") as handle:
        handle.write(json.dumps(_record(1).to_dict())[:40])  # a crash mid-write
    with pytest.warns(UserWarning, match="torn or corrupt"):
        assert [r.label for r in store.load()] == ["c0"]
    store.append(_record(2))
    with pytest.warns(UserWarning):
        assert [r.label for r in store.load()] == ["c0", "c2"]


def _append_many(path, start):
    store = RunStore(path)
    for i in range(start, start + 50):
        store.append(_record(i))


def test_concurrent_appenders_never_interleave(tmp_path):
    path = tmp_path / "records.jsonl"
    workers = [multiprocessing.Process(target=_append_many, args=(path, k * 100)) for k in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    labels = sorted(r.label for r in RunStore(path).load())
    assert len(labels) == 150 and len(set(labels)) == 150


def test_a_record_line_whose_parts_have_the_wrong_kind_is_skipped_with_a_warning(tmp_path):
    import json
    import warnings

    path = tmp_path / "records.jsonl"
    good = RunRecord(config={"label": "good", "run_name": "r"}).to_dict()
    lines = [good, {**good, "config": "not an object"}, {**good, "metrics": [1, 2]}, {**good, "status": 3},
             {"metrics": {}}]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = RunStore(path).load()
    assert [r.label for r in loaded] == ["good"]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 4 and "config is a str, not a JSON object" in messages[0]
    assert ":5: skipped a torn or corrupt record (no config)" in messages[3]


def test_a_record_with_an_unknown_status_or_a_wrongly_typed_figure_is_skipped_naming_line_and_field(tmp_path):
    """Such a record would be drawn as a failure without a reason, or on a machine called "5": it is left out with
    a warning naming the file, the line and the field, as a torn line is."""
    import json
    import warnings

    from nbhelpers.measure.jsonl import SkippedLine

    path = tmp_path / "records.jsonl"
    good = RunRecord(config={"label": "good"}, metrics={"real_tokens_per_s": 10.0, "mfu": None},
                     environment={"device_name": "cpu", "hostname": "h"}).to_dict()  # fmt: skip
    lines = [good, {**good, "status": "bogus"}, {**good, "metrics": {"real_tokens_per_s": "fast"}},
             {**good, "environment": {"device_name": 5}}, {**good, "metrics": {"mfu": True}},
             {**good, "status": "failed", "reason": "out of memory"}]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = RunStore(path).load()
    assert [(r.label, r.status) for r in loaded] == [("good", "ok"), ("good", "failed")]
    assert all(w.category is SkippedLine for w in caught)
    assert [str(w.message).split(": skipped a torn or corrupt record ")[1] for w in caught] == [
        "(status='bogus' is neither 'ok' nor 'failed')",
        "(metrics.real_tokens_per_s='fast' is text, not a number or null)",
        "(environment.device_name=5 is a number, not text)",
        "(metrics.mfu=True is true or false, not a number or null)",
    ]
    assert [str(w.message).split(": skipped")[0] for w in caught] == [f"{path}:{n}" for n in (2, 3, 4, 5)]


def test_a_figure_outside_its_range_or_a_list_that_holds_text_is_skipped_naming_line_and_field(tmp_path):
    """A throughput of -5 or 1e308, a padding fraction above 1, losses that are text: never drawn as measurements
    (the report would show "-5.00, -0.01x"); each is named with its file and line."""
    import json
    import warnings

    from nbhelpers.measure.store import METRIC_RANGES, RATE_CEILING

    path = tmp_path / "records.jsonl"
    good = RunRecord(config={"label": "good"}, metrics={"real_tokens_per_s": 10.0, "losses": [2.5, None]},
                     environment={"device_name": "cpu", "hostname": "h"}).to_dict()  # fmt: skip
    lines = [good, {**good, "metrics": {"real_tokens_per_s": -5}}, {**good, "metrics": {"real_tokens_per_s": 1e308}},
             {**good, "metrics": {"padding_fraction": 1.5}}, {**good, "metrics": {"losses": "x"}},
             {**good, "metrics": {"losses": [1.0, "x"]}},
             {**good, "metrics": {"real_tokens_per_s": RATE_CEILING}}]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = RunStore(path).load()
    assert [r.metrics.get("real_tokens_per_s") for r in loaded] == [10.0, RATE_CEILING]  # the bound itself stands
    assert [str(w.message).split(": skipped a torn or corrupt record ")[1] for w in caught] == [
        "(metrics.real_tokens_per_s=-5 is outside 0..1e+09)",
        "(metrics.real_tokens_per_s=1e+308 is outside 0..1e+09)",
        "(metrics.padding_fraction=1.5 is outside 0..1)",
        "(metrics.losses is text, not a list of numbers)",
        "(metrics.losses holds 'x', text, not a number or null)",
    ]
    assert [str(w.message).split(": skipped")[0] for w in caught] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6)]
    assert set(METRIC_RANGES) >= {"real_tokens_per_s", "peak_memory_gib", "padding_fraction"}
