"""Subprocess entry point: ``python -m nbhelpers.measure.worker CONFIG.json RESULT.json [NOTEBOOK]``.

Runs one configuration and writes its RunRecord as JSON; any exception becomes a failed record
with a reason a user can read (out of memory, missing package, no GPU, unavailable backend).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from nbhelpers.models.loading import ResolvedModel, is_local_model, resolve_model
from nbhelpers.validation import ConfigError

from .config import RunConfig
from .engines import ENGINES, UNSLOTH_LOOP, EngineRefusal
from .env import resolve_device, safe_environment
from .host_allocator import host_usage
from .memory_cap import memory_cap
from .memory_plan import MemoryCapExceeded
from .model_fit import model_fit_error
from .parallel import current_rank
from .progress import report_progress
from .store import RunRecord

TRACE_CHARS = 20_000  # the end of a failure's traceback kept in its record (metrics["traceback"])


def failure_reason(error: BaseException) -> str:
    """One line that says why a configuration failed (the whole traceback goes to the record beside it)."""
    text = f"{type(error).__name__}: {error}".strip()
    first_line = text.splitlines()[0] if text else type(error).__name__
    if type(error).__name__ == "OutOfMemoryError" or "out of memory" in text.lower():
        return f"out of memory: {first_line[:300]}"
    if type(error).__name__ == "InterpreterError":  # Triton's CPU interpreter met what only a GPU compiles
        return f"Triton's CPU interpreter cannot run this kernel; it runs on a CUDA GPU ({first_line[:300]})"
    if isinstance(error, EngineRefusal):  # a peer engine's own reason, decided before any work
        return str(error).splitlines()[0][:600]
    if isinstance(error, MemoryCapExceeded):  # the memory planner's reason, decided before any work
        return str(error)
    if isinstance(error, ConfigError):  # a setting the model does not fit, decided before any work
        return str(error)
    if isinstance(error, ImportError):
        return f"missing package: {first_line[:300]}"
    if str(error).startswith(("no GPU", "non-finite loss")):
        return str(error).splitlines()[0][:300]
    return first_line[:400]


def failed_record(config: RunConfig, reason: str, notebook: str = "", trace: str = "") -> RunRecord:
    """A failed record that still says which configuration it was and where it ran; ``trace`` (the formatted
    traceback, its last :data:`TRACE_CHARS` characters) is kept in ``metrics["traceback"]``."""
    return RunRecord.failed(
        config.to_dict() | {"label": config.name}, reason, notebook=notebook,
        environment=safe_environment(config.device), metrics={"traceback": trace[-TRACE_CHARS:]} if trace else {},
    )  # fmt: skip


def attach_probe(record: RunRecord, config: RunConfig, resolved: ResolvedModel | None = None) -> None:
    """Add the parity probe (nbhelpers.measure.sequence_parity) to an ok record; a probe that fails is noted
    in ``metrics["parity_probe"]["error"]`` and leaves the timed measurement as it was. ``resolved``: the model
    the timed step resolved."""
    if not record.ok:
        return
    try:
        from .sequence_parity import parity_probe

        report_progress("parity probe", 0, 0)
        started = time.perf_counter()
        probe = parity_probe(config, resolved)
        record.metrics.setdefault("phase_s", {})["parity_probe"] = round(time.perf_counter() - started, 3)
    except Exception as error:  # noqa: BLE001 - the timing stands; parity then has no probe to compare
        traceback.print_exc(file=sys.stderr)
        probe = {"error": failure_reason(error)}
    if probe is not None:
        record.metrics["parity_probe"] = probe


def measure_config(config: RunConfig, notebook: str = "") -> RunRecord:
    """Measure one configuration in this process with its engine under its memory cap (``gpu_memory_gib``, kept in
    the record's metrics); raises on failure."""
    with memory_cap(config.gpu_memory_gib, resolve_device(config.device), current_rank().local_rank) as cap:
        record = measure_engine(config, notebook)
    record.metrics.update(cap)
    return record


def measure_engine(config: RunConfig, notebook: str = "") -> RunRecord:
    """Measure one configuration in this process with its engine: the workbook's step (with its parity probe),
    TRL's SFTTrainer (its model resolved once for both) or Unsloth; raises on failure."""
    if ENGINES[config.engine].loop == UNSLOTH_LOOP:  # first: Unsloth is imported before anything imports transformers
        from .unsloth_loop import measure_unsloth

        return measure_unsloth(config, notebook=notebook)
    resolved = resolve_model(config.model)
    if (error := model_fit_error(config, resolved.config)) is not None:  # before the model is built
        raise error
    if ENGINES[config.engine].is_trl:
        from .trl_loop import measure_trl

        return measure_trl(config, notebook=notebook, progress=True, resolved=resolved)
    from .step import measure

    record = measure(config, notebook=notebook, progress=True, resolved=resolved)
    attach_probe(record, config, resolved)
    return record


def names_nothing_on_the_hub(config: RunConfig) -> bool:
    """A preset or a local model folder, and the shipped data or a local file: nothing to fetch from the hub."""
    return is_local_model(config.model) and (config.dataset == "default" or Path(config.dataset).expanduser().exists())


def quiet_hub(config: RunConfig) -> None:
    """No call home from a measuring process: the hub's telemetry off (TRL's trainer and transformers look it up),
    and the hub offline when the workload names nothing on it. A variable the user set stays as set."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    if names_nothing_on_the_hub(config):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run(config_path: str, result_path: str, notebook: str = "") -> int:
    config = RunConfig.from_dict(json.loads(Path(config_path).read_text()))
    quiet_hub(config)  # before transformers, TRL or the datasets library is imported here
    try:
        if config.sharding != "none":  # under torchrun: every rank measures, rank 0 writes the merged record
            from .distributed import run_rank

            return run_rank(config, result_path, notebook)
        record = measure_config(config, notebook)
        record.metrics.update(host_usage())  # the host's side of the whole process: page faults, sys and user time
    except BaseException as error:  # noqa: BLE001 - every failure becomes a record
        traceback.print_exc(file=sys.stderr)
        record = failed_record(config, failure_reason(error), notebook, traceback.format_exc())
        if config.sharding != "none":
            from .distributed import rank_file

            result_path = rank_file(result_path)  # each failed rank writes its own
    staging = Path(result_path + ".tmp")
    staging.write_text(json.dumps(record.to_dict(), default=str))
    staging.replace(result_path)
    return 1 if config.sharding != "none" and not record.ok else 0  # torchrun then stops the other ranks


if __name__ == "__main__":
    sys.exit(run(*sys.argv[1:4]))
