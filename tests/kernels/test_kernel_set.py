"""The curated kernel set: generated from a doctor record, round-trips, resolves with pip; ``nbhelpers doctor``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nbhelpers.cli import main
from nbhelpers.kernels.doctor import DOCTOR_KIND, installed_versions
from nbhelpers.kernels.kernel_set import pin_mismatches, read_kernel_set, torch_index
from nbhelpers.measure.doctor_records import kernel_set, render_kernel_set, write_kernel_set
from nbhelpers.measure.store import RunRecord, RunStore


def _row(path, verdict, packages, reason=""):
    return {"path": path, "verdict": verdict, "packages": packages, "reason": reason, "correct": ""}


def _h200_record() -> RunRecord:
    """A doctor record as an H200 would write it: fla passed, Liger's probe failed, flash-attn absent."""
    packages = {"torch": "2.11.0+cu128", "triton": "3.6.0", "transformers": "5.17.0", "liger-kernel": "0.8.5",
                "flash-linear-attention": "0.6.0", "tilelang": "0.1.15", "causal-conv1d": None, "flash-attn": None,
                "trl": "1.16.0"}  # fmt: skip
    paths = [
        _row("kernels eager", "reference", {}),
        _row("kernels liger", "broken", {"liger-kernel": "0.8.5", "triton": "3.6.0"}, "probe failed: swiglu"),
        _row("kernels compile", "ok", {}),
        _row("kernels fla", "ok", {"flash-linear-attention": "0.6.0", "triton": "3.6.0", "causal-conv1d": None,
                                   "tilelang": "0.1.15"}),  # fmt: skip
        _row("attention flash_attention_2", "absent", {"flash-attn": None}, "not installed: flash-attn"),
    ]
    gpu = {"name": "NVIDIA H200", "sm": "sm90", "capability": [9, 0], "cuda": "12.8", "driver": "570.1",
           "memory_gib": 139.8}  # fmt: skip
    return RunRecord(config={"label": "kernel doctor"}, kind=DOCTOR_KIND,
                     metrics={"packages": packages, "paths": paths, "gpu": gpu})  # fmt: skip


def test_kernel_set_pins_what_passed_and_says_what_was_left_out():
    pins, left_out = kernel_set(_h200_record())
    assert pins == {"torch": "2.11.0+cu128", "triton": "3.6.0", "transformers": "5.17.0",
                    "flash-linear-attention": "0.6.0", "tilelang": "0.1.15"}  # fmt: skip
    assert left_out == {"liger-kernel": "kernels liger is broken: probe failed: swiglu"}
    text = render_kernel_set(_h200_record())
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in text
    assert "# machine: NVIDIA H200 (sm90), CUDA 12.8, driver 570.1" in text and "liger-kernel==" not in text


def test_kernel_set_file_round_trips(tmp_path):
    path = write_kernel_set(_h200_record(), tmp_path / "sets" / "kernel-set.txt")
    assert read_kernel_set(path) == kernel_set(_h200_record())[0]


def test_reading_refuses_a_line_that_is_no_exact_pin(tmp_path):
    path = tmp_path / "set.txt"
    path.write_text("torch==2.11.0\ntriton>=3.4\n")
    with pytest.raises(ValueError, match=r"set.txt:2: 'triton>=3.4' is no exact pin"):
        read_kernel_set(path)
    with pytest.raises(ValueError, match="a kernel set is made from a 'doctor' record"):
        kernel_set(RunRecord(config={}, kind="step"))


def test_torch_index_follows_the_local_label():
    assert torch_index("2.11.0+cu128") == "https://download.pytorch.org/whl/cu128"
    assert torch_index("2.13.0+cpu") == "https://download.pytorch.org/whl/cpu"
    assert torch_index("2.11.0") is None and torch_index(None) is None


def _pip_dry_run(path):
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--no-deps", "-r", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def test_doctor_cli_writes_record_json_and_a_kernel_set_that_resolves_here(tmp_path, capsys):
    pin = tmp_path / "kernel-set.txt"
    argv = ["doctor", "--no-probes", "--device", "cpu", "--run-name", "doc", "--out", str(tmp_path / "runs"),
            "--pin", str(pin), "--json"]  # fmt: skip
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["kind"] == DOCTOR_KIND and {row["path"] for row in printed["metrics"]["paths"]} >= {
        "kernels liger", "attention sdpa"}  # fmt: skip
    (stored,) = RunStore(tmp_path / "runs" / "doc").load()
    assert stored.record_id == printed["record_id"]
    pins = read_kernel_set(pin)
    assert pin_mismatches(pins, installed_versions(pins)) == {}
    done = _pip_dry_run(pin)
    assert done.returncode == 0, done.stdout + done.stderr
    assert all(f"{name}=={version}" in done.stdout for name, version in pins.items())
    pin.write_text(pin.read_text().replace(f"triton=={pins['triton']}", "triton==0.0.1"))
    assert _pip_dry_run(pin).returncode != 0  # a pin this environment cannot satisfy does not resolve


def test_doctor_cli_prints_a_table_and_refuses_a_bad_device(capsys):
    assert main(["doctor", "--no-probes", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "no CUDA GPU" in out and "attention sdpa" in out and "verdict" in out
    assert main(["doctor", "--device", "gpu"]) == 2
    assert "device='gpu': allowed are auto, cpu, cuda" in capsys.readouterr().err


def test_pinning_writes_through_a_link_and_refuses_a_target_that_is_no_regular_file(tmp_path):
    import os

    from nbhelpers.kernels.kernel_set import write_pins

    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_pins("torch==2.11.0\n", link)
    assert link.is_symlink() and real.read_text() == "torch==2.11.0\n"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="a-folder: exists and is not a regular file"):
        write_pins("torch==2.11.0\n", folder)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="pipe: exists and is not a regular file"):
        write_pins("torch==2.11.0\n", fifo)
    assert fifo.exists() and not fifo.is_file()


def test_doctor_pin_that_names_a_folder_fails_before_the_doctor_runs(tmp_path, monkeypatch, capsys):
    from nbhelpers import cli
    from nbhelpers.kernels import doctor

    monkeypatch.setattr(doctor, "run_doctor", lambda *a, **k: pytest.fail("the doctor ran before --pin was checked"))
    assert cli.main(["doctor", "--out", str(tmp_path / "runs"), "--pin", str(tmp_path)]) == 2
    assert "exists and is not a regular file" in capsys.readouterr().err
