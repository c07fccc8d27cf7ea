"""TRL's peer rows time as many epochs as the floor of timed steps needs, counted in TRL's own batches (its
collator pads or packs in its own way), and on a GPU the export row's floor is at least 16 timed steps."""

from __future__ import annotations

import dataclasses

import pytest

from nbhelpers.analysis.peers import PEER_MIN_TIMED_STEPS, peer_configs
from nbhelpers.analysis.recommend import Recommendation
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_configs
from nbhelpers.measure.trl_loop import timed_epochs

pytestmark = pytest.mark.slow


def test_timed_epochs_reach_the_floor_in_the_trainers_steps():
    config = RunConfig(min_timed_steps=16)
    assert timed_epochs(config, 4) == 4 and timed_epochs(config, 5) == 4 and timed_epochs(config, 16) == 1
    assert timed_epochs(config, 1) == 16 and timed_epochs(config, 1, most=10) == 10


def test_a_trl_defaults_row_times_its_own_batches_to_the_floor_not_the_workbooks_plan(runs_root):
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    # the workload's token budget plans its own steps; TRL's defaults pad 2 samples a row: 4 steps an epoch
    config = RunConfig(run_name="trl-epochs", label="defaults", engine="trl_defaults", num_samples=8, batch_size=2,
                       max_length=64, padding="token_budget", timing="epoch", min_timed_steps=6)  # fmt: skip
    (record,) = run_configs([config], isolate=False, progress=False)
    assert record.ok, record.reason
    assert record.metrics["timed_steps"] == 8  # two timed epochs of TRL's 4 steps: the floor of 6, no more


def test_on_a_gpu_the_export_row_rests_on_at_least_16_timed_steps_the_other_peers_on_the_workloads_floor():
    workload = RunConfig(run_name="r", label="pick", kernels="eager", padding="token_budget", min_timed_steps=10)
    rec = Recommendation(
        label="pick", machine="m", run_name="r", record_id="x", config=workload.to_dict(), device_type="cuda",
        real_tokens_per_s=1.0, peak_memory_gib=None, mfu=None, speedup=1.0, baseline_label="b", parity="pass",
        candidates=1,
    )  # fmt: skip
    configs = peer_configs(rec, "trl,trl_defaults,trl_best")
    assert [c.engine for c in configs] == ["trl", "trl_defaults", "trl_best"]
    assert [c.min_timed_steps for c in configs] == [PEER_MIN_TIMED_STEPS, 10, 10] and PEER_MIN_TIMED_STEPS == 16
    on_cpu = peer_configs(dataclasses.replace(rec, device_type="cpu"), "trl,trl_defaults")
    assert [c.min_timed_steps for c in on_cpu] == [10, 10]  # the 5% goal is a GPU's: the workload's floor


def test_a_profiled_peer_row_profiles_one_more_epoch_and_times_the_same_steps(runs_root):
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    config = RunConfig(run_name="trl-profiled", label="defaults", engine="trl_defaults", num_samples=8, batch_size=2,
                       max_length=64, timing="epoch", min_timed_steps=6)  # fmt: skip
    plain, profiled = run_configs([config, config.replace(label="profiled", profile=True)], isolate=False,
                                  progress=False)  # fmt: skip
    assert plain.ok and profiled.ok, (plain.reason, profiled.reason)
    same = ("timed_steps", "timed_batch_shapes", "timed_real_tokens", "loss_first")
    assert {k: profiled.metrics[k] for k in same} == {k: plain.metrics[k] for k in same}  # the profiled epoch is extra
    # TRL's linear schedule spans the extra epoch, so later losses move a little; the steps' work does not
    assert len(profiled.metrics["losses"]) == len(plain.metrics["losses"])
    assert "trace_launches_per_step" not in plain.metrics and "trace" not in plain.artifacts
    m = profiled.metrics
    assert m["kernels_per_step"] == m["trace_launches_per_step"] > 0  # a CPU trace: aten ops of one TRL step
    assert m["trace_model_flops_per_step"] > 0 and profiled.artifacts["trace"].endswith(".trace.json.gz")
    assert (runs_root / "trl-profiled" / "traces").is_dir()
