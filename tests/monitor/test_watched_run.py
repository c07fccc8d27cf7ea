"""Notebook 04's watched run: the recommendation as its TRL export runs it, under the monitor, in a subprocess."""

from __future__ import annotations

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunStore
from nbhelpers.monitor import MONITOR_KIND
from nbhelpers.monitor.watched_run import OFF, run_watched, watch_recommendation, watch_settings
from nbhelpers.validation import ConfigError


def test_watch_settings_log_every_4_and_profile_where_a_window_fits():
    assert watch_settings(12) == {"max_steps": 12, "logging_steps": 4, "profile_every": 8}
    assert watch_settings(3) == {"max_steps": 3, "logging_steps": 3, "profile_every": 0}
    assert watch_settings(9)["profile_every"] == 0  # a window at step 8 would not finish


def test_nothing_runs_without_steps_or_a_local_recommendation():
    assert watch_recommendation(None, 0, "w") == OFF and run_watched(RunConfig(run_name="w"), 0) == OFF
    assert watch_recommendation(None, 5, "w") == "not measured: no recommendation was measured on this machine"
    with pytest.raises((ConfigError, ValueError), match="MONITOR_STEPS"):
        watch_recommendation(None, -1, "w")


@pytest.mark.slow
def test_a_watched_trl_run_writes_a_monitor_record_every_4_steps_with_a_profiler_window(runs_root):
    pytest.importorskip("trl")
    config = RunConfig(run_name="watched", label="rec", model="qwen3-tiny", batch_size=2, max_length=64,
                       num_samples=8, padding="packed", device="cpu", engine="trl")  # fmt: skip
    line = run_watched(config, 12)
    assert line == "3 monitor record(s) of 12 TRL steps written to run 'watched'", line
    stored = RunStore.for_run("watched").load()
    assert [r.kind for r in stored] == [MONITOR_KIND] * 3 and [r.metrics["step"] for r in stored] == [4, 8, 12]
    assert all(r.config["source"] == "trainer" and r.metrics["real_tokens_per_s"] > 0 for r in stored)
    assert {r.config["model"] for r in stored} == {"qwen3-tiny"}  # the preset's name, not the model type "qwen3"
    assert stored[-1].metrics.get("launches_per_step") is not None  # the window at steps 8-9 was profiled


def test_notebook_04s_imports_leave_transformers_and_peft_to_the_processes_that_train():
    """The report notebook's own process shows records; importing its helpers must not cost it transformers'
    Trainer and PEFT (seconds on a GPU machine): they load in the watched run's subprocess."""
    import subprocess
    import sys

    code = (
        "import sys; import nbhelpers.views.monitor_plots, nbhelpers.monitor.watched_run, nbhelpers.monitor; "
        "print(sorted(m for m in ('transformers', 'peft', 'trl') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    from nbhelpers.monitor import MonitorCallback, attach  # still there, loaded on first use

    assert callable(attach) and MonitorCallback.__name__ == "MonitorCallback"
