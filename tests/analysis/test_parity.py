"""Parity before speed: verdicts on hand-made records, then measured eager vs Liger and eager vs compile on CPU."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nbhelpers.analysis.parity import (
    attach_parity,
    cpu_unchecked_table,
    parity_table,
    rel_diff,
    tolerance_for,
)
from nbhelpers.kernels.registry import cpu_tolerance, precision_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_config
from nbhelpers.measure.startup import cold_vs_warm
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.models.loading import preset_config

# One sequence of 48 tokens (15 of them loss tokens), one step after the first: the smallest batch with a
# real loss; the Liger interpreter costs ~5 s a step at this size.
TINY = RunConfig(
    run_name="parity", num_samples=4, batch_size=1, max_length=48, padding="static", steps=1, warmup=0
)  # fmt: skip
# A fresh model (unit-RMS hidden states of size 64 times tied N(0, 0.02^2) embeddings) gives logits of std
# sqrt(64) * 0.02 = 0.16 and predicts nearly uniformly: its loss is ln(vocab) + 0.16^2 / 2, give or take the label
# logits' 0.16 / sqrt(15 loss tokens); within 0.16 of ln(vocab) on any CPU, not within it for a loss that is summed,
# zero or over another vocabulary.
_TINY_CONFIG = preset_config(TINY.model)
VOCAB = _TINY_CONFIG.vocab_size
FRESH_LOGIT_STD = _TINY_CONFIG.hidden_size**0.5 * _TINY_CONFIG.initializer_range
# Another kernel reordering fp32 sums: the loss's log-sum-exp over the vocabulary, blocked otherwise, differs by about
# log2(151,936) = 17 roundings of 2^-24 (1e-6), 1/100 of Liger's tolerance and 1/10 of compile's.
REORDERED_SUM = math.log2(VOCAB) * 2**-24


def compile_pair(tmp_path_factory: pytest.TempPathFactory) -> list[RunRecord]:
    """Cold and warm torch.compile records of TINY, measured once per test session (~90 s on 2 cores)."""
    work = tmp_path_factory.getbasetemp() / "compile-cold-vs-warm"
    store = RunStore(work / "pair.jsonl")
    if not store.path.exists():
        for record in cold_vs_warm(TINY.replace(label="compile", kernels="compile"), work):
            store.append(record)
    return store.load()


def _first_step(record: RunRecord, loss: float, grad: float) -> RunRecord:
    record.metrics.update(loss_first=loss, grad_norm_first=grad, compute_dtype="fp32")
    record.environment["device_type"] = "cpu"
    return record


def test_verdicts_pass_fail_not_checked_and_baseline(make_record):
    eager = _first_step(make_record("eager"), 12.0, 4.0)
    close = _first_step(make_record("compile", kernels="compile"), 12.0 * (1 + 5e-6), 4.0)
    far = _first_step(make_record("liger", kernels="liger"), 12.0, 4.0 * (1 + 2e-4))
    other_batch = _first_step(make_record("big batch", batch_size=8), 12.0, 4.0)
    broken = make_record("liger+compile", status="failed", reason="InterpreterError: x", kernels="liger+compile")
    nan = _first_step(make_record("nan", kernels="compile"), math.nan, 4.0)
    table = parity_table([eager, close, far, other_batch, broken, nan], "eager").set_index("backend")
    assert table["status"].to_dict() == {
        "eager": "baseline",
        "compile": "pass",
        "liger": "fail",
        "big batch": "not checked",
        "liger+compile": "not checked",
        "nan": "fail",
    }
    assert table.loc["compile", "loss rel diff"] == pytest.approx(5e-6)
    assert table.loc["compile", "tolerance"] == 1e-5 and table.loc["liger", "tolerance"] == 1e-4
    assert table.loc["liger", "grad norm rel diff"] == pytest.approx(2e-4)
    assert table.loc["big batch", "note"] == "different batch_size"
    assert table.loc["liger+compile", "note"] == "record failed: InterpreterError: x"
    with pytest.raises(ValueError, match="no record labelled 'nope'"):
        parity_table([eager], "nope")


def test_tolerance_by_device_and_dtype(make_record):
    gpu_bf16 = make_record("liger", kernels="liger", device_type="cuda")
    gpu_bf16.metrics["compute_dtype"] = "bf16-autocast"
    gpu_fp32 = make_record("liger", kernels="liger", device_type="cuda")
    gpu_fp32.metrics["compute_dtype"] = "fp32"
    cpu_liger = _first_step(make_record("liger", kernels="liger+compile"), 1.0, 1.0)
    assert tolerance_for(gpu_bf16).rel == 2e-2
    assert tolerance_for(gpu_fp32).rel == 1e-3
    assert tolerance_for(cpu_liger) == cpu_tolerance("liger") and cpu_tolerance("liger").rel == 1e-4
    assert rel_diff(1.01, 1.0) == pytest.approx(0.01) and rel_diff(0.5, 0.0) == 0.5


def test_lower_precision_is_judged_by_its_own_looser_tolerance(make_record):
    float8 = make_record("float8", kernels="float8+compile", device_type="cuda")
    float8.metrics["compute_dtype"] = "bf16-autocast"
    cce = make_record("cce", kernels="liger+cce", device_type="cuda")
    cce.metrics["compute_dtype"] = "bf16-autocast"
    assert tolerance_for(float8) == precision_tolerance("float8+compile") and tolerance_for(float8).rel > 2e-2
    assert "float8" in tolerance_for(float8).basis
    assert tolerance_for(cce).rel == 2e-2  # CCE computes in the baseline's precision: bf16's tolerance


def test_attach_parity_sets_the_key_the_report_reads(make_record):
    from nbhelpers.analysis.records import parity_status

    eager = _first_step(make_record("eager"), 12.0, 4.0)
    liger = _first_step(make_record("liger", kernels="liger"), 12.0 * (1 + 1e-5), 4.0)
    failed = make_record("compile", status="failed", reason="x")
    attach_parity([eager, liger, failed], "eager")
    assert set(liger.metrics["parity"]) >= {"status", "loss_rel_diff", "grad_norm_rel_diff", "tolerance"}
    assert liger.metrics["parity"]["status"] == "pass" and liger.metrics["parity"]["tolerance"] == 1e-4
    assert parity_status(eager) == "baseline" and parity_status(liger) == "pass"
    assert "parity" not in failed.metrics


def test_cpu_unchecked_table_shows_the_reason(make_record):
    failed = make_record("liger rms_norm", status="failed", reason="InterpreterError: boom", liger_kernels=["rms_norm"])
    frame = cpu_unchecked_table([failed])
    assert frame.to_dict("records") == [
        {"kernel": "rms_norm", "status": "failed: not checked on CPU", "reason": "InterpreterError: boom"}
    ]


@pytest.fixture(scope="module")
def eager_record(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    return run_config(TINY.replace(label="eager"))


@pytest.mark.slow
def test_liger_interpreted_kernels_match_eager_on_cpu(eager_record):
    liger = run_config(
        TINY.replace(label="liger", kernels="liger", liger_kernels=("rope", "fused_linear_cross_entropy"))
    )
    assert eager_record.ok and liger.ok, (eager_record.reason, liger.reason)
    assert liger.metrics["patch_report"]["rope"] and liger.metrics["patch_report"]["fused_linear_cross_entropy"]
    assert abs(eager_record.metrics["loss_first"] - math.log(VOCAB)) < FRESH_LOGIT_STD  # a real loss (above)
    row = parity_table([eager_record, liger], "eager").set_index("backend").loc["liger"]
    assert row["status"] == "pass" and row["tolerance"] == 1e-4
    # Measured: 8e-8 (loss) and 1.7e-7 (gradient norm): a few fp32 ulps, far inside the tolerance.
    assert row["loss rel diff"] < REORDERED_SUM and row["grad norm rel diff"] < REORDERED_SUM


@pytest.mark.slow
def test_cut_cross_entropy_matches_eager_on_cpu(eager_record):
    """CCE's torch.compile implementation (what runs on a CPU) in the patched loss path, through the runner."""
    pytest.importorskip("cut_cross_entropy")
    cce = run_config(TINY.replace(label="cce", kernels="cce"))
    assert eager_record.ok and cce.ok, (eager_record.reason, cce.reason)
    assert cce.metrics["patch_report"]["cut_cross_entropy"]
    row = parity_table([eager_record, cce], "eager").set_index("backend").loc["cce"]
    assert row["status"] == "pass" and row["tolerance"] == cpu_tolerance("cce").rel
    assert row["loss rel diff"] < REORDERED_SUM and row["grad norm rel diff"] < REORDERED_SUM


