"""The Databricks launch: TorchDistributor in local mode on a CPU (pyspark and a Java runtime needed)."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.databricks import run_with_torch_distributor

TINY = RunConfig(run_name="tdist", model="qwen3-tiny", batch_size=2, max_length=48, num_samples=8, padding="packed",
                 steps=2, warmup=0, device="cpu", gpus=2, sharding="fsdp2", timeout_s=1800)  # fmt: skip


def test_without_pyspark_the_record_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark... raises ImportError
    record = run_with_torch_distributor(TINY)
    assert not record.ok and record.reason.startswith("missing package")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None, reason="pyspark is not installed (test extra)")
@pytest.mark.skipif(shutil.which("java") is None, reason="pyspark needs a Java runtime (java not on PATH)")
def test_torch_distributor_local_mode_runs_two_gloo_ranks(runs_root):
    record = run_with_torch_distributor(TINY, local_mode=True)
    assert record.ok, record.reason
    metrics = record.metrics
    assert metrics["world_size"] == 2 and len(metrics["per_rank"]) == 2
    assert record.environment["launcher"] == "TorchDistributor (local_mode=True)"
    assert len(metrics["losses"]) == 3 and all(0 < loss < 20 for loss in metrics["losses"])
