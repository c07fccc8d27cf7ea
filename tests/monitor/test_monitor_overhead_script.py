"""benchmarks/monitor_overhead.py runs end to end on the tiny preset: every arm timed, windows inside blocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_monitor_overhead_script_times_interleaved_blocks(tmp_path):
    out = tmp_path / "overhead.json"
    env = {**os.environ, "NBHELPERS_RUNS": str(tmp_path / "runs"), "PYTHONPATH": str(ROOT)}
    args = ["--rounds", "3", "--block", "4", "--profile-every", "8", "--log-every", "4", "--max-length", "64",
            "--batch-size", "2", "--warmup", "1", "--out", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "monitor_overhead.py"), *args], env=env,
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    arms = result["arms"]
    assert set(arms) == {"plain", "monitor", "windows"} and result["block_steps"] == 4
    assert arms["plain"]["overhead_vs_plain"] == 0 and arms["monitor"]["clean"] == [True] * 3
    # steps numbered from 3 (half a block ahead): block 1 = steps 3-6, block 2 = 7-10 holds the window at 8-9
    assert arms["windows"]["clean"] == [True, False, True] and arms["windows"]["clean_blocks"] == 2
    assert result["windows"]["count"] == 1 and result["windows"]["launches_per_step"] > 100
    assert "with its windows, over all 3 blocks" in done.stdout
    assert (tmp_path / "runs" / "monitor-overhead" / "records.jsonl").is_file()  # nothing outside the runs folder
