"""The frozen-base suites: Qwen3-8B LoRA r16 once per base of the table, the bf16 base first (the parity reference),
the same samples and adapter in every row, and each row planned to fit one H200 with the quantized bases smaller;
the capped suites (8B and 27B) and the hybrids' peer suites."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.adapter_plan import largest_fitting_tokens
from nbhelpers.analysis.memory_plan import plan_memory, settings_from_config
from nbhelpers.bench.frozen_bases import (
    BUDGET_STEP,
    CAPS_GIB,
    MAX_BUDGET,
    RECOMPUTATION,
    SATURATING_TOKENS,
    recomputation_cost,
    saturating_tokens,
)
from nbhelpers.bench.table import suite_named, suites_under
from nbhelpers.measure.memory_plan import cap_plan_refusal
from nbhelpers.models.families import model_shape, preset_config
from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES

SAME = ("model", "adapter", "lora_rank", "lora_targets", "num_samples", "seed", "batch_size", "max_length", "kernels")


def test_each_suite_runs_every_base_of_the_table_on_one_workload(tmp_path):
    suites = suites_under("qwen3-8b/frozen-base")
    assert [s.name.rsplit("/", 1)[-1] for s in suites] == ["plain", "best", "parity"]
    shape = model_shape(preset_config("qwen3-8b"))
    for suite in suites:
        rows = suite.rows(tmp_path)
        assert tuple(r.frozen_base for r in rows) == FROZEN_BASE_NAMES and FROZEN_BASE_NAMES[0] == "bf16"
        assert suite.parity == (suite.name != "qwen3-8b/frozen-base/best")  # best: judged by the parity suite
        first = rows[0].to_dict()
        assert all({k: r.to_dict()[k] for k in SAME} == {k: first[k] for k in SAME} for r in rows)
        planned = [plan_memory(shape, settings_from_config(r)) for r in rows]
        assert all(p.fits for p in planned)
        plans = dict(zip(FROZEN_BASE_NAMES, planned))
        bf16, nf4, nf4_bf16, float8 = (plans[b].parameters for b in ("bf16", "nf4", "nf4_bf16", "float8"))
        assert nf4_bf16 < nf4 < float8 < bf16  # the stored base; NF4's fp32 activations can cost more than it saves
        assert plans["float8"].total < plans["bf16"].total  # float8 keeps the bf16 activations
        assert plans["nf4_bf16"].total < plans["nf4"].total  # and so does NF4 with its rest as built


def _worth(row, shape) -> float:
    """The rule capped_row maximises: the budget (counted up to the saturating tokens) over the recomputation's cost."""
    return min(row.token_budget, saturating_tokens(row.frozen_base)) / recomputation_cost(
        shape.num_layers, row.activation_checkpointing, row.checkpoint_every
    )


CAPPED_27B = [f"hybrid/qwen3.8-27b-lora/memory-caps/{cap:g}-gib" for cap in CAPS_GIB]


def test_tokens_pay_up_to_the_largest_budget_only_over_a_base_that_dequantizes_each_pass():
    assert {base: saturating_tokens(base) for base in FROZEN_BASE_NAMES} == {
        "bf16": SATURATING_TOKENS, "nf4": MAX_BUDGET, "nf4_bf16": MAX_BUDGET, "float8": SATURATING_TOKENS}  # fmt: skip
    # the 27B's 4-bit row under 79 GiB: 16,384 tokens with every layer recomputed ran 1.18x the 4,096 with every 4th
    four_bit = suite_named("hybrid/qwen3.8-27b-lora/memory-caps/79-gib").rows(None)[0]
    picked = (four_bit.frozen_base, four_bit.token_budget, four_bit.activation_checkpointing)
    assert picked == ("nf4_bf16", 16384, "full")
    measured = suite_named("hybrid/qwen3.8-27b-lora/memory-caps/79-gib-tokens").rows(None)
    assert [(r.token_budget, r.activation_checkpointing, r.checkpoint_every) for r in measured] == [
        (4096, "every_k", 4), (16384, "full", 2)]  # fmt: skip  # the suite as it ran, whatever the rule picks now


