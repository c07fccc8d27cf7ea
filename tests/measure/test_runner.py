"""The isolated runner: a measured success, a failure with its reason, a timeout."""

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.env import detect_platform
from nbhelpers.measure.runner import run_config, run_configs
from nbhelpers.measure.store import RunStore

pytestmark = pytest.mark.slow


def test_success_failure_timeout_in_subprocesses(tmp_path):
    good = RunConfig(run_name="t", label="tiny", num_samples=8, batch_size=2, max_length=64, steps=2, warmup=1)
    bad = good.replace(label="missing model", model=str(tmp_path / "no-such-model"))
    slow = good.replace(label="too slow", timeout_s=1)
    store = RunStore(tmp_path / "records.jsonl")
    records = run_configs([good, bad, slow], store=store, progress=False)
    ok, failed, timed_out = records
    assert ok.ok, ok.reason
    m = ok.metrics
    assert m["positions_per_step"] >= m["real_tokens_per_step"] >= m["loss_tokens_per_step"] > 0
    assert m["real_tokens_per_s"] > 0 and 0 < m["mfu"] < 1
    assert m["step_time_min_s"] <= m["step_time_median_s"] <= m["step_time_max_s"]
    assert m["peak_flops_source"].startswith("measured")
    phases = m["phase_s"]  # where the process's time went, phase by phase, and all of it
    assert list(phases) == ["data", "build", "first_step", "untimed", "timed", "environment", "parity_probe"]
    assert all(v >= 0 for v in phases.values()) and phases["timed"] >= sum(m["step_times_s"]) * 0.99
    assert m["process_s"] >= sum(phases.values())
    assert ok.environment["device_type"] == "cpu"
    assert ok.environment["platform"] == detect_platform()  # inherited from this process, not its own
    assert not failed.ok and failed.reason.startswith("FileNotFoundError: model=") and "no such folder" in failed.reason
    assert not timed_out.ok and timed_out.reason.startswith("timed out after 1 s")
    assert failed.machine == timed_out.machine == ok.machine  # failed records still say where they ran
    assert [r.label for r in store.load()] == ["tiny", "missing model", "too slow"]


def test_gpu_only_option_fails_cleanly_without_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    record = run_config(RunConfig(device="cuda", num_samples=4, steps=1, warmup=0), isolate=False)
    assert not record.ok and record.reason.startswith("no GPU")
    assert record.environment["device_type"] == "cpu" and "unusable" in record.environment["environment_note"]


