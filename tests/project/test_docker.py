"""docker/Dockerfile cannot be built here: what it runs is checked instead. Its warm-cache command is accepted by
this version of the command line, its cache variables are the ones ``cache_env`` sets, and it installs the file
``nbhelpers doctor --pin`` writes (test_kernel_set shows that file round-trips and resolves with pip)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from nbhelpers.cli import main
from nbhelpers.kernels.cache import cache_env

DOCKERFILE = Path(__file__).resolve().parents[2] / "docker" / "Dockerfile"


def _instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _build_args() -> dict[str, str]:
    pairs = (line.split(None, 1)[1].split("=", 1) for line in _instructions() if line.startswith("ARG "))
    return {name: value for name, value in pairs}


def _warm_command() -> list[str]:
    (run,) = [line for line in _instructions() if line.startswith("RUN nbhelpers warm-cache")]
    command = run.removeprefix("RUN ").split("&&")[0]
    for name, value in _build_args().items():
        command = command.replace(f"${{{name}}}", value)
    assert "${" not in command, command
    return shlex.split(command)


def test_the_warm_cache_step_is_a_valid_command_of_this_cli(capsys):
    argv = _warm_command()
    assert argv[:2] == ["nbhelpers", "warm-cache"] and "--no-step" not in argv
    assert main([*argv[1:], "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step: liger/token_budget/torch_varlen/b8x2048")


def test_the_image_environment_points_the_caches_where_warm_cache_fills_them():
    argv = _warm_command()
    cache_dir = argv[argv.index("--cache-dir") + 1]
    env_lines = " ".join(line.removeprefix("ENV ") for line in _instructions() if line.startswith("ENV "))
    image_env = dict(item.split("=", 1) for item in shlex.split(env_lines) if "=" in item)
    expected = cache_env(cache_dir)
    assert {key: image_env.get(key) for key in expected} == expected


def test_the_image_installs_the_kernel_set_the_doctor_writes():
    copies = [line for line in _instructions() if line.startswith("COPY docker/kernel-set.txt")]
    installs = [line for line in _instructions() if line.startswith("RUN pip install -r docker/kernel-set.txt")]
    assert copies and len(installs) == 2  # the kernel set alone first, then the workbook constrained by it
    readme = (DOCKERFILE.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "nbhelpers doctor --pin docker/kernel-set.txt" in readme
