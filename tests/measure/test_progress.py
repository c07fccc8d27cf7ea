"""A configuration's process tells the notebook's where it is: the progress file, and the runner's bar fed by it."""

from __future__ import annotations

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.progress import (
    PLAIN_BARS_VARIABLE,
    PROGRESS_VARIABLE,
    Progress,
    ProgressReader,
    notebook_line,
    read_progress,
    report_progress,
)
from nbhelpers.measure.runner import ConfigBar, run_isolated, timeout_reason


def test_a_report_is_read_back_and_nothing_is_written_unasked(tmp_path, monkeypatch):
    path = tmp_path / "progress.txt"
    monkeypatch.delenv(PROGRESS_VARIABLE, raising=False)
    report_progress("timed pass 1", 1, 4)
    assert read_progress(path) is None and not list(tmp_path.iterdir())
    monkeypatch.setenv(PROGRESS_VARIABLE, str(path))
    report_progress("timed pass 1", 3, 4)
    assert read_progress(path) == Progress("timed pass 1", 3, 4)
    monkeypatch.setenv("RANK", "1")  # under torchrun only rank 0 speaks
    report_progress("timed pass 2", 1, 4)
    assert read_progress(path) == Progress("timed pass 1", 3, 4)
    path.write_text("torn")
    assert read_progress(path) is None


def test_the_reader_hands_on_every_line_once_and_waits_for_a_line_being_written(tmp_path, monkeypatch):
    path = tmp_path / "progress.txt"
    monkeypatch.setenv(PROGRESS_VARIABLE, str(path))
    reader = ProgressReader(path)
    assert reader.new() == []  # nothing written yet
    for phase, done in [("untimed", 1), ("timed pass 1", 1), ("timed pass 1", 2)]:
        report_progress(phase, done, 2)
    assert reader.new() == [Progress("untimed", 1, 2), Progress("timed pass 1", 1, 2), Progress("timed pass 1", 2, 2)]
    with open(path, "a", encoding="utf-8") as log:
        log.write("parity pro")
    assert reader.new() == []
    with open(path, "a", encoding="utf-8") as log:
        log.write("be\t0\t0\n")
    assert reader.new() == [Progress("parity probe", 0, 0)]


def test_a_subprocess_measurement_reports_its_phases_and_steps_as_it_goes(runs_root):
    config = RunConfig(run_name="progress", model="qwen3-tiny", num_samples=4, batch_size=2, max_length=128,
                       steps=2, warmup=1, padding="dynamic", device="cpu")  # fmt: skip
    seen: list[Progress] = []
    record = run_isolated(config, on_progress=seen.append)
    assert record.ok, record.reason
    phases = [p.phase for p in seen]
    assert "building the model" in phases and "timed pass 1" in phases
    timed = [p for p in seen if p.phase == "timed pass 1"]
    assert all(0 < p.done <= p.total == 2 for p in timed)


def test_the_bar_shows_the_phase_and_its_steps():
    bar = ConfigBar("eager/static")
    bar(Progress("timed pass 1", 1, 3))
    assert (bar.bar.n, bar.bar.total) == (1, 3) and "timed pass 1" in str(bar.bar)
    bar.close()


def test_a_batch_runs_bar_is_text_with_its_label_steps_time_spent_and_time_left(monkeypatch, capsys):
    """Under a fake clock: 2 of 4 steps in 10 s leaves 10 s (tqdm's estimate from the rate), printed as text, the
    last state being what a saved notebook shows."""
    import tqdm.std

    clock = iter([100.0, 100.0, 110.0, 110.0, 110.0, 110.0, 110.0, 110.0])
    monkeypatch.setattr(tqdm.std, "time", lambda: next(clock, 110.0))
    monkeypatch.setenv(PLAIN_BARS_VARIABLE, "1")
    bar = ConfigBar("liger, packed")
    assert type(bar.bar) is tqdm.std.tqdm  # not a widget: its text is what the saved notebook keeps
    bar(Progress("timed pass 1", 2, 4))
    bar.close()
    last = capsys.readouterr().err.split("\r")[-2]  # the last drawn state, before the bar is cleared
    assert last.startswith("liger, packed: 2/4 steps [00:10<00:10, timed pass 1]"), last


def test_the_run_level_bar_writes_each_notebooks_outcome_and_time():
    ok = {"point": "default", "notebook": "01_baseline_profile.ipynb", "status": "ok", "duration_s": 40.04, "error": ""}
    failed = ok | {"notebook": "02_kernel_swap_in.ipynb", "status": "failed", "duration_s": 3.0,
                   "error": "PapermillExecutionError\nmore"}  # fmt: skip
    assert notebook_line(ok) == "default / 01_baseline_profile.ipynb: ok in 40.0 s"
    assert notebook_line(failed) == "default / 02_kernel_swap_in.ipynb: failed in 3.0 s: PapermillExecutionError"


def test_a_time_out_says_where_the_configuration_stopped_and_what_it_printed(tmp_path):
    path = tmp_path / "progress.txt"
    path.write_text("starting\t0\t0\nloading with Unsloth\t0\t1\n")
    stderr = "Unsloth: patching\r10%|#| 1/10 [00:01<00:09]\nwaiting for the compile workers\n"
    reason = timeout_reason(600, read_progress(path), stderr)
    assert reason == ("timed out after 600 s in 'loading with Unsloth' (0/1): "
                      "Unsloth: patching | waiting for the compile workers")  # fmt: skip
    assert timeout_reason(1, None, "") == "timed out after 1 s"  # nothing reported, nothing printed
    assert timeout_reason(1, Progress("saving the preset", 0, 0), "") == "timed out after 1 s in 'saving the preset'"