def _children(parent: int, pattern: str) -> list[int]:
    import subprocess

    found = subprocess.run(["pgrep", "-f", pattern, "-P", str(parent)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def _gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    state = open(f"/proc/{pid}/stat").read().split()[2] if os.path.exists(f"/proc/{pid}/stat") else ""
    return state == "Z"


@pytest.mark.parametrize("fork_server", ["off", "auto"])
def test_worker_dies_with_its_parent(tmp_path, monkeypatch, fork_server):
    """A parent killed by SIGKILL (a notebook kernel, a `timeout`) must not leave its configuration running: a fresh
    worker, or (on a CPU, by default) the fork server and the configuration's process forked from it."""
    import subprocess
    import sys
    import time

    monkeypatch.setenv("NBHELPERS_FORK_SERVER", fork_server)
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from nbhelpers.measure.config import RunConfig\n"
        "from nbhelpers.measure.runner import run_isolated\n"
        "run_isolated(RunConfig(num_samples=8, steps=10_000, warmup=0))\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        workers: list[int] = []
        for _ in range(300):  # a fork server first imports, then forks
            time.sleep(0.2)
            if fork_server == "off":
                workers = _children(parent.pid, "nbhelpers.measure.worker")
            else:
                servers = _children(parent.pid, "nbhelpers.measure.zygote")
                workers = [*servers, *_children(servers[0], "nbhelpers.measure.zygote")] if servers else []
            if len(workers) == (1 if fork_server == "off" else 2):
                break
        assert len(workers) == (1 if fork_server == "off" else 2), f"the worker never started: {workers}"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(pid) for pid in workers):
        time.sleep(0.1)
    assert all(_gone(pid) for pid in workers), f"{[p for p in workers if not _gone(p)]} outlived their parent"


def test_every_configuration_shares_one_kernel_cache_with_autotune_results_kept(tmp_path, monkeypatch):
    from nbhelpers.measure.runner import _child_env

    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TILELANG_CACHE_DIR", "NBHELPERS_KERNEL_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NBHELPERS_RUNS", str(tmp_path / "runs"))
    config = RunConfig(num_samples=4, steps=1, warmup=0)
    env = _child_env(config, None)
    shared = tmp_path / "runs" / ".kernel-cache"
    assert env["TRITON_CACHE_DIR"] == str(shared / "triton") and (shared / "triton").is_dir()
    assert env["TILELANG_CACHE_DIR"] == str(shared / "tilelang")
    assert env["TRITON_CACHE_AUTOTUNING"] == "1"  # the autotuner's choices are kept with the kernels
    assert _child_env(config.replace(label="other"), None)["TRITON_CACHE_DIR"] == env["TRITON_CACHE_DIR"]

    monkeypatch.setenv("NBHELPERS_KERNEL_CACHE", str(tmp_path / "prebuilt"))
    assert _child_env(config, None)["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "prebuilt" / "inductor")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))  # the user's own setting is kept
    assert _child_env(config, None)["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    cold = {"TRITON_CACHE_DIR": str(tmp_path / "cold")}  # a startup measurement's own folder wins
    assert _child_env(config, cold)["TRITON_CACHE_DIR"] == str(tmp_path / "cold")


def test_the_runner_stops_waiting_once_the_record_is_written(tmp_path):
    """A worker whose record is in place is done: its exit (freeing a model, a CUDA context) is not waited for."""
    import subprocess
    import sys

    from nbhelpers.measure.runner import _kill_group, _wait

    result = tmp_path / "record.json"
    script = f"import pathlib, time; pathlib.Path({str(result)!r}).write_text('{{}}'); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        assert _wait(child, 600, tmp_path / "progress.txt", None, result)
        assert child.poll() is None  # still "exiting": the runner did not wait for it
    finally:
        _kill_group(child)
    quiet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        assert not _wait(quiet, 1, tmp_path / "progress.txt", None, tmp_path / "never.json")  # no record: time-out
    finally:
        _kill_group(quiet)


def test_what_inductor_set_in_this_process_does_not_reach_a_configurations_environment(monkeypatch, tmp_path):
    """A compile in the notebook's process (the doctor's probes) sets Inductor's default cache folder and a private
    pointer in os.environ; neither may shadow the shared kernel cache or go stale between a spare and its job."""
    import os

    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from nbhelpers.measure import runner
    from nbhelpers.measure.runner import _child_env, shared_kernel_cache

    monkeypatch.setattr(runner, "_SET_AT_START", frozenset())  # none of them set when this process started
    for name in runner.LIBRARY_SELF_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NBHELPERS_RUNS", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("NBHELPERS_KERNEL_CACHE", raising=False)
    clean = _child_env(RunConfig(), None)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", os.path.abspath(default_cache_dir()))
    monkeypatch.setenv("_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR", "140627185159200")
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/site/torch/bin/ptxas")  # set by Inductor after this process started
    monkeypatch.setenv("KMP_INIT_AT_FORK", "FALSE")
    after_a_compile = _child_env(RunConfig(), None)
    assert after_a_compile == clean
    assert after_a_compile["TORCHINDUCTOR_CACHE_DIR"] == shared_kernel_cache()["TORCHINDUCTOR_CACHE_DIR"]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))  # set by the user: kept
    assert _child_env(RunConfig(), None)["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "mine")
    monkeypatch.setattr(runner, "_SET_AT_START", frozenset({"KMP_INIT_AT_FORK"}))  # the user's own, from the start
    assert _child_env(RunConfig(), None)["KMP_INIT_AT_FORK"] == "FALSE"


def test_each_configuration_leaves_one_line_saying_how_it_went(make_record):
    from nbhelpers.measure.runner import finished_line

    ok = make_record("liger", 7356.4)
    ok.metrics["timed_steps"] = 12
    assert finished_line(ok, 31.84) == "liger: 7,356 real tok/s on 12 timed steps (31.8 s)"
    ok.metrics["host_syncs_per_step"] = 1203  # counted in a profiled step on a GPU
    assert finished_line(ok, 31.84) == (
        "liger: 7,356 real tok/s on 12 timed steps, the host waited 1,203 times in a profiled step (31.8 s)")
    failed = make_record("fa2", None, status="failed", reason="ImportError: flash_attn missing\ntrace")
    assert finished_line(failed, 1.23) == "fa2: failed after 1.2 s: ImportError: flash_attn missing"
    reused = make_record("eager", 5000.0)
    reused.metrics["reused_from"] = {"record_id": "b8c88a7541b2", "notebook": "01_baseline_profile.ipynb"}
    line = finished_line(reused, 0.0, reused=True)
    assert line == "eager: reused, measured earlier by 01_baseline_profile.ipynb (record b8c88a7541b2)"


def test_an_unwritable_shared_kernel_cache_is_said_in_words_once(monkeypatch, tmp_path):
    """Each configuration then compiles again: a warning names the folder and what to set, once per folder."""
    import warnings

    from nbhelpers.measure import runner

    def refuse(env):
        raise PermissionError(13, "Permission denied")

    folder = tmp_path / "read-only-cache"
    monkeypatch.setenv(runner.KERNEL_CACHE_VARIABLE, str(folder))
    monkeypatch.setattr(runner, "make_cache_folders", refuse)
    monkeypatch.setattr(runner, "_UNWRITABLE_SAID", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert runner.shared_kernel_cache() == {} and runner.shared_kernel_cache() == {}
    [warning] = caught
    text = str(warning.message)
    assert str(folder) in text and "Permission denied" in text and runner.KERNEL_CACHE_VARIABLE in text
