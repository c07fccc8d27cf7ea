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


def test_rows_without_loss_tokens_give_a_nan_loss_and_fail(runs_root, tmp_path):
    """A first row whose response is cut off by max_length keeps no loss token: the mean over none is NaN."""
    data = tmp_path / "cut.jsonl"
    rows = [{"prompt": "word " * 60, "response": "cut off"}, {"prompt": "Hi", "response": "Hello there"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.warns(UserWarning, match="no loss tokens after truncation"):
        record = run_config(TINY.replace(dataset=str(data), max_length=32), isolate=False)
    assert record.status == "failed" and record.reason.startswith("non-finite loss: first step nan")
