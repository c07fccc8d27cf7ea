"""A spare worker: the next configuration's process, started while the current one measures.

Every configuration runs in a fresh process (a patch, a cache or an out-of-memory error cannot leak), and each
such process spends seconds importing torch and transformers and creating its CUDA context before its first
step (measured on an H200: a bare start with those imports and the device 7.9 s; the data phase, which also
imports, 8.6-14.3 s of a 29-39 s grid row). A spare is such a process that has done its imports and created its
CUDA context and nothing else (no patch, no model, no kernel cache touched); it waits on its stdin for one job.
The runner hands it the next configuration started with the same environment and starts another spare while
that one measures. A spare serves once and exits.

``NBHELPERS_SPARE_WORKER``: ``auto`` (default: spares where CUDA is available; on a CPU the imports would take
cores from the measurement running beside them), ``on`` or ``off``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from .progress import PROGRESS_VARIABLE

SPARE_VARIABLE = "NBHELPERS_SPARE_WORKER"
SPARE_CHOICES = ("auto", "on", "off")
MAX_IDLE_S = 600.0  # an older spare is not used: the code it imported may have changed since
MAX_WAITING = 2  # spares waiting at once (each holds a CUDA context, about half a GiB of the GPU)
PRELOAD = (
    "torch", "transformers", "nbhelpers.measure.worker", "nbhelpers.measure.step",
    "nbhelpers.measure.sequence_parity", "nbhelpers.data.tokenizer",
)  # fmt: skip
PRELOAD_IF_PRESENT = ("transformers.models.qwen3.modeling_qwen3", "transformers.models.qwen3_5.modeling_qwen3_5")


def die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGKILL when the parent dies (no orphan holding a GPU)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def env_differences(started: dict[str, str], wanted: dict[str, str]) -> list[str]:
    """The variables whose values differ between the environment a process ``started`` with and the one a job
    ``wanted``; a library's private variables, named with a leading "_" such as holoviews'
    ``_PYVIZ_COMMS_INSTALLED``, do not count."""
    return sorted(
        name for name in started.keys() | wanted.keys()
        if not name.startswith("_") and started.get(name) != wanted.get(name)
    )  # fmt: skip


def preload() -> None:
    """The imports a configuration's process makes before its first step (:data:`PRELOAD`, and
    :data:`PRELOAD_IF_PRESENT` where installed)."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_IF_PRESENT:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def end_group(process: Any) -> None:
    """End a process that leads its own process group, and everything in that group, then reap it (``process``: a
    ``subprocess.Popen`` or anything with its ``pid`` and ``wait``)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def spares_wanted(cuda_available: bool) -> bool:
    """Whether the runner keeps a spare: ``$NBHELPERS_SPARE_WORKER`` (auto: only where CUDA is available)."""
    choice = os.environ.get(SPARE_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in SPARE_CHOICES:
        raise ValueError(f"{SPARE_VARIABLE}={choice!r}: allowed are {', '.join(SPARE_CHOICES)}")
    return choice == "on" or (choice == "auto" and cuda_available)


class Spare:
    """One started spare process and the environment it was started with."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nbhelpers.measure.spare"], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip

    def unusable_because(self, env: dict[str, str]) -> str:
        """Why this spare cannot run a job that wants ``env`` ("" when it can): it was started with another
        environment (the names that differ, :func:`env_differences`), it has exited, or it is too old."""
        if differing := env_differences(self.env, env):
            return f"started with another environment ({', '.join(differing)})"
        return self.stale_because()

    def stale_because(self) -> str:
        """Why this spare can serve no job at all ("" while it can): it has exited, or it is too old."""
        if self.process.poll() is not None:
            return f"it had exited (status {self.process.returncode})"
        if time.monotonic() - self.started >= MAX_IDLE_S:
            return f"older than {MAX_IDLE_S:.0f} s"
        return ""

    def take(
        self, env: dict[str, str], args: list[str], progress_path: str, stderr_path: str
    ) -> subprocess.Popen | None:
        """Hand the spare one job if it was started with ``env`` and is alive and fresh: its process, else None."""
        if not self.unusable_because(env):
            job = {"args": args, "progress": progress_path, "stderr": stderr_path}
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(json.dumps(job) + "\n")
                self.process.stdin.close()
                return self.process
            except OSError:
                pass
        return None

    def stop(self) -> None:
        """End the spare (and anything it started)."""
        end_group(self.process)


class SparePool:
    """The spares waiting for jobs: at most one per environment and :data:`MAX_WAITING` in all (the oldest stops
    first), so a configuration that will run with another environment (the startup pair's empty kernel cache) can
    have its process ready while others run."""

    def __init__(self) -> None:
        self.waiting: list[Spare] = []

    def take(
        self, env: dict[str, str], args: list[str], progress_path: str, stderr_path: str
    ) -> tuple[subprocess.Popen | None, str]:
        """The process of a waiting spare started with ``env``, handed the job; else None and why the first waiting
        spare could not serve it ("" when none waited)."""
        self._drop_stale()
        for spare in list(self.waiting):
            if not spare.unusable_because(env):
                self.waiting.remove(spare)
                process = spare.take(env, args, progress_path, stderr_path)
                if process is not None:
                    return process, ""
                spare.stop()
                return None, "the spare did not take the job"
        return None, (self.waiting[0].unusable_because(env) if self.waiting else "")

    def keep(self, env: dict[str, str]) -> bool:
        """Have a spare wait with ``env`` (start one unless one does); True when one was started."""
        self._drop_stale()
        if any(not spare.unusable_because(env) for spare in self.waiting):
            return False
        self.waiting.append(Spare(env))
        while len(self.waiting) > MAX_WAITING:
            self.waiting.pop(0).stop()
        return True

    def stop_all(self) -> None:
        """End every waiting spare."""
        while self.waiting:
            self.waiting.pop().stop()

    def _drop_stale(self) -> None:
        for spare in list(self.waiting):
            if spare.stale_because():
                self.waiting.remove(spare)
                spare.stop()


def start_device() -> None:
    """Create the CUDA context now (seconds on an H200), not in the measurement's data phase; a few bytes stay
    cached, nothing else (the context then holds about half a GiB of the GPU while the spare waits). Then read
    what a record says about the machine once (package versions: importlib.metadata scans every installed
    distribution the first time, a second or more), so the record is written without that wait."""
    import torch

    from .env import environment

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda").sum().item()
        torch.cuda.empty_cache()
    environment(device)


def serve() -> int:
    """The spare's side: import, wait for one job on stdin, then run it as ``nbhelpers.measure.worker`` would
    (stderr into the job's file, progress into the job's progress file)."""
    preload()
    start_device()
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the runner ended without a job for this spare
    job = json.loads(line)
    sys.stderr.flush()
    target = os.open(job["stderr"], os.O_WRONLY | os.O_APPEND)
    os.dup2(target, 2)
    os.close(target)
    os.environ[PROGRESS_VARIABLE] = job["progress"]
    from .worker import run

    return run(*job["args"])


if __name__ == "__main__":
    sys.exit(serve())
