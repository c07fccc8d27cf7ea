"""Loss curves on new batches: enough samples that no step of a curve trains on a batch twice, where the data
holds them, and the whole data set (its plan then repeats) where it does not."""

from __future__ import annotations

import json

import pytest

from nbhelpers.analysis.convergence import convergence_configs
from nbhelpers.analysis.recommend import recommend
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.curve_samples import plan_length, samples_for_steps

STATIC = RunConfig(run_name="curve", model="qwen3-tiny", batch_size=2, max_length=128, num_samples=4, padding="static")


def write_rows(path, count: int) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            handle.write(json.dumps({"prompt": f"question {i} " * 3, "response": f"answer {i} " * 4}) + "\n")
    return str(path)


def test_samples_grow_until_the_plan_has_a_batch_for_every_step():
    assert plan_length(STATIC, 4) == (2, 4, None)  # batch 2: two batches, the curve would repeat them
    samples = samples_for_steps(STATIC, 11)
    batches, given, _ = plan_length(STATIC, samples)
    assert batches >= 11 and given == samples
    assert samples_for_steps(STATIC, 2) == STATIC.num_samples  # enough already: never fewer than asked


def test_a_token_budget_plan_gets_new_batches_too():
    budget = STATIC.replace(padding="token_budget", batch_size=4, num_samples=8)
    samples = samples_for_steps(budget, 6)
    assert plan_length(budget, samples)[0] >= 6 and samples > budget.num_samples


def test_growth_stops_short_of_a_batch_without_loss_tokens(tmp_path):
    """Row 5's prompt fills max_length, so its batch (batch size 1) has no loss token: a curve that took it would
    step on a NaN loss, so the samples stay where every batch the curve steps on can learn."""
    path = tmp_path / "rows.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(20):
            prompt = "word " * (200 if i == 5 else 3)
            handle.write(json.dumps({"prompt": prompt, "response": f"answer {i} " * 4}) + "\n")
    one = STATIC.replace(dataset=str(path), batch_size=1, max_length=48, num_samples=2)
    assert plan_length(one, 20)[2] == 5  # the sixth batch has nothing to learn
    samples = samples_for_steps(one, 12)
    assert one.num_samples <= samples <= 5 and plan_length(one, samples)[2] is None


def test_a_small_data_set_gives_all_it_has(tmp_path):
    small = STATIC.replace(dataset=write_rows(tmp_path / "rows.jsonl", 10))
    assert samples_for_steps(small, 50) == 10  # 5 batches of 2: the curve's plan repeats, as a second epoch would
    with pytest.raises(ValueError, match="steps"):
        samples_for_steps(small, 0)


def test_the_convergence_pair_takes_the_same_grown_samples(make_record):
    rec = recommend([make_record("tb", 100.0, padding="static", kernels="liger", model="qwen3-tiny",
                                 batch_size=2, max_length=128, num_samples=4)])  # fmt: skip
    mine, base = convergence_configs(rec, 12)
    assert mine.num_samples == base.num_samples == samples_for_steps(mine.replace(num_samples=4), 13)
    assert plan_length(mine, mine.num_samples)[0] >= 13


def test_a_curve_steps_each_batch_once_so_packed_and_static_curves_agree(make_record):
    """Packed rows have many shapes; a timed run warms each with an extra optimizer step, a curve must not: its
    steps train on the plan's batches in order, as the static baseline's do, so the two curves differ only by
    summation order."""
    from nbhelpers.measure.runner import run_config

    rec = recommend([make_record("packed", 100.0, padding="packed", kernels="eager", model="qwen3-tiny",
                                 batch_size=2, max_length=128, num_samples=4, device="cpu")])  # fmt: skip
    mine, base = convergence_configs(rec, 5)
    assert mine.padding == "packed" and base.padding == "static"
    packed, static = (run_config(c.replace(learning_rate=1e-3), isolate=False) for c in (mine, base))
    assert packed.ok and static.ok, (packed.reason, static.reason)
    assert packed.metrics["untimed_step_times_s"] == [] == static.metrics["untimed_step_times_s"]
    curve, reference = packed.metrics["losses"], static.metrics["losses"]
    assert len(curve) == len(reference) == 6
    # fp32 on a CPU: the same batches give the same losses up to summation order (1e-6 relative seen); a batch
    # stepped twice at this learning rate moves the later losses by far more than the bound
    assert max(abs(a - b) / abs(b) for a, b in zip(curve, reference)) < 1e-4
