"""The GPU jobs' runner script: one job at a time, so a second job never shares the GPU or the console."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_job.sh"


def job_script(*args: str, job: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEVICE_JOB_DIR": str(job), "OUT": str(out)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def test_a_second_start_is_refused_while_the_first_job_runs(tmp_path):
    job, out = tmp_path / "job", tmp_path / "out"
    out.mkdir()
    assert job_script("start", "sleep", "300", job=job, out=out).returncode == 0
    pid = int((job / "pid").read_text())
    try:
        second = job_script("start", "true", job=job, out=out)
        assert second.returncode == 4
        assert f"a job is still running (pid {pid})" in second.stderr
        assert not (job / "rc").exists()  # the first job's status file was left alone
    finally:
        os.killpg(pid, signal.SIGKILL)  # setsid: the job leads its own process group
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    third = job_script("start", "true", job=job, out=out)
    assert third.returncode == 0, third.stderr


def test_a_finished_job_leaves_its_status_and_the_next_one_may_start(tmp_path):
    job, out = tmp_path / "job", tmp_path / "out"
    out.mkdir()
    assert job_script("start", "bash", "-c", "echo hello; exit 7", job=job, out=out).returncode == 0
    waited = job_script("wait", "60", job=job, out=out)
    assert waited.returncode == 0 and "job ended: status 7" in waited.stdout
    assert (job / "console.log").read_text().strip() == "hello"
    assert job_script("start", "true", job=job, out=out).returncode == 0
