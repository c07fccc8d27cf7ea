"""A real training run of the recommendation, watched: TRL's SFTTrainer set up as the export sets it up, run for a
number of optimizer steps with :func:`nbhelpers.monitor.attach`, so its interval records (kind "monitor": real
tok/s, MFU, padding, and at each profiler window the kernel launches per step) land in the run for notebook 04.

It runs in its own process (``python -m nbhelpers.monitor.watched_run CONFIG.json``, or on a CPU forked from the
fork server that serves the measurements, which runs :func:`main` in the child), as every measurement does: the
trainer's kernels and memory go with it.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from nbhelpers.analysis.recommend import Recommendation
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_main
from nbhelpers.validation import check_int

from .core import MONITOR_KIND

LOG_EVERY = 4  # steps per monitor interval (a record each)
TAIL = 1500  # characters of a failed run's stderr in its reason
MODULE = "nbhelpers.monitor.watched_run"  # this module, as ``python -m`` names it
OFF = "not measured: set MONITOR_STEPS (e.g. 10) to watch a training run of the recommendation"


def watch_settings(steps: int) -> dict[str, int]:
    """The run's steps, its logging interval and a profiler window every ``2 x LOG_EVERY`` steps (when the run is
    long enough to finish one: a window's warm-up step, then its profiled step)."""
    log_every = min(LOG_EVERY, steps)
    profile_every = 2 * LOG_EVERY if steps >= 2 * LOG_EVERY + 2 else 0
    return {"max_steps": steps, "logging_steps": log_every, "profile_every": profile_every}


def run_watched(config: RunConfig, steps: int, timeout_s: int = 1800) -> str:
    """Train ``config`` (a recommendation's, from the records) with TRL for ``steps`` steps under the monitor in a
    process of its own (forked from the fork server on a CPU, as the measurements are); a line that says what was
    written (or why nothing was). ``steps`` 0: off."""
    check_int("MONITOR_STEPS", steps, 0, 100_000)
    if steps == 0:
        return OFF
    with tempfile.TemporaryDirectory(prefix="nbhelpers-watched-") as tmp:
        path = Path(tmp) / "config.json"
        path.write_text(json.dumps({"config": config.to_dict(), **watch_settings(steps)}))
        done = run_main(config, MODULE, [str(path)], timeout_s)
    if done.status is None:
        return f"the watched run stopped at its limit of {timeout_s} s: {done.stderr[-TAIL:].strip()}"
    if done.status != 0:
        return f"the watched run failed (exit status {done.status}): {done.stderr[-TAIL:].strip()}"
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "the watched run wrote nothing"


def watch_recommendation(rec: Recommendation | None, steps: int, run_name: str) -> str:
    """:func:`run_watched` on the recommendation measured on this machine (``rec``; None: nothing to watch), as
    its TRL export runs it, into ``run_name``; a line."""
    check_int("MONITOR_STEPS", steps, 0, 100_000)
    if steps == 0:
        return OFF
    if rec is None:
        return "not measured: no recommendation was measured on this machine"
    config = RunConfig.from_record(rec.config)
    return run_watched(config.replace(engine="trl", run_name=run_name, label=rec.label, profile=False), steps)


def main(path: str) -> int:
    """In the subprocess: build the trainer, attach the monitor, train, say how many records it wrote."""
    from nbhelpers.measure.worker import quiet_hub

    spec = json.loads(Path(path).read_text())
    config = RunConfig.from_dict(spec["config"])
    quiet_hub(config)  # before transformers and TRL are imported: no telemetry, offline for local workloads

    from nbhelpers.measure.trl_loop import build_sft_trainer, sft_rows
    from nbhelpers.models.loading import resolve_model

    from .callback import attach  # transformers' Trainer: only in this subprocess

    resolved = resolve_model(config.model)  # once, for the rows and the trainer
    with tempfile.TemporaryDirectory(prefix="nbhelpers-watched-trl-") as output_dir:
        tokenizer, rows = sft_rows(config, resolved)
        harness = {"max_steps": spec["max_steps"], "logging_steps": spec["logging_steps"]}
        built = build_sft_trainer(config, output_dir, tokenizer, rows, resolved=resolved, **harness)
        callback = attach(built.trainer, config.run_name, label=f"watched: {config.name}",
                          profile_every=spec["profile_every"], model_name=config.model)  # fmt: skip
        built.trainer.train()
    records = [r for r in callback.monitor.records if r.kind == MONITOR_KIND]
    print(f"{len(records)} monitor record(s) of {spec['max_steps']} TRL steps written to run {config.run_name!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
