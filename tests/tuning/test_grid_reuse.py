"""A notebook's grid reuses the run's record of the same computation, timed the same way on this machine (notebook
01's baseline for notebook 02's eager row), instead of measuring it again, and never stores it twice."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from nbhelpers.analysis.parity import store_checked
from nbhelpers.measure import runner
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.env import safe_environment
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.tuning.reuse import grid_reuse
from nbhelpers.workbook.grid_runs import run_configs

BASE = RunConfig(
    run_name="reuse", model="qwen3-tiny", batch_size=2, max_length=64, num_samples=4, device="cpu", profile=True
)


def stored_record(tmp_path: Path, config: RunConfig, *, trace: bool = True, probe: bool = True) -> RunRecord:
    """An ok step record as notebook 01 would store it, measured on this machine."""
    artifacts = {}
    if trace:
        path = tmp_path / f"{uuid.uuid4().hex}.trace.json.gz"
        path.write_bytes(b"")
        artifacts["trace"] = str(path)
    metrics = {"real_tokens_per_s": 100.0, "loss_first": 1.0, "losses": [1.0] * 13, "timed_steps": 12}
    if probe:
        metrics["parity_probe"] = {"version": 1, "total_loss": 1.0}
    return RunRecord(
        config=config.to_dict() | {"label": config.name}, kind="step", notebook="01_baseline_profile.ipynb",
        metrics=metrics, environment=safe_environment("cpu"), artifacts=artifacts,
    )  # fmt: skip


def test_the_same_computation_timed_the_same_way_is_reused_under_the_new_label(tmp_path):
    store = RunStore(tmp_path / "run")
    original = store.append(stored_record(tmp_path, BASE.replace(label="baseline")))
    found = grid_reuse(store)(BASE.replace(label="eager"))
    assert found is not None and found.label == "eager" and found.reused
    assert found.record_id == original.record_id  # one measurement, one id
    assert found.metrics["reused_from"] == {"record_id": original.record_id, "notebook": "01_baseline_profile.ipynb"}
    assert store.load()[0].label == "baseline"  # the stored record is untouched


@pytest.mark.parametrize(
    ("change", "record_options"),
    [
        ({"padding": "packed"}, {}),  # another computation
        ({"kernels": "liger"}, {}),
        ({"timing": "epoch"}, {}),  # timed another way
        ({"steps": 7}, {}),
        ({}, {"trace": False}),  # the grid profiles; the record has no trace
        ({}, {"probe": False}),  # the grid probes parity; the record has no probe
    ],
)
def test_a_record_that_differs_in_computation_timing_trace_or_probe_is_not_reused(tmp_path, change, record_options):
    store = RunStore(tmp_path / "run")
    store.append(stored_record(tmp_path, BASE.replace(label="baseline"), **record_options))
    assert grid_reuse(store)(BASE.replace(label="eager", **change)) is None


def test_a_failed_record_or_one_from_another_machine_is_not_reused(tmp_path):
    store = RunStore(tmp_path / "run")
    failed = stored_record(tmp_path, BASE)
    failed.status, failed.reason = "failed", "out of memory"
    elsewhere = stored_record(tmp_path, BASE)
    elsewhere.environment = elsewhere.environment | {"hostname": "another-host"}
    store.append(failed)
    store.append(elsewhere)
    assert grid_reuse(store)(BASE) is None


def fake_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the measurement by a fake one; the names of the configurations it measured."""
    measured: list[str] = []

    def fake_run(config, isolate=True, notebook="", on_progress=None, extra_env=None):
        measured.append(config.name)
        return stored_record(tmp_path, config)

    monkeypatch.setattr(runner, "run_config", fake_run)
    return measured


GRID = [BASE.replace(label="eager"), BASE.replace(label="eager, packed", padding="packed")]


def test_the_grid_measures_only_what_the_store_lacks_and_stores_each_record_once(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "run")
    store.append(stored_record(tmp_path, BASE.replace(label="baseline")))
    measured = fake_runs(tmp_path, monkeypatch)
    records = run_configs(GRID, store=store, notebook="03", progress=False)
    assert measured == ["eager, packed"]
    assert [r.label for r in records] == ["eager", "eager, packed"] and records[0].reused
    assert [r.label for r in store.load()] == ["baseline", "eager, packed"]  # nothing stored twice


def test_notebook_02s_pattern_reuses_and_its_closing_store_skips_the_reused_record(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "run")
    store.append(stored_record(tmp_path, BASE.replace(label="baseline")))
    measured = fake_runs(tmp_path, monkeypatch)
    records = run_configs(GRID, notebook="02", reuse_from=store, progress=False)  # stored at the end
    assert measured == ["eager, packed"] and len(store.load()) == 1
    store_checked(store, records, "eager")
    assert [r.label for r in store.load()] == ["baseline", "eager, packed"]


def test_without_a_store_nothing_is_reused(tmp_path, monkeypatch):
    measured = fake_runs(tmp_path, monkeypatch)
    run_configs(GRID, progress=False)
    assert measured == ["eager", "eager, packed"]
