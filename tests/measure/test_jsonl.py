"""The JSON-lines helper behind RunStore and the sweep journal: torn lines, corrupt lines, concurrent appends."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from nbhelpers.measure.jsonl import append_line, read_lines


def test_append_then_read_in_order(tmp_path):
    path = tmp_path / "deep" / "log.jsonl"  # the folder is created
    for i in range(3):
        append_line(path, {"i": i, "b": "x"})
    assert read_lines(path) == [{"b": "x", "i": 0}, {"b": "x", "i": 1}, {"b": "x", "i": 2}]
    assert path.read_text().splitlines()[0] == '{"b": "x", "i": 0}'  # sorted keys, one line each
    assert read_lines(tmp_path / "absent.jsonl") == []


def test_torn_last_line_is_sealed_by_the_next_append(tmp_path):
    path = tmp_path / "log.jsonl"
    append_line(path, {"i": 0})
    with open(path, "a") as handle:
        handle.write(json.dumps({"i": 1, "pad": "y" * 40})[:20])  # a crash mid-write
    append_line(path, {"i": 2})
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[2]) == {"i": 2}  # the new entry is whole, on its own line
    with pytest.warns(UserWarning, match=r"log\.jsonl:2: skipped a torn or corrupt entry"):
        assert read_lines(path, what="entry") == [{"i": 0}, {"i": 2}]


def test_corrupt_lines_are_skipped_with_file_and_line_in_the_warning(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"i": 0}\n\nnot json\n[1, 2]\n{"i": 4}\n\xff\xfe\n{"i": 6}\n')
    with pytest.warns(UserWarning) as caught:
        assert read_lines(path) == [{"i": 0}, {"i": 4}, {"i": 6}]
    messages = [str(w.message) for w in caught]
    assert [m.split(": skipped")[0] for m in messages] == [f"{path}:3", f"{path}:4", f"{path}:6"]
    assert "not a JSON object" in messages[1]


def test_parse_refusing_a_line_counts_as_corrupt(tmp_path):
    path = tmp_path / "log.jsonl"
    for entry in ({"n": 1}, {"m": 2}, {"n": 3}):
        append_line(path, entry)
    with pytest.warns(UserWarning, match=r"log\.jsonl:2: skipped a torn or corrupt number \(no number\)"):
        assert read_lines(path, _number, what="number") == [1, 3]


def _number(entry: dict) -> int:
    if "n" not in entry:
        raise ValueError("no number")
    return int(entry["n"])


def _append_many(path, start):
    for i in range(start, start + 200):
        append_line(path, {"i": i, "payload": "z" * (i % 97) * 40})


def test_concurrent_appends_from_two_processes_stay_whole_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    workers = [multiprocessing.Process(target=_append_many, args=(path, k * 1000)) for k in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 400
    numbers = sorted(json.loads(line)["i"] for line in lines)  # every line parses: none interleaved
    assert numbers == [*range(200), *range(1000, 1200)]


def test_a_short_write_is_undone_and_raised_never_reported_as_written(tmp_path, monkeypatch):
    """A nearly full disk: os.write writes part of the line, then nothing. The append raises, and the file holds
    exactly the whole lines it held before (no torn half-record that a later read would skip as corrupt)."""
    import os

    from nbhelpers.measure import jsonl
    from nbhelpers.measure.store import RecordNotSaved, RunRecord, RunStore

    path = tmp_path / "records.jsonl"
    append_line(path, {"n": 1})
    before = path.read_bytes()
    real_write = os.write
    calls = []

    def short_write(fd, data):
        calls.append(len(data))
        return real_write(fd, bytes(data[:7])) if len(calls) == 1 else 0

    monkeypatch.setattr(jsonl.os, "write", short_write)
    with pytest.raises(OSError, match="wrote 0 of"):
        append_line(path, {"n": 2, "payload": "x" * 100})
    assert path.read_bytes() == before and len(calls) == 2
    # the store routes such a record to its fallback file, or the error: never "saved" in the store
    store = RunStore(path)
    record = RunRecord(config={"label": "x", "run_name": "r"}, metrics={"real_tokens_per_s": 1.0})
    calls.clear()
    with pytest.raises(RecordNotSaved) as caught:
        store.append(record)
    assert caught.value.record is record
    monkeypatch.undo()
    assert [line for line in read_lines(path)] == [{"n": 1}]
