"""The fork server on a CPU: a configuration's process forked from a server that did the imports measures exactly
what a fresh process measures, ends as a fresh one would (a time-out, a kill, the server's death), and is used only
for configurations run with the run's own environment."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nbhelpers.measure import runner, zygote
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.zygote import FORK_VARIABLE, fork_server_wanted

TINY = RunConfig(run_name="zygote", label="tiny", num_samples=4, batch_size=2, max_length=64, steps=2, warmup=0,
                 extra={"parity_probe_samples": 0})  # fmt: skip


@pytest.fixture
def forking(monkeypatch):
    monkeypatch.setenv(FORK_VARIABLE, "auto")
    monkeypatch.setenv("NBHELPERS_SPARE_WORKER", "auto")
    monkeypatch.setattr(runner, "_cuda_available", lambda: False)
    yield
    runner._stop_spare()


def test_fork_server_wanted_reads_its_variable(monkeypatch):
    monkeypatch.setenv(FORK_VARIABLE, "auto")
    assert fork_server_wanted(cuda_available=False) and not fork_server_wanted(cuda_available=True)
    monkeypatch.setenv(FORK_VARIABLE, "off")
    assert not fork_server_wanted(cuda_available=False)
    monkeypatch.setenv(FORK_VARIABLE, "always")
    with pytest.raises(ValueError, match="NBHELPERS_FORK_SERVER='always': allowed are auto, off"):
        fork_server_wanted(cuda_available=False)


def test_only_a_one_process_local_workload_in_the_runs_own_environment_is_forked(forking, monkeypatch):
    assert runner._forkable(TINY, None) and runner._forkable(TINY, {})
    assert not runner._forkable(TINY, {"TORCHINDUCTOR_CACHE_DIR": "/tmp/cold"})  # a startup row: its start counts
    assert not runner._forkable(TINY.replace(model="Qwen/Qwen3-0.6B"), None)  # the hub: the server is offline
    assert not runner._forkable(TINY.replace(engine="unsloth"), None)  # an engine with imports of its own first
    monkeypatch.setenv(FORK_VARIABLE, "off")
    assert not runner._forkable(TINY, None)


@pytest.mark.slow
def test_a_forked_configuration_measures_what_a_fresh_one_does(forking, monkeypatch):
    monkeypatch.setenv(FORK_VARIABLE, "off")
    fresh = runner.run_isolated(TINY)
    monkeypatch.setenv(FORK_VARIABLE, "auto")
    first = runner.run_isolated(TINY.replace(label="first forked"))
    second = runner.run_isolated(TINY.replace(label="second forked"))
    assert fresh.ok and first.ok and second.ok, (fresh.reason, first.reason, second.reason)
    assert fresh.metrics["worker_process"] == "fresh"
    assert first.metrics["worker_process"] == second.metrics["worker_process"] == "forked"
    assert first.metrics["losses"] == second.metrics["losses"] == fresh.metrics["losses"]  # same computation
    assert second.label == "second forked" and len(runner._fork_servers.servers) == 1  # one server served both
    # the server's imports and tokenizer are not the child's: its build and data phases are shorter than fresh's
    assert second.metrics["phase_s"]["data"] < fresh.metrics["phase_s"]["data"]


@pytest.mark.slow
def test_a_startup_row_run_with_its_own_cache_starts_fresh(forking, tmp_path):
    cold = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    record = runner.run_isolated(TINY, extra_env=cold)
    assert record.ok and record.metrics["worker_process"] == "fresh"
    assert runner._fork_servers.servers == []


@pytest.mark.slow
def test_a_forked_configuration_past_its_limit_is_a_failed_record_and_the_server_serves_the_next(forking):
    assert runner.prime_spare() and not runner.prime_spare()  # the server starts beside the notebook, once
    slow = runner.run_isolated(TINY.replace(label="too slow", steps=10_000, timeout_s=20))
    assert not slow.ok and slow.reason.startswith("timed out after 20 s"), slow.reason
    after = runner.run_isolated(TINY)
    assert after.ok and after.metrics["worker_process"] == "forked"


def _long_job(tmp_path, name: str) -> list[str]:
    """A worker's arguments for a configuration that runs far past the test (it is killed first)."""
    config = tmp_path / f"{name}.json"
    config.write_text(TINY.replace(label=name, steps=100_000).to_json())
    return [str(config), str(tmp_path / f"{name}-record.json"), ""]


@pytest.mark.slow
def test_a_killed_child_and_a_dead_server_end_as_a_fresh_process_would(forking, tmp_path):
    server = runner._fork_servers.keep(runner._child_env(TINY, None), TINY.model)
    failing = server.fork(["only-one-argument"], os.devnull, os.devnull)  # the worker fails at once: status 1
    assert failing is not None and failing.wait(timeout=120) == 1
    killed = server.fork(_long_job(tmp_path, "killed"), os.devnull, os.devnull)
    assert killed is not None
    with pytest.raises(subprocess.TimeoutExpired):
        killed.wait(timeout=1.0)  # still running
    os.killpg(killed.pid, signal.SIGKILL)  # it leads its own group, as the runner kills it
    assert killed.wait(timeout=60) == -signal.SIGKILL
    orphan = server.fork(_long_job(tmp_path, "orphan"), os.devnull, os.devnull)
    assert orphan is not None
    server.stop()
    assert orphan.wait(timeout=60) == -signal.SIGKILL  # told by the server's end, not a hang
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(orphan.pid):
        time.sleep(0.2)
    assert not _alive(orphan.pid)  # it died with its server
    assert server.unusable_because(server.env).startswith("it had exited")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_server_older_than_its_age_limit_is_replaced_and_stopped(forking):
    """A server imported the code as it was when it started: after MAX_AGE_S a new one serves (edited code shows)."""
    env = runner._child_env(TINY, None)
    old = runner._fork_servers.keep(env, TINY.model)
    assert runner._fork_servers.keep(env, TINY.model) is old  # young: kept
    old.born -= zygote.MAX_AGE_S
    assert old.unusable_because(env) == f"older than {zygote.MAX_AGE_S:.0f} s"
    new = runner._fork_servers.keep(env, TINY.model)
    assert new is not old and runner._fork_servers.servers == [new]
    assert old.process.poll() is not None  # stopped, not left holding its memory


ECHO_MAIN = """import os, sys, time


def main(*args):
    print("main", *args)
    print("to stderr", file=sys.stderr)
    if args and args[0] == "sleep":
        time.sleep(60)
    return 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
"""


def test_a_modules_main_runs_forked_as_it_would_fresh_and_stops_at_its_limit(forking, tmp_path, monkeypatch):
    """What notebook 04's watched run uses: ``python -m MODULE ARGS`` for a configuration, forked where the
    configuration is forkable (the module's ``main(*args)`` in the child), with the same status and output."""
    (tmp_path / "echo_main.py").write_text(ECHO_MAIN)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    forked = runner.run_main(TINY, "echo_main", ["a", "b"], timeout_s=120)
    stopped = runner.run_main(TINY, "echo_main", ["sleep"], timeout_s=2)
    monkeypatch.setenv(FORK_VARIABLE, "off")
    fresh = runner.run_main(TINY, "echo_main", ["a", "b"], timeout_s=120)
    for done, how in ((forked, "forked"), (fresh, "fresh")):
        assert (done.how, done.status) == (how, 3), done
        assert done.stdout == "main a b\n" and done.stderr == "to stderr\n", done
    assert stopped.how == "forked" and stopped.status is None and "to stderr" in stopped.stderr
