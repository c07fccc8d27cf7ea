"""The contamination proof for a hybrid: packed vs alone per sequence, on each path of the Gated DeltaNet
layers; it catches the mixing paths and passes the one that keeps sequences apart."""

import pytest
from hybrid_helpers import tiny_hybrid, token_examples

from nbhelpers.data.contamination import (
    HYBRID_LOGIT_TOLERANCE,
    HYBRID_PATHS,
    hybrid_checks,
    hybrid_paths_for,
    proof_summary,
    require_hybrid_proof,
)

MAX_LENGTH = 128


@pytest.fixture(scope="module")
def checks():
    paths = hybrid_paths_for("cpu")
    return {c.mode: c for c in hybrid_checks(tiny_hybrid(), token_examples(), 0, MAX_LENGTH, paths)}


def test_the_cpu_runs_the_reference_paths_only():
    assert [p.needs_cuda for p in hybrid_paths_for("cpu")] == [False, False, False]
    assert len(hybrid_paths_for("cuda")) == len(HYBRID_PATHS)


def test_the_reference_with_boundaries_matches_each_sequence_alone(checks):
    check = checks["reference, boundaries"]
    assert check.passed, check.table
    assert check.table["tokens"].tolist() == [70, 45, 90]
    # fp32 logits below 2 in size (an ulp there is 2^-23 = 1.2e-7; measured 1.8e-7 apart): 1e-5 is ~80 ulps, still
    # 1/10 of the package's HYBRID_LOGIT_TOLERANCE; the loss over 512 logits: log2(512) = 9 roundings of 2^-24 = 5e-7
    assert check.table["max_logit_difference"].max() < 1e-5
    assert check.max_relative_difference < 1e-6


@pytest.mark.parametrize("mode", ["reference, position_ids only", "reference delta rule apart, conv mixed"])
def test_the_proof_catches_paths_that_mix(checks, mode):
    check = checks[mode]
    assert not check.passed
    logits = check.table["max_logit_difference"].tolist()
    assert logits[0] < 1e-5  # the first sequence has nothing before it to mix with: fp32 ulps, as above
    assert min(logits[1:]) > 100 * HYBRID_LOGIT_TOLERANCE
    assert "FAILS" in check.verdict()


def test_require_hybrid_proof_accepts_the_outcome_and_refuses_a_check_that_cannot_fail(checks):
    text = require_hybrid_proof(list(checks.values()))
    assert text.count("PASSES") == 1 and text.count("FAILS") == 2
    with pytest.raises(AssertionError, match="one that mixes"):
        require_hybrid_proof([checks["reference, boundaries"]])
    with pytest.raises(AssertionError, match="leak"):
        require_hybrid_proof([checks["reference, position_ids only"]], [
            p.__class__(p.name, p.bind, p.boundaries, keeps_apart=True) for p in HYBRID_PATHS
        ])  # fmt: skip
    summary = proof_summary(list(checks.values()))
    assert summary["passed"].tolist() == [True, False, False]
