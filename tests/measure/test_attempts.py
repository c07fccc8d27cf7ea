"""Notebooks 04 and 05 measure inside ``measuring``: a measuring cell killed with SIGKILL at any point leaves
records that the cell's next run sets aside before measuring again, so each configuration is stored once and
nothing measured is lost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from nbhelpers.measure.attempts import marker_path, measuring
from nbhelpers.measure.set_aside import SET_ASIDE_NAME
from nbhelpers.measure.store import RunRecord, RunStore

ROOT = Path(__file__).resolve().parents[2]

CELL = """
import os, signal, sys
from nbhelpers.measure import runner
from nbhelpers.measure.attempts import measuring
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore

calls = []

def fake_run_config(config, isolate=True, notebook="", on_progress=None, extra_env=None):
    calls.append(config.name)
    if len(calls) == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)  # as an out-of-memory killer or a closed Colab tab would
    return RunRecord(config=config.to_dict() | {{"label": config.name}}, notebook=notebook,
                     metrics={{"real_tokens_per_s": 1.0}}, environment={{"hostname": "h", "device_name": "cpu"}})

runner.run_config = fake_run_config
store = RunStore({store!r})
base = RunConfig(run_name="r", model="qwen3-tiny", device="cpu", batch_size=2, max_length=64, num_samples=4)
with measuring(store, {notebook!r}):
    if {notebook!r} == "05_several_gpus":  # notebook 05's cell: one GPU and two, each stored as it lands
        from nbhelpers.analysis import scaling
        scaling.measure_scaling(base, 2, store, notebook={notebook!r})
    else:  # notebook 04's cell: the peer rows, then the convergence pair, in one attempt
        runner.run_configs([base.replace(label=f"peer {{i}}") for i in range(2)], store=store, notebook={notebook!r})
        runner.run_configs([base.replace(label=f"curve {{i}}") for i in range(2)], store=store, notebook={notebook!r})
"""
EXPECTED = {"04_speedup_report": 4, "05_several_gpus": 2}


def run_cell(store: Path, notebook: str, kill_at: int) -> subprocess.CompletedProcess:
    code = CELL.format(kill_at=kill_at, store=str(store), notebook=notebook)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize(("notebook", "kill_at"), [(nb, k) for nb, n in EXPECTED.items() for k in range(1, n + 1)])
def test_a_measuring_cell_killed_at_any_point_is_measured_again_once(tmp_path, notebook, kill_at):
    store_path = tmp_path / "run" / "records.jsonl"
    killed = run_cell(store_path, notebook, kill_at)
    assert killed.returncode == -9, killed.stderr
    stored = RunStore(store_path).load()
    assert len(stored) == kill_at - 1  # every measurement finished before the kill was stored at once
    rerun = run_cell(store_path, notebook, kill_at=0)
    assert rerun.returncode == 0, rerun.stderr
    now = RunStore(store_path).load()
    labels = [r.config["label"] for r in now]
    assert len(labels) == EXPECTED[notebook] == len(set(labels))  # each configuration once
    aside = RunStore(store_path.parent / SET_ASIDE_NAME).load()
    assert [r.record_id for r in aside] == [r.record_id for r in stored]  # the killed attempt's, kept aside
    assert not marker_path(RunStore(store_path), notebook).exists()


def test_a_finished_cell_leaves_no_marker_and_an_error_leaves_one(tmp_path):
    store = RunStore(tmp_path / "run")
    with measuring(store, "04_speedup_report") as moved:
        store.append(RunRecord(config={"label": "a"}))
    assert moved == 0 and not marker_path(store, "04_speedup_report").exists()
    with pytest.raises(RuntimeError), measuring(store, "04_speedup_report"):
        store.append(RunRecord(config={"label": "b"}))
        raise RuntimeError("stopped mid-cell")
    assert json.loads(marker_path(store, "04_speedup_report").read_text())["store_bytes"] > 0
    with measuring(store, "04_speedup_report") as moved:
        pass
    assert moved == 1 and [r.config["label"] for r in store.load()] == ["a"]


@pytest.mark.parametrize("name", ["04_speedup_report", "05_several_gpus"])
def test_notebooks_04_and_05_measure_inside_measuring(name):
    """Every cell of the notebook that measures does it inside ``measuring`` with the notebook's name."""
    notebook = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    measuring_cells = [c.source for c in notebook.cells if c.cell_type == "code"
                       and any(call in c.source for call in ("measure_peers(", "measure_convergence(",
                                                             "measure_scaling("))]  # fmt: skip
    assert measuring_cells
    for source in measuring_cells:
        assert f'with measuring(store, "{name}")' in source, source


def test_a_record_a_command_wrote_during_the_killed_attempt_stays_in_the_store(tmp_path):
    """A killed attempt's records are set aside before its rerun; a record that a CLI command (the doctor) appended
    to the same run meanwhile is not part of that attempt and stays."""
    store = RunStore(tmp_path / "run")
    env = {"hostname": "h", "device_name": "cpu"}
    store.append(RunRecord(config={"label": "before"}, notebook="04_speedup_report", environment=env))
    marker = marker_path(store, "04_speedup_report")
    marker.write_text(json.dumps({"store_bytes": store.path.stat().st_size}))  # the attempt began, then was killed
    store.append(RunRecord(config={"label": "killed attempt"}, notebook="04_speedup_report", environment=env))
    store.append(RunRecord(config={"label": "doctor"}, kind="doctor", notebook="nbhelpers doctor", environment=env))
    with measuring(store, "04_speedup_report") as moved:
        assert moved == 1
    assert [r.label for r in store.load()] == ["before", "doctor"]
    assert [r.label for r in RunStore(tmp_path / "run" / SET_ASIDE_NAME).load()] == ["killed attempt"]
