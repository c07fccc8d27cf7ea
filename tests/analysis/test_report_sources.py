"""What a report reads: a run folder holding records.jsonl, a records file, or a run name; anything else is refused
saying what was found (a folder without records, the runs root and the runs inside it, a file of another kind)."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.overview import store_for
from nbhelpers.cli import main
from nbhelpers.measure.store import RunStore


def test_a_run_folder_a_records_file_and_a_run_name_are_read(runs_root, make_record):
    store = RunStore.for_run("r1")
    store.append(make_record("base", 1000.0))
    assert store_for(str(runs_root / "r1")).path == store.path
    assert store_for(str(store.path)).path == store.path
    assert store_for("r1").path == store.path


def test_folders_without_records_and_other_files_are_refused_saying_what_they_are(runs_root, make_record, tmp_path):
    RunStore.for_run("r1").append(make_record("base", 1000.0))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="a folder without records.jsonl, so no run folder$"):
        store_for(str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="it holds the run folders r1"):
        store_for(str(runs_root))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="neither a run folder nor a records file"):
        store_for(str(tmp_path / "notes.txt"))
    with pytest.raises(FileNotFoundError, match="no run folder or records file at"):
        store_for(str(tmp_path / "nope" / "run"))  # a missing path, not a bad run name


def test_the_report_command_refuses_them_in_one_line_and_writes_nothing(runs_root, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nbhelpers report: ") and "without records.jsonl" in err and len(err.splitlines()) == 1
    assert list((tmp_path / "empty").iterdir()) == []
