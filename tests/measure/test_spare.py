"""A spare worker (its imports done beforehand) measures the next configuration exactly as a fresh process would;
it is used only when started with that configuration's environment, and never when it has died."""

from __future__ import annotations

import pytest

from nbhelpers.measure import runner
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.spare import SPARE_VARIABLE, spares_wanted

pytestmark = pytest.mark.slow

TINY = RunConfig(run_name="spare", label="tiny", num_samples=4, batch_size=2, max_length=64, steps=2, warmup=0,
                 extra={"parity_probe_samples": 0})  # fmt: skip


@pytest.fixture
def spares_on(monkeypatch):
    monkeypatch.setenv(SPARE_VARIABLE, "on")
    yield
    runner._stop_spare()


def test_the_second_configuration_runs_in_the_spare_with_the_same_results(spares_on):
    first = runner.run_isolated(TINY)
    second = runner.run_isolated(TINY.replace(label="tiny again"))
    assert first.ok and second.ok, (first.reason, second.reason)
    assert first.metrics["worker_process"] == "fresh" and second.metrics["worker_process"] == "spare"
    assert second.metrics["losses"] == first.metrics["losses"]  # same seed, same batches: the same computation
    assert second.label == "tiny again"


def test_a_spare_started_with_another_environment_or_dead_is_not_used_and_the_record_says_why(spares_on):
    runner.run_isolated(TINY)  # leaves a spare with the plain environment
    other = runner.run_isolated(TINY, extra_env={"NBHELPERS_TEST_MARK": "1"})
    assert other.ok and other.metrics["worker_process"] == "fresh"
    assert other.metrics["spare_unused"] == "started with another environment (NBHELPERS_TEST_MARK)"
    (waiting,) = [s for s in runner._spares.waiting if s.env.get("NBHELPERS_TEST_MARK") == "1"]
    waiting.process.kill()  # the spare this run left behind dies before it is used
    waiting.process.wait()
    after = runner.run_isolated(TINY, extra_env={"NBHELPERS_TEST_MARK": "1"})
    assert after.ok and after.metrics["worker_process"] == "fresh"
    assert after.metrics["spare_unused"].startswith("started with another environment")  # the dead one is gone


def test_a_librarys_private_variable_set_after_the_spare_started_does_not_keep_it_from_serving(spares_on, monkeypatch):
    assert runner.prime_spare()
    monkeypatch.setenv("_PYVIZ_COMMS_INSTALLED", "1")  # what hv.extension() sets in a notebook's process
    first = runner.run_isolated(TINY)
    assert first.ok and first.metrics["worker_process"] == "spare" and "spare_unused" not in first.metrics


def test_a_spare_for_a_named_next_environment_serves_the_configuration_run_with_it(spares_on, tmp_path):
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    first = runner.run_isolated(TINY, next_extra_env=cache)
    assert [s.env["TORCHINDUCTOR_CACHE_DIR"] for s in runner._spares.waiting] == [cache["TORCHINDUCTOR_CACHE_DIR"]]
    second = runner.run_isolated(TINY, extra_env=cache)
    assert first.ok and second.ok and second.metrics["worker_process"] == "spare"
    assert second.metrics["losses"] == first.metrics["losses"]


def test_a_failure_in_a_spare_keeps_its_reason(spares_on, tmp_path):
    runner.run_isolated(TINY)
    failed = runner.run_isolated(TINY.replace(model=str(tmp_path / "no-such-model")))
    assert not failed.ok and failed.reason.startswith("FileNotFoundError: model=")


def test_spares_wanted_reads_its_variable(monkeypatch):
    monkeypatch.setenv(SPARE_VARIABLE, "auto")
    assert spares_wanted(True) and not spares_wanted(False)
    monkeypatch.setenv(SPARE_VARIABLE, "off")
    assert not spares_wanted(True)
    monkeypatch.setenv(SPARE_VARIABLE, "on")
    assert spares_wanted(False)
    monkeypatch.setenv(SPARE_VARIABLE, "sometimes")
    with pytest.raises(ValueError, match="NBHELPERS_SPARE_WORKER='sometimes': allowed are auto, on, off"):
        spares_wanted(True)


def test_a_primed_spare_serves_the_first_configuration(spares_on):
    assert runner.prime_spare() and not runner.prime_spare()  # one spare for one environment
    first = runner.run_isolated(TINY)
    assert first.ok and first.metrics["worker_process"] == "spare"


def test_no_spare_is_primed_where_spares_are_off(monkeypatch):
    monkeypatch.setenv(SPARE_VARIABLE, "off")
    monkeypatch.setenv("NBHELPERS_FORK_SERVER", "off")  # nor a fork server, which a CPU would start instead
    assert not runner.prime_spare() and runner._spares.waiting == [] and runner._fork_servers.servers == []


def test_spares_for_two_environments_wait_side_by_side_and_each_serves_its_own(spares_on, tmp_path):
    cold = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold")}
    assert runner.prime_spare() and runner.prime_spare(cold) and not runner.prime_spare(cold)
    plain = runner.run_isolated(TINY)  # takes the plain spare; the cold one keeps waiting
    in_cold = runner.run_isolated(TINY, extra_env=cold)
    assert plain.metrics["worker_process"] == in_cold.metrics["worker_process"] == "spare"
    assert len(runner._spares.waiting) <= 2
    oldest = runner._spares.waiting[0]
    assert runner.prime_spare({"NBHELPERS_TEST_MARK": "a"}) and runner.prime_spare({"NBHELPERS_TEST_MARK": "b"})
    assert len(runner._spares.waiting) == 2 and oldest.process.poll() is not None  # the oldest was stopped
