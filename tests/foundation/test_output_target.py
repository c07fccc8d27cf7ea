"""Files the workbook writes where a user names them (the report, a cache archive, a kernel set) are written as
regular files: a link is written through, and a folder, a pipe, a link into nowhere or a file where a folder must
be is refused with the parameter's name before any work, never renamed over."""

from __future__ import annotations

import os

import pytest

from nbhelpers.cli import main
from nbhelpers.kernels.cache import export_cache
from nbhelpers.measure.store import RunStore
from nbhelpers.validation import ConfigError, output_target
from nbhelpers.views.report import write_html_report


def test_a_new_or_regular_file_is_its_own_target_and_a_link_is_written_through(tmp_path):
    assert output_target(tmp_path / "new.html", "output") == tmp_path / "new.html"
    (tmp_path / "old.html").write_text("x")
    assert output_target(tmp_path / "old.html", "output") == tmp_path / "old.html"
    (tmp_path / "link.html").symlink_to(tmp_path / "old.html")
    assert output_target(tmp_path / "link.html", "output") == (tmp_path / "old.html").resolve()


@pytest.mark.parametrize("kind", ["folder", "pipe", "dangling link", "file in the way"])
def test_a_target_that_is_no_regular_file_is_refused_naming_the_parameter(tmp_path, kind):
    path = tmp_path / "out"
    if kind == "folder":
        path.mkdir()
    elif kind == "pipe":
        os.mkfifo(path)
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "missing-folder" / "x.html")
    else:
        path.write_text("a file")
        path = path / "report.html"
    with pytest.raises(ConfigError, match="^--output="):
        output_target(path, "--output")


def test_the_report_writes_through_a_link_and_refuses_a_pipe(tmp_path, make_record):
    records = [make_record("base", 1000.0)]
    target = tmp_path / "real.html"
    target.write_text("old")
    (tmp_path / "link.html").symlink_to(target)
    write_html_report(records, tmp_path / "link.html")
    assert (tmp_path / "link.html").is_symlink() and "<html" in target.read_text()
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ConfigError, match="output="):
        write_html_report(records, tmp_path / "pipe")
    assert not (tmp_path / "pipe.tmp").exists()


def test_a_cache_archive_onto_a_folder_is_refused_with_nothing_left_behind(tmp_path):
    cache = tmp_path / "cache"
    (cache / "triton").mkdir(parents=True)
    (cache / "triton" / "k.bin").write_bytes(b"k")
    (tmp_path / "archive").mkdir()
    with pytest.raises(ConfigError, match="archive="):
        export_cache(cache, tmp_path / "archive")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive", "cache"]


def test_the_cli_refuses_such_an_output_in_one_line_before_any_work(tmp_path, make_record, capsys):
    run = tmp_path / "r1"
    RunStore(run).append(make_record("base", 1000.0))
    os.mkfifo(tmp_path / "pipe")
    assert main(["report", str(run), "--output", str(tmp_path / "pipe")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nbhelpers report: --output=") and len(err.splitlines()) == 1
    assert (tmp_path / "pipe").exists() and not (tmp_path / "pipe").is_file()  # untouched
    (tmp_path / "folder").mkdir()
    argv = ["warm-cache", "--cache-dir", str(tmp_path / "c"), "--archive", str(tmp_path / "folder"), "--dry-run"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("nbhelpers warm-cache: --archive=")


def test_an_unwritable_output_folder_is_one_line_not_a_traceback(tmp_path, make_record, capsys):
    run = tmp_path / "r1"
    RunStore(run).append(make_record("base", 1000.0))
    (tmp_path / "afile").write_text("x")
    assert main(["report", str(run), "--output", str(tmp_path / "afile" / "r.html")]) == 2
    assert capsys.readouterr().err.startswith("nbhelpers report: --output=")
