"""The command line: ``tune`` (validation, journal, winner) and ``run-all``'s notebook parameters."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_sweep import stand_ins
from test_tuner import RATES, FakeClock, FakeMeasure

from nbhelpers import sweep
from nbhelpers.cli import main
from nbhelpers.tuning import tuner


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--kernels", "eager,turbo"], "kernels='eager,turbo' is not allowed: kernels must be a comma-separated"),
        (["--strategies", "static,zigzag"], "strategies="),
        (["--attention", "sdpa,fast"], "attention="),
        (["--batch-size", "0"], "batch_size=0 is not allowed: batch_size must be an integer from 1"),
        (["--timing", "forever"], "timing='forever' is not allowed: timing must be one of 'steps', 'epoch'"),
        (["--token-budgets", "16k"], "token_budgets='16k' is not allowed"),
        (["--liger-kernels", "rope,warp"], "liger_kernels="),
        (["--budget-s", "-1", "--kernels", "eager", "--strategies", "static"], "budget_s=-1.0 is not allowed"),
        (["--budget-s", "inf"], "budget_s=inf is not allowed: budget_s must be a finite number of seconds > 0"),
        (["--budget-s", "0"], "budget_s=0.0 is not allowed"),
        (["--model", "qwen3-tinny"], "model='qwen3-tinny' is not allowed: model must be a preset"),  # before measuring
        (["--gpu-memory-gib", "-3"], "gpu_memory_gib=-3.0 is not allowed: gpu_memory_gib must be 0 (the whole device)"),
        (["--frozen-base", "nf5"], "frozen_base='nf5' is not allowed: frozen_base must be one of bf16, nf4, nf4_bf16"),
        (["--frozen-base", "nf4"], "frozen_base='nf4' is not allowed: frozen_base must be 'bf16' without an adapter"),
    ],
)
def test_tune_refuses_a_bad_value_naming_it(argv, named, capsys, tmp_path):
    code = main(["tune", "--out", str(tmp_path), "--device", "cpu", "--no-progress", *argv])
    err = capsys.readouterr().err
    assert code == 2 and named in err, err


def test_tune_prints_the_journal_and_the_winner(monkeypatch, capsys, tmp_path):
    measure = FakeMeasure(FakeClock(), RATES)
    monkeypatch.setattr(tuner, "default_measure", lambda notebook="", progress=False: measure)
    argv = ["tune", "--run-name", "cli-tune", "--out", str(tmp_path), "--device", "cpu", "--no-progress",
            "--kernels", "eager,compile", "--strategies", "static,packed", "--attention", "sdpa,torch_varlen",
            "--batch-size", "2", "--max-length", "64", "--num-samples", "8", "--timing", "epoch"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Winner: tuned: compile / packed / sdpa" in out and "not runnable" in out and "torch_varlen" in out
    tuned = json.loads((tmp_path / "cli-tune" / "tuned.json").read_text())
    assert tuned["config"]["kernels"] == "compile" and tuned["config"]["batch_size"] == 2
    assert {c.run_name for c in measure.calls} == {"cli-tune"} and measure.calls[0].timing == "epoch"


def test_the_gpu_command_refuses_without_a_cuda_device(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    smi.chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path)}
    script = Path(__file__).resolve().parents[2] / "scripts" / "run_workbook_gpu.sh"
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 2 and "no CUDA GPU" in done.stderr and "run_workbook.sh" in done.stderr
    assert not (tmp_path / ".venv").exists()


def test_run_all_parameters_reach_only_the_notebooks_that_declare_them(tmp_path):
    one, two = stand_ins(tmp_path / "nbs")
    declared = {nb: sweep.notebook_parameters(nb) for nb in (one, two)}
    point = {"PADDING": "dynamic", "02:PADDING": "packed", "01:BATCH_SIZE": "3", "SLEEP_S": 0}
    sweep.check_grid(point, declared)
    assert sweep.parameters_for(one, declared[one], point, "r") == {
        "RUN_NAME": "r", "PADDING": "dynamic", "BATCH_SIZE": 3, "SLEEP_S": 0.0,
    }  # fmt: skip
    expected = {"RUN_NAME": "r", "PADDING": "packed", "SLEEP_S": 0.0}
    assert sweep.parameters_for(two, declared[two], point, "r") == expected
    for bad in ("02:BATCH_SIZE", "03:PADDING", "MODEL"):
        with pytest.raises(ValueError, match="declared by none of the notebooks"):
            sweep.check_grid({bad: 1}, declared)


def test_run_all_refuses_a_malformed_parameter(capsys, tmp_path):
    stand_ins(tmp_path / "nbs")
    code = main(["run-all", "--notebooks-dir", str(tmp_path / "nbs"), "--out", str(tmp_path / "runs"), "-p", "MODEL"])
    assert code == 2 and "NAME=VALUE" in capsys.readouterr().err
    code = main(["run-all", "--notebooks-dir", str(tmp_path / "nbs"), "--out", str(tmp_path / "runs"),
                 "-p", "01:NOPE=1", "--no-progress"])  # fmt: skip
    assert code == 2 and "declared by none of the notebooks" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run-all", "sweep"])
def test_run_all_and_sweep_default_to_the_runs_folder_and_the_workbooks_notebooks(
    command, tmp_path, monkeypatch
):
    seen: dict[str, object] = {}

    def fake_run_all(notebooks_dir, out, run_name, **kwargs):
        seen.update(notebooks=Path(notebooks_dir), out=Path(out))
        return "report.html", sweep.SweepResult(Path(out), Path(out) / "j", [])

    def fake_sweep(grid, notebooks, out, name, **kwargs):
        seen.update(notebooks=Path(notebooks[0]).parent, out=Path(out))
        return sweep.SweepResult(Path(out), Path(out) / "j", [])

    monkeypatch.setattr(sweep, "run_all", fake_run_all)
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
    monkeypatch.setenv("NBHELPERS_RUNS", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)  # not the clone: the defaults must not depend on the working folder
    argv = ["run-all"] if command == "run-all" else ["sweep", "--grid", "BATCH_SIZE=2"]
    assert main([*argv, "--no-progress"]) == 0
    assert seen["out"] == tmp_path / "elsewhere"
    assert seen["notebooks"] == Path(__file__).resolve().parents[2] / "notebooks"


@pytest.mark.parametrize("command", ["run-all", "sweep", "tune", "report", "doctor", "warm-cache"])
def test_every_command_help_shows_defaults_and_an_example(capsys, command):
    from nbhelpers import cli

    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"example: nbhelpers {command}" in text
    assert "RunConfig." not in text and "(default: None)" not in text and "(default: [])" not in text
    if command in ("run-all", "sweep"):
        assert "(default: python3)" in text
    if command in ("doctor", "warm-cache"):
        assert "one of auto, cpu, cuda (default: auto)" in text
    if command == "warm-cache":
        assert "one of eager, liger" in text and "(default: qwen3-tiny)" in text


def test_tune_help_shows_defaults_allowed_values_and_an_example(capsys):
    from nbhelpers import cli

    with pytest.raises(SystemExit):
        cli.main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "RunConfig." not in text
    assert "one of steps, epoch (default: steps)" in text and "one of none, lora (default: none)" in text
    assert "(default: 60.0)" in text and "eager, liger, compile" in text and "(default: auto)" in text
    assert "example: nbhelpers tune --model qwen3-tiny" in text
    assert "(default: None)" not in text and "(default: )" not in text


@pytest.mark.slow
def test_tune_says_a_batch_lost_its_loss_tokens_to_max_length(capsys, tmp_path):
    """At --max-length 32 the default data's first batch keeps no response token: the baseline fails before a
    model is built, and stderr says why and which option to raise (not a bare "non-finite loss")."""
    argv = ["tune", "--run-name", "t44", "--out", str(tmp_path), "--device", "cpu", "--no-progress",
            "--max-length", "32", "--num-samples", "4", "--batch-size", "2", "--kernels", "eager",
            "--strategies", "static", "--steps", "1", "--warmup", "0", "--budget-s", "60"]  # fmt: skip
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert "nbhelpers tune: the baseline could not be measured (failed: DataError: " in captured.err
    assert "has no loss tokens after truncation to max_length=32" in captured.err and "--max-length" in captured.err
    assert "non-finite loss" not in captured.out + captured.err
