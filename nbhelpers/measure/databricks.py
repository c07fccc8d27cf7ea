"""The same launch on Databricks: one configuration on N processes through Spark's TorchDistributor.

``pyspark.ml.torch.distributor.TorchDistributor`` starts torchrun itself (on the driver in local mode, on
the executors otherwise) and calls a function on every rank; here that function is the workbook's
worker, so every rank measures its share and rank 0 writes the merged record exactly as under
:mod:`nbhelpers.measure.distributed`. pyspark is imported only when this runs (it needs a Java runtime,
which Databricks clusters have; elsewhere install one, e.g. ``apt-get install openjdk-17-jre-headless``).
TorchDistributor has no timeout of its own: ``config.timeout_s`` bounds the process group's collectives.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .config import RunConfig
from .distributed import rank_failure
from .store import RunRecord
from .worker import failed_record, failure_reason


def rank_entry(config_json: str, folder: str, notebook: str = "") -> int:
    """Runs on every rank under TorchDistributor: the workbook's worker on this configuration."""
    from .worker import run

    config_path = Path(folder) / "config.json"
    if not config_path.exists():
        config_path.write_text(config_json)
    return run(str(config_path), str(Path(folder) / "record.json"), notebook)


def _spark_session(local_mode: bool) -> Any:
    """The active Spark session (Databricks), else a local one with a core per process."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None or not local_mode:
        return active or SparkSession.builder.getOrCreate()
    return SparkSession.builder.master("local[*]").appName("nbhelpers").getOrCreate()


def run_with_torch_distributor(
    config: RunConfig, local_mode: bool = True, use_gpu: bool | None = None, notebook: str = ""
) -> RunRecord:
    """Measure ``config`` on ``config.gpus`` processes through TorchDistributor; a failure is a failed record.

    ``use_gpu`` defaults to the configuration's device (False for ``device="cpu"``, gloo then). In local
    mode the processes run on the driver, as on a single-node Databricks cluster.
    """
    try:
        from pyspark.ml.torch.distributor import TorchDistributor
    except ImportError as error:
        return failed_record(config, failure_reason(error), notebook)
    gpu = use_gpu if use_gpu is not None else config.device != "cpu"
    with tempfile.TemporaryDirectory(prefix="nbhelpers-tdist-") as folder:
        result = Path(folder) / "record.json"
        try:
            _spark_session(local_mode)
            distributor = TorchDistributor(num_processes=config.gpus, local_mode=local_mode, use_gpu=gpu)
            distributor.run(rank_entry, config.to_json(), folder, notebook)
        except Exception as error:  # noqa: BLE001 - every failure becomes a record
            reason = rank_failure(result) or failure_reason(error)
            return failed_record(config, reason, notebook)
        if not result.exists():
            return failed_record(config, rank_failure(result) or "TorchDistributor ended without a record", notebook)
        record = RunRecord.from_dict(json.loads(result.read_text()))
        record.environment["launcher"] = f"TorchDistributor (local_mode={local_mode})"
        return record