@pytest.mark.slow
def test_compile_matches_eager_on_cpu(eager_record, tmp_path_factory):
    cold, warm = compile_pair(tmp_path_factory)
    assert cold.ok and warm.ok, (cold.reason, warm.reason)
    table = parity_table([eager_record, cold, warm], "eager").set_index("backend")
    assert table["status"].tolist() == ["baseline", "pass", "pass"]
    assert table.loc["compile (cold cache)", "tolerance"] == 1e-5
    # Measured: bit-identical at this shape (0.0), 1.2e-7 on the gradient norm at 2 x 64, seed 1.
    assert (table[["loss rel diff", "grad norm rel diff"]] < REORDERED_SUM).all().all()
    assert Path(cold.metrics["cache_dir"]).is_dir()


def test_packed_rows_are_judged_against_padded_ones_of_the_same_batch(make_record):
    """The H200 leak (packed rows attending across sequences) fails; an exact packed row passes."""
    from nbhelpers.analysis.parity import FAIL, NOT_CHECKED, PASS, check_against_first

    def record(label, padding, loss, grad, **kw):
        r = make_record(label, 1000.0, padding=padding, device_name="NVIDIA H200", **kw)
        r.metrics.update(loss_first=loss, grad_norm_first=grad, compute_dtype="bf16-autocast")
        return r

    static = record("static", "static", 12.309202, 13.7399)
    exact = record("packed", "packed", 12.309202, 13.7403)
    leaking = record("packed, leaking", "packed", 12.2766, 17.90)
    bucketed = record("bucketed", "bucketed", 12.373, 20.33)
    earlier = []
    for r in (static, exact, leaking, bucketed):
        check_against_first(r, earlier)
        earlier.append(r)
    assert exact.metrics["parity"]["status"] == PASS
    assert leaking.metrics["parity"]["status"] == FAIL
    assert leaking.metrics["parity"]["grad_norm_rel_diff"] == pytest.approx(17.90 / 13.7399 - 1)
    assert bucketed.metrics["parity"]["status"] == NOT_CHECKED and "padding" in bucketed.metrics["parity"]["note"]