@pytest.mark.parametrize("suite_name", ["qwen3-8b/memory-caps/best", *CAPPED_27B])
def test_each_capped_row_fits_its_cap_at_the_best_recomputation_or_is_refused_with_the_planners_reason(suite_name):
    rows = suite_named(suite_name).rows(None)
    caps = {r.gpu_memory_gib for r in rows}
    assert caps == set(CAPS_GIB) if "8b" in suite_name else len(caps) == 1 and caps <= set(CAPS_GIB)
    for row in (r for r in rows if r.engine == "workbook"):  # a peer beside a row is checked below
        shape = model_shape(preset_config(row.model))
        if "nothing fits" in row.label:
            assert "over the cap" in cap_plan_refusal(row, shape), row.label  # a failed record before any work
            continue
        assert plan_memory(shape, settings_from_config(row)).fits and not cap_plan_refusal(row, shape), row.label
        if row.token_budget == 0:  # static padding: the batch is halved until it fits, twice it does not
            bigger = row.replace(batch_size=2 * row.batch_size)
            assert not plan_memory(shape, settings_from_config(bigger)).fits
            continue
        assert row.max_length <= row.token_budget <= MAX_BUDGET and row.token_budget % BUDGET_STEP == 0
        for checkpointing, every in RECOMPUTATION:  # no other recomputation fits a budget worth more
            other = row.replace(activation_checkpointing=checkpointing, checkpoint_every=every)
            tokens = min(largest_fitting_tokens(shape, settings_from_config(other), BUDGET_STEP), MAX_BUDGET)
            if tokens >= row.max_length:
                assert _worth(other.replace(token_budget=tokens), shape) <= _worth(row, shape) + 1e-9, row.label


@pytest.mark.parametrize("suite_name", CAPPED_27B)
def test_under_each_cap_the_peers_train_beside_their_4_bit_bases_on_the_same_samples(suite_name):
    rows = suite_named(suite_name).rows(None)
    four_bit = rows[0]
    assert four_bit.frozen_base == "nf4_bf16" and "nothing fits" not in four_bit.label  # first: a cut job keeps it
    peers = [r for r in rows if r.engine != "workbook"]
    assert [r.engine for r in peers] == ["unsloth", "trl_defaults", "trl_best"]
    assert rows[1:4] == peers  # right after it: a job cut short keeps the cap's comparison
    fields = ("model", "num_samples", "seed", "lora_rank", "lora_targets", "gpu_memory_gib", "frozen_base",
              "token_budget", "activation_checkpointing")  # fmt: skip
    assert all(getattr(peer, f) == getattr(four_bit, f) for peer in peers for f in fields)
    refused = [r for r in rows if "nothing fits" in r.label]
    assert rows[len(rows) - len(refused):] == refused  # the refusals (no work) last


def test_the_hybrid_peer_suites_put_unsloth_and_trl_on_the_picks_samples_under_an_80_gb_cap():
    for name in ("hybrid/qwen3.5-2b/lora-peers/unsloth", "hybrid/qwen3.8-27b-lora/lora-peers/unsloth"):
        rows = suite_named(name).rows(None)
        assert [r.engine for r in rows] == ["workbook", "unsloth", "trl_defaults", "trl_best"]
        fields = ("model", "num_samples", "seed", "lora_rank", "lora_targets", "gpu_memory_gib", "kernels")
        assert len({tuple(getattr(r, f) for f in fields) for r in rows}) == 1, name  # fla bound in every row
        assert rows[0].gpu_memory_gib == CAPS_GIB[0] and "fla" in rows[0].kernels


def test_the_hybrid_compile_suites_put_the_compiled_pick_between_the_pick_and_unsloth():
    for name in ("hybrid/qwen3.5-2b/regional-compile/unsloth", "hybrid/qwen3.8-27b-lora/regional-compile/unsloth"):
        pick, compiled, unsloth = suite_named(name).rows(None)
        assert [r.engine for r in (pick, compiled, unsloth)] == ["workbook", "workbook", "unsloth"]
        assert compiled.kernels == f"{pick.kernels}+regional_compile" and unsloth.kernels == pick.kernels
        # Inductor fuses the layers' norms and SwiGLU: Liger keeps the loss only
        assert compiled.liger_kernels == tuple(s for s in pick.liger_kernels if "cross_entropy" in s)
        same = ("model", "num_samples", "seed", "token_budget", "activation_checkpointing", "gpu_memory_gib")
        assert {tuple(getattr(r, f) for f in same) for r in (pick, compiled)} == {tuple(getattr(pick, f) for f in same)}
        assert unsloth.num_samples == pick.num_samples and unsloth.gpu_memory_gib == pick.gpu_memory_gib


def test_the_flashqla_suite_swaps_only_the_delta_rule():
    pick, pick_compiled, swapped, compiled = suite_named("hybrid/qwen3.8-27b-lora/flashqla/pick").rows(None)
    assert (pick.kernels, pick_compiled.kernels, swapped.kernels, compiled.kernels) == (
        "fla+liger", "fla+liger+regional_compile", "flashqla+liger", "flashqla+liger+regional_compile")  # fmt: skip
    assert compiled.liger_kernels == pick_compiled.liger_kernels
    assert swapped.replace(kernels=pick.kernels, label=pick.label) == pick


def test_the_27b_profile_suite_profiles_the_pick_and_unsloth_on_the_same_samples():
    pick, unsloth = suite_named("hybrid/qwen3.8-27b-lora/profile/unsloth").rows(None)
    assert (pick.engine, unsloth.engine) == ("workbook", "unsloth") and pick.profile and unsloth.profile
    assert pick.replace(profile=False) == suite_named("hybrid/qwen3.8-27b-lora/lora-peers/unsloth").rows(None)[0]
    same = ("model", "num_samples", "seed", "lora_rank", "lora_targets", "gpu_memory_gib")
    assert [getattr(unsloth, f) for f in same] == [getattr(pick, f) for f in same]


