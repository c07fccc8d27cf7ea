"""Every record a suite stores gets its manifest line (date, machine, commit, command), written through the store."""

from __future__ import annotations

import json

import pytest

from nbhelpers.bench import manifest
from nbhelpers.bench.manifest import MANIFEST, ManifestStore, code_commit, load_manifest
from nbhelpers.measure.store import RunStore


def test_the_store_appends_the_record_and_its_manifest_line(tmp_path, make_record):
    store = ManifestStore(tmp_path / "qwen3-tiny" / "q" / "rows.jsonl", "nbhelpers bench q", commit="abc1234")
    record = make_record("base", 100.0)
    store.append(record)
    assert [r.record_id for r in RunStore(store.path).load()] == [record.record_id]
    (line,) = load_manifest(store.path.parent)
    assert line == {"record_id": record.record_id, "file": "rows.jsonl", "date": record.created_at,
                    "machine": "NVIDIA H200 @ gpu-01", "commit": "abc1234", "command": "nbhelpers bench q"}


def test_a_record_without_a_machine_says_unknown(tmp_path, make_record):
    record = make_record("failed early", None, status="failed", reason="no device")
    record.environment = {}
    ManifestStore(tmp_path / "r.jsonl", "cmd", commit="c").append(record)
    assert json.loads((tmp_path / MANIFEST).read_text())["machine"] == "unknown"


def test_the_commit_comes_from_the_environment_else_git_else_unknown(monkeypatch):
    monkeypatch.setenv("NBHELPERS_COMMIT", "feedbee")
    assert code_commit() == "feedbee"
    monkeypatch.delenv("NBHELPERS_COMMIT")
    assert code_commit()  # this checkout: a commit, perhaps with "+changes"
    monkeypatch.setattr(manifest, "_git", lambda *args: "")
    assert code_commit() == "unknown"


@pytest.mark.parametrize("changed", ["", " M nbhelpers/x.py"])
def test_changes_to_the_package_are_said(monkeypatch, changed):
    monkeypatch.delenv("NBHELPERS_COMMIT", raising=False)
    monkeypatch.setattr(manifest, "_git", lambda *args: "1234abc" if "rev-parse" in args else changed)
    assert code_commit() == ("1234abc+changes" if changed else "1234abc")