def _probed(make_record, label, padding, sums, total=None, grad=10.0, tokens=(5, 7, 9), **kw):
    """A CPU record carrying a parity probe of three sequences (loss sums, loss tokens, total, gradient norm)."""
    record = _first_step(make_record(label, padding=padding, device_name="cpu", hostname="ci", **kw), 12.0, 4.0)
    record.metrics["parity_probe"] = {
        "samples": [0, 1, 2],
        "sequence_loss_sums": list(sums),
        "sequence_loss_tokens": list(tokens),
        "total_loss": math.fsum(sums) if total is None else total,
        "grad_norm": grad,
        "param_grad_norms": {"model.embed_tokens.weight": grad / 2},
        "note": "",
    }
    return record


def test_probe_verdicts_for_strategies_the_first_batch_cannot_judge(make_record):
    from nbhelpers.analysis.parity import check_parity

    sums = [60.0, 84.0, 108.0]
    static = _probed(make_record, "static", "static", sums)
    token_budget = _probed(make_record, "token budget", "token_budget", [s * (1 + 3e-6) for s in sums], batch_size=8)
    bucketed = _probed(make_record, "bucketed", "bucketed", sums, grad=10.0 * (1 + 5e-5))
    # One sequence off by 1e-3 and another the other way: the total is unchanged, the per-sequence check fails.
    mixed = _probed(make_record, "packed, mixing", "packed", [60.0, 84.0 + 0.084, 108.0 - 0.084])
    verdicts = {r.label: check_parity(r, static) for r in (static, token_budget, bucketed, mixed)}
    assert {k: v["status"] for k, v in verdicts.items()} == {
        "static": "baseline", "token budget": "pass", "bucketed": "fail", "packed, mixing": "fail",
    }  # fmt: skip
    assert all(v["method"] == "probe" for v in verdicts.values())
    assert verdicts["token budget"]["per_sequence_max_rel_diff"] == pytest.approx(3e-6)
    assert verdicts["token budget"]["loss_rel_diff"] == pytest.approx(3e-6)  # batch size differs: still judged
    assert verdicts["bucketed"]["grad_norm_rel_diff"] == pytest.approx(5e-5)
    # exact but for float64 rounding of 84 + 0.084 and 108 - 0.084 (~1e-16 of 252): 1e-12 absorbs it
    assert verdicts["packed, mixing"]["loss_rel_diff"] == pytest.approx(0.0, abs=1e-12)
    assert verdicts["packed, mixing"]["per_sequence_max_rel_diff"] == pytest.approx(1e-3)
    keys = {"status", "loss_rel_diff", "grad_norm_rel_diff", "tolerance", "tolerance_basis", "baseline",
            "baseline_record_id", "note", "per_sequence_max_rel_diff", "method"}  # fmt: skip
    assert keys <= set(verdicts["bucketed"])


