"""A fork server on a CPU: one process that has done a configuration's imports forks each configuration's process.

A configuration's process spends about 4 s of a 2-core machine's time on imports (torch, transformers, the model's
modules) and its tokenizer before its first step. On a GPU a spare worker does them while the current
configuration measures (:mod:`nbhelpers.measure.spare`); on a CPU that work would take a core from the measurement
beside it, so it only moves. Here it is done once: the fork server imports, loads the tokenizer and then waits; for
each configuration it forks a child, which runs as ``nbhelpers.measure.worker`` would in a fresh process of its own
(its own session, memory, patches and compile caches: nothing it does reaches the server or the next child). The
server never runs a torch operation, so no thread pool exists when it forks.

It serves only configurations whose environment is the one it started with (the names that differ are said as
for a spare); the hub is offline in it only for workloads that name nothing on the hub (``quiet_hub``), so such
a workload gets a fresh process. ``NBHELPERS_FORK_SERVER``: ``auto`` (default: where CUDA is not available; a GPU
keeps spares) or ``off``. Records say ``worker_process: forked``.

Protocol: the runner writes one JSON job a line on the server's stdin; the server answers ``started PID`` and,
once it has reaped the child, ``exited PID STATUS`` (a negative status: the signal that ended it). A child leads
its own process group (the runner ends it and its compile workers with ``killpg``) and dies with the server. A job
that names a module (``main``: notebook 04's watched run, through ``runner.run_main``) runs that module's
``main(*args)`` in the child instead of the worker, its stdout into the job's ``stdout`` file.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback

from .progress import PROGRESS_VARIABLE
from .spare import die_with_parent, end_group, env_differences, preload

FORK_VARIABLE = "NBHELPERS_FORK_SERVER"
FORK_CHOICES = ("auto", "off")
MODEL_VARIABLE = "NBHELPERS_FORK_SERVER_MODEL"  # the model whose tokenizer the server loads before its first fork
MAX_SERVERS = 1  # servers alive at once (each holds its imports and tokenizer: about 500 MB of its own memory)
MAX_AGE_S = 600.0  # an older server is replaced: the code it imported may have changed since
START_TIMEOUT_S = 300.0  # for the server's imports and the child's start: a server slower than this is not used
REAP_POLL_S = 0.2


def fork_server_wanted(cuda_available: bool) -> bool:
    """Whether configurations are forked from a server: ``$NBHELPERS_FORK_SERVER`` (auto: where CUDA is not
    available)."""
    choice = os.environ.get(FORK_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in FORK_CHOICES:
        raise ValueError(f"{FORK_VARIABLE}={choice!r}: allowed are {', '.join(FORK_CHOICES)}")
    return choice == "auto" and not cuda_available


class ForkedWorker:
    """A configuration's process forked by a server: what the runner uses of a ``subprocess.Popen`` (``pid``,
    ``returncode``, ``wait``). It leads its own process group, so ``os.killpg(pid, ...)`` ends it and its children."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """The exit status once the server has reaped the child; ``subprocess.TimeoutExpired`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            self.returncode = self.server.exit_status(self.pid)
            if self.returncode is not None:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout or 0.0)
            if not self.server.read_events(REAP_POLL_S if left is None else min(REAP_POLL_S, left)):
                if self.server.process.poll() is not None and self.server.exit_status(self.pid) is None:
                    self.returncode = -signal.SIGKILL  # the server died: its children died with it
        return self.returncode


class ForkServer:
    """One started server and the environment it was started with."""

    def __init__(self, env: dict[str, str], model: str = "") -> None:
        self.env = env
        self.born = time.monotonic()
        self.exits: dict[int, int] = {}  # pid: exit status, said by the server and not yet asked for
        self.started: list[int] = []  # pids said by the server and not yet handed to a job
        self._pending = b""
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nbhelpers.measure.zygote"], env=env | {MODEL_VARIABLE: model},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=die_with_parent,
        )  # fmt: skip

    def unusable_because(self, env: dict[str, str]) -> str:
        """Why this server cannot fork a job that wants ``env`` ("" when it can): another environment, it has
        exited, or it is older than :data:`MAX_AGE_S`."""
        if differing := env_differences(self.env, env):
            return f"started with another environment ({', '.join(differing)})"
        if self.process.poll() is not None:
            return f"it had exited (status {self.process.returncode})"
        if time.monotonic() - self.born >= MAX_AGE_S:
            return f"older than {MAX_AGE_S:.0f} s"
        return ""

    def fork(
        self, args: list[str], progress_path: str, stderr_path: str, main: str = "", stdout_path: str = ""
    ) -> ForkedWorker | None:
        """A child running the job, or None when the server cannot: ``nbhelpers.measure.worker`` on ``args``, or
        with ``main`` (a module's name) that module's ``main(*args)``, its stdout into ``stdout_path`` ("": none)."""
        job = {"args": args, "progress": progress_path, "stderr": stderr_path, "main": main, "stdout": stdout_path}
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(job) + "\n").encode())
            self.process.stdin.flush()
        except OSError:
            return None
        deadline = time.monotonic() + START_TIMEOUT_S
        while (pid := self.started.pop(0) if self.started else None) is None:
            left = deadline - time.monotonic()
            if left <= 0 or self.process.poll() is not None:
                return None
            self.read_events(min(1.0, left))
        return ForkedWorker(self, pid)

    def read_events(self, timeout: float) -> bool:
        """Read what the server said within ``timeout``; True when it said anything."""
        assert self.process.stdout is not None
        stdout = self.process.stdout.fileno()
        ready, _, _ = select.select([stdout], [], [], max(0.0, timeout))
        if not ready:
            return False
        chunk = os.read(stdout, 65536)
        if not chunk:
            return False
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            word, *numbers = line.decode().split()
            if word == "started":
                self.started.append(int(numbers[0]))
            elif word == "exited":
                self.exits[int(numbers[0])] = int(numbers[1])
        return True

    def exit_status(self, pid: int) -> int | None:
        return self.exits.pop(pid, None)

    def stop(self) -> None:
        """End the server (its waiting children were ended by the runner; any left die with it)."""
        end_group(self.process)


class ForkServerPool:
    """The servers started in this process: at most one per environment and :data:`MAX_SERVERS` in all (the oldest
    stops first)."""

    def __init__(self) -> None:
        self.servers: list[ForkServer] = []

    def fork(
        self, env: dict[str, str], args: list[str], progress_path: str, stderr_path: str, model: str = "",
        main: str = "", stdout_path: str = "",
    ) -> ForkedWorker | None:  # fmt: skip
        """A child of the server started with ``env`` (started now, loading ``model``'s tokenizer, if none was), or
        None when none could fork; ``main`` and ``stdout_path`` as for :meth:`ForkServer.fork`."""
        server = self.keep(env, model)
        child = server.fork(args, progress_path, stderr_path, main, stdout_path)
        if child is None:
            self.servers.remove(server)
            server.stop()
        return child

    def keep(self, env: dict[str, str], model: str = "") -> ForkServer:
        """The server started with ``env``: a running one, else one started now (loading ``model``'s tokenizer)."""
        for server in list(self.servers):
            if server.process.poll() is not None or server.unusable_because(server.env):  # exited, or too old
                self.servers.remove(server)
                server.stop()
            elif not server.unusable_because(env):
                return server
        server = ForkServer(env, model)
        self.servers.append(server)
        while len(self.servers) > MAX_SERVERS:
            self.servers.pop(0).stop()
        return server

    def start(self, env: dict[str, str], model: str = "") -> bool:
        """Start a server for ``env`` unless one runs; True when one was started."""
        running = any(not s.unusable_because(env) for s in self.servers)
        if not running:
            self.keep(env, model)
        return not running

    def stop_all(self) -> None:
        while self.servers:
            self.servers.pop().stop()


def _run_child(job: dict, server_pid: int) -> None:
    """In the forked child: a process group of its own, the job's stderr (and stdout) and progress file, the worker
    (or the job's module's ``main``); never returns."""
    status = 1
    try:
        os.setpgid(0, 0)  # the server sets it too: whichever runs first, the runner's killpg finds the group
        die_with_parent()
        if os.getppid() != server_pid:  # the server died before the line above could tie this child to it
            os._exit(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        for fd, path in ((1, job.get("stdout")), (2, job["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_APPEND) if path else devnull
            os.dup2(target, fd)
            if target != devnull:
                os.close(target)
        os.close(devnull)
        os.environ[PROGRESS_VARIABLE] = job["progress"]
        if job.get("main"):  # a module run as ``python -m`` runs it: its main on the arguments
            status = importlib.import_module(job["main"]).main(*job["args"])
        else:
            from .worker import run

            status = run(*job["args"])
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child says why on its stderr and exits
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what a fresh process does on its way out (the worker's own handlers)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def serve() -> int:
    """The server's side: the imports and the tokenizer, then fork one child per job line until stdin closes."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # as quiet_hub sets them, before any hub import:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the runner forks only workloads that name nothing on the hub
    preload()
    if model := os.environ.pop(MODEL_VARIABLE, ""):
        try:
            from nbhelpers.data.tokenizer import load_tokenizer
            from nbhelpers.models.loading import resolve_model

            load_tokenizer(resolve_model(model).source)  # cached: each child finds it loaded
        except Exception:  # noqa: BLE001 - the child loads it again and says what is wrong in its record
            pass
    stdin, pending, children, server_pid = sys.stdin.fileno(), b"", set(), os.getpid()
    while True:
        ready, _, _ = select.select([stdin], [], [], REAP_POLL_S)
        if ready:
            chunk = os.read(stdin, 65536)
            if not chunk:
                return 0  # the runner has gone or stopped the server
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in filter(None, lines):
                pid = os.fork()
                if pid == 0:
                    _run_child(json.loads(line), server_pid)
                try:
                    os.setpgid(pid, pid)
                except OSError:  # the child set it already (or has exited)
                    pass
                children.add(pid)
                os.write(1, f"started {pid}\n".encode())
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                os.write(1, f"exited {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


if __name__ == "__main__":
    sys.exit(serve())
