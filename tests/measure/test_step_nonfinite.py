"""A measured step whose loss is NaN or infinite is a failed record with its reason, never an ok one."""

from __future__ import annotations

import json
import math

import pytest

from nbhelpers.measure import step as step_module
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_config

TINY = RunConfig(run_name="nonfinite", batch_size=1, max_length=64, num_samples=2, steps=2, warmup=1, padding="static")


def test_check_finite_losses_names_every_bad_step():
    step_module.check_finite_losses([("first step", 1.0), ("timed step 1", 2.5)])  # finite: nothing raised
    with pytest.raises(step_module.NonFiniteLoss, match=r"^non-finite loss: timed step 2 nan, timed step 3 inf$"):
        step_module.check_finite_losses([("timed step 1", 1.0), ("timed step 2", math.nan), ("timed step 3", math.inf)])


@pytest.mark.parametrize(("bad_call", "named"), [(0, "first step nan"), (2, "timed step 1 nan")])
def test_a_nan_loss_fails_the_record(runs_root, monkeypatch, bad_call, named):
    real_make_step = step_module.make_step

    def make_step(*args, **kwargs):
        real = real_make_step(*args, **kwargs)
        calls = []

        def step(batch):
            loss, grad_norm = real(batch)
            calls.append(None)
            return (loss * math.nan if len(calls) - 1 == bad_call else loss), grad_norm

        return step

    monkeypatch.setattr(step_module, "make_step", make_step)
    record = run_config(TINY, isolate=False)
    assert record.status == "failed" and not record.ok
    assert record.reason.startswith("non-finite loss: ") and named in record.reason
    assert "real_tokens_per_s" not in record.metrics


def test_finite_losses_stay_ok(runs_root):
    record = run_config(TINY, isolate=False)
    assert record.ok, record.reason
    assert all(math.isfinite(v) for v in record.metrics["losses"])


def _cut_data(tmp_path, rows):
    data = tmp_path / "cut.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "response": r}) + "\n" for p, r in rows))
    return str(data)


LONG, SHORT = ("word " * 60, "cut off"), ("Hi", "Hello there")


def test_a_batch_without_loss_tokens_fails_before_the_model_is_built(runs_root, tmp_path, monkeypatch):
    """A first batch whose only row loses its response to max_length has no loss token (its loss would be NaN):
    the record names the batch, its rows and max_length, and no model is built."""

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(step_module, "build_for", no_build)
    with pytest.warns(UserWarning, match="no loss tokens after truncation"):
        record = run_config(TINY.replace(dataset=_cut_data(tmp_path, [LONG, SHORT]), max_length=32), isolate=False)
    assert record.status == "failed"
    assert "the first step's batch (rows 1) has no loss tokens after truncation to max_length=32" in record.reason
    assert "1 of 2 batches" in record.reason and "--max-length" in record.reason
    assert "non-finite" not in record.reason


def test_a_later_batch_without_loss_tokens_is_named(runs_root, tmp_path):
    with pytest.warns(UserWarning, match="no loss tokens after truncation"):
        record = run_config(TINY.replace(dataset=_cut_data(tmp_path, [SHORT, LONG]), max_length=32), isolate=False)
    assert record.status == "failed" and "batch 2 (rows 2) has no loss tokens" in record.reason


def test_a_row_without_loss_tokens_beside_one_with_some_still_trains(runs_root, tmp_path):
    """Only a batch with no loss token at all is refused: a cut-off row that shares its batch trains (a warning)."""
    config = TINY.replace(dataset=_cut_data(tmp_path, [LONG, SHORT]), max_length=32, batch_size=2)
    with pytest.warns(UserWarning, match="1 of 2 example"):
        record = run_config(config, isolate=False)
    assert record.ok, record.reason
    assert all(math.isfinite(v) for v in record.metrics["losses"])


def test_check_loss_tokens_counts_every_empty_batch():
    step_module.check_loss_tokens(TINY, [[0], [1]], [3, 1])  # every batch has loss tokens: nothing raised
    rows = [list(range(10)), [10], [11]]
    with pytest.raises(ValueError, match=r"the first step's batch \(rows 1, 2, 3, 4, 5, 6, 7, 8, \.\.\.\) .*\(2 of 3"):
        step_module.check_loss_tokens(TINY, rows, [0, 4, 0])