def test_probe_mismatches_and_fallbacks(make_record):
    from nbhelpers.analysis.parity import check_parity

    sums = [60.0, 84.0, 108.0]
    static = _probed(make_record, "static", "static", sums)
    other_tokens = _probed(make_record, "cut otherwise", "packed", sums, tokens=(5, 7, 8))
    assert check_parity(other_tokens, static)["status"] == "fail"
    assert "loss-token counts" in check_parity(other_tokens, static)["note"]
    other_length = _probed(make_record, "longer", "packed", sums, max_length=256)
    verdict = check_parity(other_length, static)  # neither the probe nor the first batch is comparable
    assert verdict["status"] == "not checked" and verdict["note"] == "different max_length"
    nan = _probed(make_record, "nan", "bucketed", [60.0, math.nan, 108.0], total=math.nan)
    assert check_parity(nan, static)["status"] == "fail" and "not finite" in check_parity(nan, static)["note"]
    # A record without the probe (an older one, or its probe failed): the first-batch path, and it says why.
    old = _first_step(make_record("old packed", padding="packed", device_name="cpu", hostname="ci"), 12.0, 4.0)
    old.metrics["parity_probe"] = {"error": "out of memory: CUDA out of memory"}
    verdict = check_parity(old, static)
    assert verdict["method"] == "first batch" and verdict["status"] == "pass"
    assert "record's parity probe failed: out of memory" in verdict["note"]
    old_bucketed = _first_step(make_record("old bucketed", padding="bucketed", device_name="cpu", hostname="ci"), 12, 4)
    verdict = check_parity(old_bucketed, static)
    assert verdict["status"] == "not checked" and "padding" in verdict["note"]


def test_a_record_listed_twice_is_stored_once(tmp_path, make_record):
    from nbhelpers.analysis.parity import store_checked
    from nbhelpers.measure.store import RunStore

    store = RunStore(tmp_path / "run")
    row, other = make_record("compile", 100.0, kernels="compile"), make_record("eager", 90.0)
    stored = store_checked(store, [other, row, row], "eager")
    assert [r.record_id for r in stored] == [other.record_id, row.record_id]
    assert [r.record_id for r in store.load()] == [other.record_id, row.record_id]


