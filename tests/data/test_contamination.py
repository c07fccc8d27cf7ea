"""Packed vs padded per-sequence loss on a tiny Qwen3: equal with boundaries, different without."""

import math

import pytest
import torch

from nbhelpers.data.contamination import (
    BROKEN_MODES,
    RELATIVE_TOLERANCE,
    check_contamination,
    per_sequence_loss,
    proof_summary,
    require_proof,
    sequence_ids,
)
from nbhelpers.measure.contamination_proof import contamination_proof

MAX_LENGTH = 192


def test_sequence_ids_restart_at_every_zero():
    assert sequence_ids(torch.tensor([[0, 1, 2, 0, 1, 0]])).tolist() == [0, 0, 0, 1, 1, 2]


def test_per_sequence_loss_groups_tokens_by_sequence():
    logits = torch.zeros(6, 4)  # uniform over 4 tokens: every counted token costs ln 4
    logits[3, 2] = 100.0  # position 3 predicts label 4 (= 2) with certainty: zero loss
    labels = torch.tensor([-100, 1, 3, -100, 2, 0])
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    result = per_sequence_loss(logits, labels, ids)
    assert result[0] == (pytest.approx(math.log(4)), 2)
    assert result[1][1] == 2 and result[1][0] == pytest.approx(math.log(4) / 2)


@pytest.fixture(scope="module")
def checks():
    """The proof on the first six examples of the default dataset: correct, then every broken mode."""
    return {c.mode: c for c in contamination_proof(num_sequences=6, max_length=MAX_LENGTH)}


def test_packed_loss_equals_padded_loss_per_sequence(checks):
    check = checks["correct"]
    assert check.tolerance == RELATIVE_TOLERANCE == 1e-5
    assert check.passed, check.table
    assert check.table["tokens"].tolist() == [192, 192, 165, 159, 192, 162]
    # fp32, the same kernels on padded and packed rows: the loss's log-sum-exp over 151,936 logits may be blocked
    # otherwise, log2(151,936) = 17 roundings of 2^-24 = 1e-6 relative (1/10 of RELATIVE_TOLERANCE)
    assert check.max_relative_difference < 1e-6
    assert (check.table["loss_tokens"] > 100).all()
    assert check.table["padded_loss"].between(11.0, 13.0).all()  # random weights: about ln(151,936) = 11.93
    assert "PASSES" in check.verdict()


@pytest.mark.parametrize("mode", BROKEN_MODES)
def test_the_check_fails_when_tokens_attend_across_boundaries(checks, mode):
    check = checks[mode]
    assert not check.passed
    differences = check.table["relative_difference"].tolist()
    assert differences[0] < 1e-6  # the first sequence has nothing before it to leak from: fp32 rounding, as above
    assert max(differences[1:]) > 10 * RELATIVE_TOLERANCE
    assert "FAILS" in check.verdict()


def test_proof_summary_rows(checks):
    summary = proof_summary(list(checks.values()))
    assert summary.index.tolist() == ["correct", *BROKEN_MODES]
    assert summary["passed"].tolist() == [True, False, False, False]
    assert summary.loc["correct", "sequences_over_tolerance"] == 0
    assert (summary.loc[list(BROKEN_MODES), "sequences_over_tolerance"] >= 1).all()


def test_eager_attention_and_bad_arguments():
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.models.loading import build_model

    tokenizer = load_tokenizer()
    examples = load_examples("default", tokenizer, 3, 64)
    model = build_model("qwen3-tiny", "eager", seed=1)
    assert check_contamination(model, examples, tokenizer.pad_token_id, 64).passed
    assert not check_contamination(model, examples, tokenizer.pad_token_id, 64, "continuous_positions").passed
    with pytest.raises(ValueError, match="broken='nonsense'"):
        check_contamination(model, examples, tokenizer.pad_token_id, 64, "nonsense")
    with pytest.raises(ValueError, match="at least two sequences"):
        check_contamination(model, examples[:1], tokenizer.pad_token_id, 64)


def test_a_large_preset_proves_on_its_familys_smallest_preset() -> None:
    from nbhelpers.measure.contamination_proof import proof_model

    assert proof_model("qwen3.8-27b") == "qwen3.5-tiny"  # 27B parameters in fp32 would not fit a notebook's CPU
    assert proof_model("qwen3-8b") == "qwen3-tiny"
    assert proof_model("qwen3-1.7b") == "qwen3-tiny"  # beyond PROOF_MAX_PARAMETERS: the same layers, smaller
    assert proof_model("qwen3-1.7b", max_parameters=2 * 10**9) == "qwen3-1.7b"  # within it: the model itself
    assert proof_model("qwen3-tiny") == "qwen3-tiny"
    assert proof_model("some/folder-or-hub-id") == "some/folder-or-hub-id"
    assert proof_model("qwen3-1.7b", max_parameters=10**6) == "qwen3-tiny"


def test_a_proof_on_another_model_names_it_in_its_verdicts_and_record() -> None:
    from nbhelpers.measure.contamination_proof import proof_record

    checks = contamination_proof("qwen3-8b", num_sequences=3, max_length=MAX_LENGTH)
    assert {c.model for c in checks} == {"qwen3-tiny"}
    assert "correct on qwen3-tiny: PASSES" in require_proof(checks)
    record = proof_record(checks, {"model": "qwen3-8b"})
    assert record.metrics["parity"]["ran_on_model"] == "qwen3-tiny"
    assert record.config["model"] == "qwen3-8b"
