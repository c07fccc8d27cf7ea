"""Run configurations, each in its own subprocess, and keep every record (failed ones too).

Isolation means a Liger patch, a compile cache or an out-of-memory error in one configuration
cannot leak into the next one or kill the notebook's kernel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .config import RunConfig
from .results import RunRecord, RunStore


def _child_env(config: RunConfig, extra_env: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "liger" in config.kernels and config.device != "cuda" and not _cuda_available():
        env.setdefault("TRITON_INTERPRET", "1")  # Liger on a CPU: the Triton interpreter
    env.update(extra_env or {})
    return env


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _tail(text: str, lines: int = 6) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:] if line.strip())


def run_isolated(config: RunConfig, notebook: str = "", extra_env: dict[str, str] | None = None) -> RunRecord:
    """Measure one configuration in a fresh Python process; never raises for a failed configuration."""
    label = config.to_dict() | {"label": config.name}
    with tempfile.TemporaryDirectory(prefix="nbhelpers-") as tmp:
        config_path, result_path = Path(tmp) / "config.json", Path(tmp) / "record.json"
        config_path.write_text(config.to_json())
        command = [sys.executable, "-m", "nbhelpers.worker", str(config_path), str(result_path), notebook]
        try:
            done = subprocess.run(
                command, env=_child_env(config, extra_env), capture_output=True, text=True,
                timeout=config.timeout_s, start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return RunRecord.failed(label, f"timed out after {config.timeout_s} s", notebook=notebook)
        if result_path.exists():
            return RunRecord.from_dict(json.loads(result_path.read_text()))
        if done.returncode < 0:
            name = signal.Signals(-done.returncode).name
            hint = " (the host ran out of memory?)" if name == "SIGKILL" else ""
            reason = f"killed by {name}{hint}"
        else:
            reason = f"exited with status {done.returncode}"
        return RunRecord.failed(label, f"{reason}: {_tail(done.stderr)}", notebook=notebook)


def run_config(config: RunConfig, isolate: bool = True, notebook: str = "") -> RunRecord:
    """Measure one configuration: in a subprocess by default, in this process when isolate=False."""
    if isolate:
        return run_isolated(config, notebook)
    from .bench import measure
    from .worker import failure_reason

    try:
        return measure(config, notebook=notebook, progress=True)
    except Exception as error:  # noqa: BLE001 - every failure becomes a record
        return RunRecord.failed(
            config.to_dict() | {"label": config.name}, failure_reason(error), notebook=notebook
        )


def run_configs(
    configs: Iterable[RunConfig],
    store: RunStore | None = None,
    notebook: str = "",
    isolate: bool = True,
    progress: bool = True,
) -> list[RunRecord]:
    """Measure configurations one after another, appending each record to the store as it lands."""
    configs = list(configs)
    iterator: Iterable[RunConfig] = configs
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(configs, desc="configurations", unit="config")
        iterator = bar
    records = []
    for config in iterator:
        if bar is not None:
            bar.set_postfix_str(config.name)
        record = run_config(config, isolate=isolate, notebook=notebook)
        if store is not None:
            store.append(record)
        records.append(record)
    return records
