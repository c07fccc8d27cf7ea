"""The 2B hybrid's LoRA suite on more samples: the same rows, enough timed steps for the pick."""

from __future__ import annotations

from nbhelpers.bench.hybrid import lora_2b
from nbhelpers.bench.table import suite_named
from nbhelpers.data.strategies import plan_batches
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.measure.step import config_examples
from nbhelpers.models.loading import resolve_model


def test_the_2b_lora_suite_on_256_samples_times_at_least_10_steps_of_the_pick():
    baseline, pick = suite_named("hybrid/qwen3.5-2b/lora/lora-2b-256").rows(None)
    for row, narrow in zip((baseline, pick), lora_2b()):
        assert row.num_samples == 256 and row.replace(num_samples=narrow.num_samples, label=narrow.label) == narrow
    tokenizer = load_tokenizer(resolve_model(pick.model).source)
    lengths = [len(e["input_ids"]) for e in config_examples(pick, tokenizer)]
    assert len(plan_batches(lengths, pick.padding_settings)) >= 10
