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


def test_the_2b_pick_suite_changes_one_setting_a_row_on_the_same_samples():
    baseline, pick, varlen, fused, larger = suite_named("hybrid/qwen3.5-2b/lora/lora-2b-pick-256").rows(None)
    assert {row.num_samples for row in (baseline, pick, varlen, fused)} == {256}
    assert (baseline.kernels, pick.kernels) == ("eager", "fla+liger") and baseline.profile and not pick.profile
    assert varlen.replace(attn_implementation="sdpa", label=pick.label, profile=False) == pick
    assert (pick.attn_implementation, varlen.attn_implementation) == ("sdpa", "torch_varlen") and varlen.profile
    assert fused.replace(lora_epilogue="peft", label=varlen.label) == varlen and fused.lora_epilogue == "fused"
    assert larger.replace(token_budget=fused.token_budget, label=fused.label, profile=True) == fused
    assert larger.token_budget == 16384 and larger.token_budget > pick.padding_settings.token_budget


def test_the_short_2b_varlen_suite_keeps_the_reference_for_its_parity_probe_only():
    probe, varlen, fused = suite_named("hybrid/qwen3.5-2b/lora/lora-2b-varlen-256").rows(None)
    _, _, full_varlen, full_fused, _ = suite_named("hybrid/qwen3.5-2b/lora/lora-2b-pick-256").rows(None)
    assert (varlen, fused) == (full_varlen, full_fused)
    assert probe.kernels == "eager" and probe.num_samples == 256
    assert (probe.timing, probe.steps, probe.warmup, probe.profile) == ("steps", 1, 0, False)
