"""Folders and names a command writes to are checked before it does any work: warm-cache's cache folder (also
under --dry-run) and the doctor's run folder."""

from __future__ import annotations

import pytest

from nbhelpers.cli import main
from nbhelpers.kernels import doctor


def test_warm_cache_dry_run_refuses_a_folder_it_cannot_write(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main(["warm-cache", "--cache-dir", str(tmp_path / "afile" / "sub"), "--dry-run"]) == 2
    assert "--cache-dir=" in capsys.readouterr().err
    (tmp_path / "dangling").symlink_to(tmp_path / "missing" / "cache")
    assert main(["warm-cache", "--cache-dir", str(tmp_path / "dangling"), "--dry-run"]) == 2
    assert "which does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()  # nothing made where the link points
    assert main(["warm-cache", "--cache-dir", str(tmp_path / "ok"), "--dry-run"]) == 0


@pytest.mark.parametrize("options", [["--run-name", "../x"], ["--run-name", "d1", "--out", "FILE"]])
def test_the_doctor_refuses_its_run_folder_before_it_runs(tmp_path, monkeypatch, capsys, options):
    (tmp_path / "afile").write_text("x")
    options = [str(tmp_path / "afile") if o == "FILE" else o for o in options]
    monkeypatch.setattr(doctor, "run_doctor", lambda *a, **k: pytest.fail("the doctor ran before the check"))
    assert main(["doctor", "--no-probes", "--device", "cpu", *options]) == 2
    assert capsys.readouterr().err.startswith("nbhelpers doctor: ")


def test_run_all_names_the_option_that_sets_the_run_name(tmp_path, capsys):
    assert main(["run-all", "--out", str(tmp_path), "-p", "RUN_NAME=x"]) == 2
    err = capsys.readouterr().err
    assert "RUN_NAME=" in err and "named by --run-name" in err
    assert list(tmp_path.iterdir()) == []  # refused before any notebook ran


def test_warm_cache_dry_run_refuses_what_its_run_would_on_this_device(tmp_path, capsys):
    """float8 on a CPU: the run would fail after its probes; the dry run says so at once, naming the option."""
    cache = str(tmp_path / "cache")
    assert main(["warm-cache", "--cache-dir", cache, "--dry-run", "--device", "cpu", "--kernels", "float8"]) == 2
    err = capsys.readouterr().err
    assert "--kernels='float8' cannot run on cpu" in err and "compute capability" in err
    assert main(["warm-cache", "--cache-dir", cache, "--dry-run", "--device", "cpu", "--kernels", "eager"]) == 0
    assert "step: eager/dynamic/sdpa/b2x512" in capsys.readouterr().out  # the notebooks' shape (2 x 512)