def test_a_precision_change_is_judged_against_fp32_weights_at_the_looser_tolerance(make_record):
    """bf16 weights with fp32 master copies against the fp32-weights baseline: the same seeded weights rounded,
    so the pair is compared (not "not checked") at bf16's tolerance; one precision keeps its own tolerance."""
    eager = _first_step(make_record("eager"), 12.0, 4.0)
    close = _first_step(make_record("bf16-master", dtype="bf16-master"), 12.0 * (1 + 5e-3), 4.0 * (1 - 1e-2))
    far = _first_step(make_record("bf16-master far", dtype="bf16-master"), 12.0, 4.0 * (1 + 5e-2))
    for record in (close, far):
        record.metrics["compute_dtype"] = "bf16-master"
    table = parity_table([eager, close, far], "eager").set_index("backend")
    assert table.loc["bf16-master", "status"] == "pass" and table.loc["bf16-master far", "status"] == "fail"
    assert table.loc["bf16-master", "tolerance"] == 2e-2
    same = _first_step(make_record("compile", kernels="compile"), 12.0 * (1 + 5e-3), 4.0)
    assert parity_table([eager, same], "eager").set_index("backend").loc["compile", "status"] == "fail"


def test_one_parameters_gradient_off_fails_even_when_the_totals_pass(make_record):
    """A loss whose gradient leans one way on a small tensor (Cut Cross-Entropy's bf16 sums moved the final norm's
    gradient 10% on an H200) keeps the total loss and gradient norm within tolerance; its named parameter fails."""
    from nbhelpers.analysis.parity import PARAMETER_GRADIENT, check_parity

    sums = [60.0, 84.0, 108.0]
    static = _probed(make_record, "static", "static", sums)
    static.metrics["parity_probe"]["param_grad_norms"] = {"model.embed_tokens.weight": 5.0, "model.norm.weight": 2.0}

    def with_norm_gradient(label: str, norm: float):
        record = _probed(make_record, label, "packed", sums)
        record.metrics["parity_probe"]["param_grad_norms"] = {
            "model.embed_tokens.weight": 5.0,
            "model.norm.weight": norm,
        }
        return check_parity(record, static)

    biased = with_norm_gradient("biased", 2.0 * 1.10)
    assert biased["status"] == "fail"
    assert biased["loss_rel_diff"] == 0.0 and biased["grad_norm_rel_diff"] == 0.0  # the totals alone would pass
    assert biased["param_grad_max_rel_diff"] == pytest.approx(0.10)
    assert "the gradient of model.norm.weight is 10.0% off" in biased["note"]
    within = with_norm_gradient("rounding", 2.0 * (1 + PARAMETER_GRADIENT.rel * 0.6))  # 4.5%: the largest seen exact
    assert within["status"] == "pass" and within["param_grad_max_rel_diff"] == pytest.approx(0.045)
    assert "model.norm.weight" not in within["note"]


def test_one_parameters_bound_is_never_tighter_than_the_pairs_tolerance(make_record):
    from nbhelpers.analysis.parity import PARAMETER_GRADIENT, _judge_probe
    from nbhelpers.kernels.spec import Tolerance

    sums = [60.0, 84.0, 108.0]
    base = _probed(make_record, "static", "static", sums)
    off = _probed(make_record, "off", "packed", sums)
    off.metrics["parity_probe"]["param_grad_norms"] = {"model.embed_tokens.weight": 5.0 * 1.09}
    loose = Tolerance(0.1, "a lower precision's own")
    assert _judge_probe(off, base, loose)["status"] == "pass"  # 9% is within a 0.1 tolerance
    assert _judge_probe(off, base, Tolerance(0.02, "bf16"))["status"] == "fail"  # and beyond 7.5% under bf16's
    assert PARAMETER_GRADIENT.rel > 0.045  # above the largest difference an exact row showed on an H200
