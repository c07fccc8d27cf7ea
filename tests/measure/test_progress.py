"""A configuration's process tells the notebook's where it is: the progress file, and the runner's bar fed by it."""

from __future__ import annotations

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.progress import PROGRESS_VARIABLE, Progress, ProgressReader, read_progress, report_progress
from nbhelpers.measure.runner import ConfigBar, run_isolated


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
