"""The GPU machine's one job script: one job at a time, its console and status kept, what it wrote collected."""

from __future__ import annotations

import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_job.sh"


def job_script(*args: str, job: Path, out: Path, collect: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEVICE_JOB_DIR": str(job), "OUT": str(out), "JOB_COLLECT": str(collect), "JOB_WHEELS": ""}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def folders(tmp_path: Path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("job", "out", "collect")}
    paths["out"].mkdir()
    return paths


def test_a_second_start_is_refused_while_the_first_job_runs(tmp_path):
    where = folders(tmp_path)
    assert job_script("start", "0", "sleep", "300", **where).returncode == 0
    pid = int((where["job"] / "pid").read_text())
    try:
        second = job_script("start", "0", "true", **where)
        assert second.returncode == 4
        assert f"a job is still running (pid {pid})" in second.stderr
        assert not (where["job"] / "rc").exists()  # the first job's status file was left alone
    finally:
        os.killpg(pid, signal.SIGKILL)  # setsid: the job leads its own process group
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    third = job_script("start", "0", "true", **where)
    assert third.returncode == 0, third.stderr


def test_a_finished_job_is_collected_with_its_status_and_records(tmp_path):
    where = folders(tmp_path)
    records = where["collect"] / "bench" / "qwen3-tiny" / "q"
    (records / "traces").mkdir(parents=True)
    (records / "traces" / "big.trace.json.gz").write_text("x")
    command = f"echo '[suite] 2 record(s)'; echo line > {records}/rows.jsonl; exit 7"
    started = job_script("start", "60", "bash", "-c", command, **where)
    assert started.returncode == 0, started.stderr
    assert "[suite] 2 record(s)" in started.stdout and "job ended: status 7" in started.stdout
    assert (where["out"] / "console.log").read_text().strip() == "[suite] 2 record(s)"
    with tarfile.open(where["out"] / "runs.tgz") as archive:
        names = archive.getnames()
    assert any(n.endswith("qwen3-tiny/q/rows.jsonl") for n in names) and not any("traces/" in n for n in names)
    waited = job_script("wait", "5", **where)
    assert waited.returncode == 0 and "job ended: status 7" in waited.stdout
    assert job_script("start", "0", "true", **where).returncode == 0


def test_wait_says_when_the_job_still_runs(tmp_path):
    where = folders(tmp_path)
    assert job_script("start", "0", "sleep", "30", **where).returncode == 0
    pid = int((where["job"] / "pid").read_text())
    try:
        waited = job_script("wait", "1", **where)
        assert waited.returncode == 3 and "still running after 1s" in waited.stdout
    finally:
        os.killpg(pid, signal.SIGKILL)


OFFLOAD_THEN_PEERS = SCRIPT.parent / "gpu_offload_then_peers.sh"
FAKE_PYTHON = """#!/usr/bin/env bash
if [[ $1 == -m && $2 == pip ]]; then echo "${@: -$(($# - 2))}" >> "$OUT/pip.log"; exit 0; fi
if [[ $1 == -m && $2 == pytest ]]; then echo "offload tests: $FAKE_TESTS"; [[ $FAKE_TESTS == pass ]]; exit; fi
exit 3
"""


def offload_then_peers(tmp_path: Path, tests: str, *suites: str, commit: str = "0" * 40,
                       folders: tuple[str, ...] = (".whlA2", ".whlB", ".whl", ".whl-ao")):  # fmt: skip
    """The second call's script on a copy of the parts it reads, pip and pytest faked, the suites' runner an echo."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    for script in (SCRIPT, OFFLOAD_THEN_PEERS):
        (repo / "benchmarks" / script.name).write_text(script.read_text())
    (repo / "benchmarks" / "gpu_peers_caps.sh").write_text('echo "[suites] $*"\n')
    for folder in folders:
        (repo / folder).mkdir()
        (repo / folder / "fake-0-py3-none-any.whl").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out), "FAKE_TESTS": tests,
           "DEVICE_JOB_DIR": str(tmp_path / "job"), "JOB_WORKDIR": str(tmp_path / "wb"), "NBHELPERS_COMMIT": commit}
    run = subprocess.run(["bash", str(repo / "benchmarks" / OFFLOAD_THEN_PEERS.name), "30", *suites], env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    return run, out


def test_the_offload_suites_run_only_after_the_offload_tests_pass(tmp_path):
    suites = ("caps/24-gib-offload", "caps/24-gib-offload-unsloth", "caps/79-gib-peers")
    passed, out = offload_then_peers(tmp_path / "a", "pass", *suites)
    assert passed.returncode == 0, passed.stderr
    assert "[suites] runs/bench " + " ".join(suites) in passed.stdout
    assert (out / "offload-tests.log").read_text().strip() == "offload tests: pass"
    failed, out = offload_then_peers(tmp_path / "b", "fail", *suites)
    assert "the offload suites are left out" in failed.stdout
    assert "[suites] runs/bench caps/79-gib-peers" in failed.stdout and "24-gib-offload" not in failed.stdout.split(
        "left out")[1]  # fmt: skip
    assert (out / "console.log").is_file()  # the job's console collected into $OUT


def test_the_offload_script_installs_the_wheel_folders_this_call_carried(tmp_path):
    run, out = offload_then_peers(tmp_path, "pass", "caps/79-gib-peers", folders=(".whl", ".whl-ao"))
    assert run.returncode == 0, run.stderr
    (line,) = (out / "pip.log").read_text().splitlines()  # one install: the upgrade of the two carried folders
    assert "--upgrade .whl/fake-0-py3-none-any.whl .whl-ao/fake-0-py3-none-any.whl" in line and ".whlB" not in line
    assert "[suites] runs/bench caps/79-gib-peers" in run.stdout


def test_the_offload_script_wants_the_commit_before_any_work(tmp_path):
    run, out = offload_then_peers(tmp_path, "pass", "caps/79-gib-peers", commit="")
    assert run.returncode != 0 and "NBHELPERS_COMMIT" in run.stderr
    assert not (tmp_path / "wb").exists() and not (out / "offload-tests.log").exists()
