"""Notebooks 01-03 under papermill on one's own data: chat messages, ShareGPT and Alpaca files the tests write.

Only DATASET is passed: the format is detected (nbhelpers.data.formats), so these run with the notebooks'
present parameters; the loss covers every assistant turn.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from notebook_helpers import execute

from nbhelpers.measure.store import RunStore

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
WORDS = "the model reads a long list of words and learns to answer every question with care".split()


def _sentence(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def write_own_data(folder: Path, kind: str, rows: int = 12) -> Path:
    """A JSONL file of ``rows`` rows in one format, with varied lengths and two assistant turns per chat."""
    rng = random.Random(kind)
    lines = []
    for _ in range(rows):
        turns = [_sentence(rng, 4, 30) for _ in range(4)]
        if kind == "chat":
            roles = ["user", "assistant", "user", "assistant"]
            row = {"messages": [{"role": r, "content": t} for r, t in zip(roles, turns, strict=True)]}
        elif kind == "sharegpt":
            roles = ["human", "gpt", "human", "gpt"]
            row = {"conversations": [{"from": r, "value": t} for r, t in zip(roles, turns, strict=True)]}
        else:
            row = {"instruction": turns[0], "input": turns[1], "output": turns[2]}
        lines.append(json.dumps(row))
    path = folder / f"{kind}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _assert_learned(records, dataset: Path) -> None:
    steps = [r for r in records if r.kind == "step"]
    assert steps and all(r.ok for r in steps), [(r.label, r.reason) for r in steps]
    for record in steps:
        assert record.config["dataset"] == str(dataset)
        assert 0 < record.metrics["loss_tokens_per_step"] < record.metrics["real_tokens_per_step"]


@pytest.mark.slow
def test_notebook_01_on_a_chat_file(runs_root, kernel_env, tmp_path):
    data = write_own_data(tmp_path, "chat")
    execute(NOTEBOOKS / "01_baseline_profile.ipynb", tmp_path / "01.ipynb",
            {"RUN_NAME": "own01", "DATASET": str(data), "BATCH_SIZE": 2, "MAX_LENGTH": 96, "NUM_SAMPLES": 4,
             "STEPS": 1, "WARMUP": 0})  # fmt: skip
    _assert_learned(RunStore.for_run("own01").load(), data)


@pytest.mark.slow
def test_notebook_02_on_an_alpaca_file(runs_root, kernel_env, tmp_path):
    data = write_own_data(tmp_path, "alpaca")
    execute(NOTEBOOKS / "02_kernel_swap_in.ipynb", tmp_path / "02.ipynb",
            {"RUN_NAME": "own02", "DATASET": str(data), "KERNELS": "eager", "BATCH_SIZE": 2, "MAX_LENGTH": 96,
             "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0, "MEASURE_STARTUP": False, "DOCTOR_PROBES": False})  # fmt: skip
    _assert_learned(RunStore.for_run("own02").load(), data)


@pytest.mark.slow
def test_notebook_03_on_a_sharegpt_file(runs_root, kernel_env, tmp_path):
    data = write_own_data(tmp_path, "sharegpt")
    execute(NOTEBOOKS / "03_dynamic_padding.ipynb", tmp_path / "03.ipynb",
            {"RUN_NAME": "own03", "DATASET": str(data), "STRATEGIES": "static,packed", "ATTENTION": "sdpa",
             "BATCH_SIZE": 2, "MAX_LENGTH": 128, "NUM_SAMPLES": 8, "STEPS": 1, "WARMUP": 0, "PROFILE": False,
             "PROOF_SEQUENCES": 3, "GPU_RESULTS": str(tmp_path / "no-gpu"), "KERNELS": "eager",
             "TUNE_BUDGET_S": 0})  # fmt: skip
    records = RunStore.for_run("own03").load()
    _assert_learned(records, data)
    proof = [r for r in records if r.kind != "step"]
    assert proof and all(r.ok for r in proof), [(r.label, r.reason) for r in proof]
