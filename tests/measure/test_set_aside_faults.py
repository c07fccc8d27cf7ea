"""Setting records aside under faults: a torn tail in the side file, a full disk while appending, a failed rewrite
of the store. Each leaves every record once, nothing torn or glued, no staging file, and an error naming the path;
a property test holds the same for any split of any store."""

from __future__ import annotations

import errno
import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbhelpers.measure import set_aside
from nbhelpers.measure.set_aside import move_aside
from nbhelpers.measure.store import RunRecord, RunStore


def _store(folder, labels):
    store = RunStore(folder)
    for label in labels:
        store.append(RunRecord(config={"label": label}, metrics={"real_tokens_per_s": 1.0}))
    return store


def _labels(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn line is skipped with a warning: counted apart below
        return [r.label for r in RunStore(path).load()]


def test_a_torn_tail_in_the_side_file_is_sealed_and_the_moved_records_stay_whole(tmp_path):
    store = _store(tmp_path / "run", ["a", "b"])
    aside = tmp_path / "run" / "restarted-records.jsonl"
    aside.write_bytes(b'{"config": {"label": "torn by a cra')  # a crash mid-write left this
    with pytest.warns(UserWarning, match="its last line is torn"):
        assert move_aside(store.path, aside, lambda _offset, _line: False) == 2
    lines = aside.read_bytes().splitlines()
    assert lines[0] == b'{"config": {"label": "torn by a cra'  # the fragment stays alone on its line
    assert [json.loads(line)["config"]["label"] for line in lines[1:]] == ["a", "b"]
    assert _labels(aside) == ["a", "b"] and _labels(store.path) == []


def test_a_full_disk_while_setting_aside_is_undone_named_and_a_retry_moves_each_record_once(tmp_path, monkeypatch):
    store = _store(tmp_path / "run", ["keep", "x", "y"])
    aside = tmp_path / "run" / "interrupted-records.jsonl"
    aside.write_text("")
    real_write_all = set_aside.write_all

    def half_then_full(fd, data):
        real_write_all(fd, data[: len(data) // 2])  # the OS took half, then the disk was full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(set_aside, "write_all", half_then_full)
    before = store.path.read_bytes()
    for _ in range(3):  # each retry on the full disk fails the same way, adding nothing
        with pytest.raises(OSError, match=f"{aside}: could not append") as caught:
            move_aside(store.path, aside, lambda _offset, line: b'"keep"' in line)
        assert caught.value.errno == errno.ENOSPC
        assert aside.read_bytes() == b"" and store.path.read_bytes() == before
    monkeypatch.setattr(set_aside, "write_all", real_write_all)  # the disk has room again
    assert move_aside(store.path, aside, lambda _offset, line: b'"keep"' in line) == 2
    assert _labels(aside) == ["x", "y"] and _labels(store.path) == ["keep"]
    assert not list((tmp_path / "run").glob("*.tmp"))


def test_a_failed_rewrite_of_the_store_undoes_the_side_file_and_leaves_no_staging_file(tmp_path, monkeypatch):
    store = _store(tmp_path / "run", ["keep", "x"])
    aside = tmp_path / "run" / "interrupted-records.jsonl"
    aside.write_bytes(b"")
    real_replace = set_aside.os.replace

    def full(source, target):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(set_aside.os, "replace", full)
    before = store.path.read_bytes()
    with pytest.raises(OSError, match=f"{store.path}: could not be rewritten without the 1 record"):
        move_aside(store.path, aside, lambda _offset, line: b'"keep"' in line)
    assert aside.read_bytes() == b"" and store.path.read_bytes() == before
    assert not list((tmp_path / "run").glob("*.tmp"))
    monkeypatch.setattr(set_aside.os, "replace", real_replace)
    assert move_aside(store.path, aside, lambda _offset, line: b'"keep"' in line) == 1
    assert _labels(aside) == ["x"] and _labels(store.path) == ["keep"]


@settings(max_examples=40, deadline=None)
@given(labels=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=12),
       moved=st.sets(st.integers(min_value=0, max_value=11)), torn_tail=st.booleans())  # fmt: skip
def test_any_split_keeps_every_record_exactly_once_and_none_torn(tmp_path_factory, labels, moved, torn_tail):
    folder = tmp_path_factory.mktemp("run")
    store = _store(folder, labels)
    ids = [r.record_id for r in store.load()]
    aside = folder / "restarted-records.jsonl"
    if torn_tail:
        aside.write_bytes(b'{"config": {"lab')
    chosen = {ids[i] for i in moved if i < len(ids)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        count = move_aside(store.path, aside, lambda _offset, line: json.loads(line)["record_id"] not in chosen)
        kept, set_apart = RunStore(store.path).load(), RunStore(aside).load() if aside.exists() else []
    assert count == len(chosen)
    assert sorted(r.record_id for r in kept + set_apart) == sorted(ids)  # each once, none lost
    assert {r.record_id for r in set_apart} == chosen
    assert [r.record_id for r in kept] == [i for i in ids if i not in chosen]  # the store's order kept
    assert not list(folder.glob("*.tmp"))


def test_a_move_killed_between_its_two_writes_is_finished_by_the_next_with_one_copy(tmp_path):
    """kill -9 after the side file was written and before the store was: the records are in both files; the next
    move takes them out of the store and appends nothing again."""
    store = _store(tmp_path / "run", ["keep", "x", "y"])
    aside = tmp_path / "run" / "interrupted-records.jsonl"
    moving = [line for line in store.path.read_bytes().splitlines(keepends=True) if b'"keep"' not in line]
    aside.write_bytes(b"".join(moving))  # what the killed move had appended (and synced)
    assert move_aside(store.path, aside, lambda _offset, line: b'"keep"' in line) == 2
    assert _labels(aside) == ["x", "y"] and _labels(store.path) == ["keep"]