def test_the_fresh_machine_suites_time_the_picks_first_steps():
    from nbhelpers.bench.dense_peers import BEST
    from nbhelpers.bench.hybrid_peers import pick_27b

    (dense,) = suite_named("qwen3-1.7b/fresh-machine/pick").rows(None)
    (hybrid,) = suite_named("hybrid/qwen3.8-27b-lora/fresh-machine/pick").rows(None)
    for row, pick in ((dense, BEST), (hybrid, pick_27b())):
        assert (row.timing, row.steps, row.warmup, row.profile) == ("steps", 3, 0, False)
        assert row.replace(timing=pick.timing, steps=pick.steps, warmup=pick.warmup) == pick  # the pick's workload


@pytest.mark.parametrize("suite_name", ["qwen3-8b/memory-caps/24-gib-function",
                                        "hybrid/qwen3.8-27b-lora/memory-caps/24-gib-function"])  # fmt: skip
def test_the_function_suites_time_the_4_bit_row_as_one_function_then_fused_on_the_same_batches(suite_name):
    function, fused = suite_named(suite_name).rows(None)
    assert (function.lora_epilogue, fused.lora_epilogue) == ("function", "fused")
    assert function.profile and fused.profile and function.frozen_base == "nf4_bf16" and function.gpu_memory_gib == 24
    assert function.replace(lora_epilogue="fused", label=fused.label) == fused  # only the forward differs


def test_the_float8_compile_suite_compiles_each_bases_layers_and_changes_nothing_else():
    bf16, bf16_compiled, float8, float8_compiled = suite_named("qwen3-8b/float8-cast/regional-compile").rows(None)
    assert (bf16.frozen_base, float8.frozen_base) == ("bf16", "float8")
    for eager, compiled in ((bf16, bf16_compiled), (float8, float8_compiled)):
        assert compiled.kernels == f"{eager.kernels}+regional_compile" and eager.profile and compiled.profile
        assert eager.replace(kernels=compiled.kernels, label=compiled.label) == compiled  # the same batches and cap
    assert float8.replace(frozen_base="bf16", label=bf16.label) == bf16
    assert suite_named("qwen3-8b/float8-cast/regional-compile-only").rows(None) == [bf16_compiled, float8_compiled]
    assert suite_named("qwen3-8b/float8-cast/fused-and-eager").rows(None)[:2] == [bf16, float8]  # the eager rows


def test_the_offload_suites_give_the_larger_budget_to_offloaded_inputs_and_unsloth_the_same_tokens():
    suite = suite_named("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload")
    offloaded, on_gpu, same_batches, wide, wide_on_gpu = suite.rows(None)
    assert (offloaded.activation_checkpointing, on_gpu.activation_checkpointing) == ("offload", "full")
    assert offloaded.token_budget > on_gpu.token_budget and offloaded.gpu_memory_gib == on_gpu.gpu_memory_gib == 24
    assert on_gpu.replace(activation_checkpointing="offload", label=same_batches.label, profile=False) == same_batches
    assert (wide.num_samples, wide_on_gpu.num_samples) == (128, 128) and offloaded.num_samples == 32
    for name, row in (("24-gib-offload-unsloth", offloaded), ("24-gib-offload-unsloth-128", wide)):
        (unsloth,) = suite_named(f"hybrid/qwen3.8-27b-lora/memory-caps/{name}").rows(None)
        assert unsloth.engine == "unsloth" and unsloth.label.endswith(f"budget {row.token_budget}")
        fields = ("num_samples", "seed", "token_budget")
        assert [getattr(unsloth, f) for f in fields] == [getattr(row, f) for f in fields]


def test_the_prefetch_suite_turns_off_only_the_prefetch_on_the_same_batches():
    suite = suite_named("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-prefetch")
    prefetched, on_demand = suite.rows(None)
    assert prefetched.activation_checkpointing == "offload" and prefetched.num_samples == 128 and prefetched.profile
    assert prefetched.replace(label=on_demand.label) == on_demand
    assert suite.row_env(prefetched) == {} and suite.row_env(on_demand) == {"NBHELPERS_OFFLOAD_PREFETCH": "0"}


def test_the_fla_boundaries_suite_turns_off_only_the_shared_boundaries_on_the_same_batches():
    suite = suite_named("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-fla-boundaries")
    shared, per_call = suite.rows(None)
    assert shared.activation_checkpointing == "offload" and shared.num_samples == 128 and shared.profile
    assert shared.kernels.startswith("fla") and shared.replace(label=per_call.label) == per_call
    assert suite.row_env(shared) == {} and suite.row_env(per_call) == {"NBHELPERS_FLA_SHARED_BOUNDARIES": "0"}
