"""LoRA's arithmetic: adapter parameters from a shape (checked against PEFT), LoRA-aware FLOPs, the memory planner
and the memory refusal, against hand-computed values on a small shape."""

from __future__ import annotations

import dataclasses

import pytest

from nbhelpers.analysis.adapter_plan import largest_fitting_tokens, lora_fit_frame, lora_fit_sentence, lora_settings
from nbhelpers.analysis.memory_plan import GIB, MemorySettings, plan_memory, settings_from_config
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.metrics import model_flops
from nbhelpers.models.adapters import (
    AdapterSettings,
    adapter_matmul_parameters,
    parameter_counts,
    shape_counts,
    training_state_bytes,
    wrap_model,
)
from nbhelpers.models.families import model_shape, preset_config
from nbhelpers.models.linears import lora_parameters, matmul_weights
from nbhelpers.models.loading import build_model, memory_refusal
from nbhelpers.models.shape import ModelShape
from nbhelpers.validation import ConfigError

# A dense decoder small enough to count by hand: hidden 8, MLP 16, 2 layers, 2 heads of 4, 1 KV head, vocab 100.
SMALL = ModelShape(
    vocab_size=100, hidden_size=8, intermediate_size=16, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=4,
    tie_word_embeddings=True,
)  # fmt: skip
# Per layer q 8x8, k 8x4, v 8x4, o 8x8, gate 8x16, up 8x16, down 16x8 = 576 weights; two layers + lm head 8x100.
SMALL_MATMUL = 2 * 576 + 800
# LoRA r=2 per layer: 2 x (in + out) = q 32, k 24, v 24, o 32, gate 48, up 48, down 48 = 256.
SMALL_LORA_R2 = 2 * 256
LORA_R2 = AdapterSettings("lora", rank=2, alpha=4)


def test_small_shape_counts_by_hand():
    assert matmul_weights(SMALL) == SMALL_MATMUL == 1952
    assert lora_parameters(SMALL, 2) == SMALL_LORA_R2
    assert lora_parameters(SMALL, 2, ["q_proj", "v_proj"]) == 2 * (32 + 24)
    assert lora_parameters(SMALL, 2, ["mlp.down_proj"]) == 2 * 48
    assert lora_parameters(SMALL, 2, ["lm_head"]) == 2 * (8 + 100)  # named: the output layer too
    assert SMALL.flop_parameters == SMALL.total_parameters == 2008  # tied: 800 + 2 x 600 + 8
    counts = shape_counts(SMALL, LORA_R2)
    assert (counts.trainable, counts.frozen, counts.frozen_matmul, counts.adapter_matmul) == (512, 2008, 1952, 512)
    full = shape_counts(SMALL, AdapterSettings())
    assert (full.trainable, full.frozen) == (2008, 0)


def test_lora_flops_count_no_weight_gradients_of_the_frozen_base():
    lengths, tokens = [3, 5], 8
    attention = 6 * 2 * 2 * 4 * (3 * 3 + 5 * 5)  # 6 x layers x heads x head_dim x sum(L^2)
    forward = 2 * (2008 + 512) * tokens  # every matmul weight, the adapters' included
    input_gradients = 2 * (2008 + 512) * tokens
    weight_gradients = 2 * (2008 - 1952 + 512) * tokens  # only what trains: adapters (and the norms' 56)
    want = forward + input_gradients + weight_gradients + attention
    assert model_flops(SMALL, lengths, frozen_parameters=1952, adapter_parameters=512) == want == 92_992
    assert model_flops(SMALL, lengths) == 6 * 2008 * tokens + attention  # full fine-tuning unchanged


@pytest.mark.parametrize("preset", ["qwen3-tiny", "qwen3.5-tiny"])
@pytest.mark.parametrize("targets", ["all-linear", "q_proj,v_proj", "mlp.down_proj", "o_proj,in_proj_qkv"])
def test_adapter_parameters_from_the_shape_equal_peft_count(preset, targets):
    settings = AdapterSettings("lora", rank=4, alpha=8, targets=targets)
    shape = model_shape(preset_config(preset))
    if preset == "qwen3-tiny" and "in_proj_qkv" in targets:
        with pytest.raises(ConfigError, match="this model's: down_proj.*none named in_proj_qkv") as caught:
            wrap_model(build_model(preset), settings)
        assert caught.value.parameter == "lora_targets"
        return
    model = wrap_model(build_model(preset), settings)
    trainable, total = model.get_nb_trainable_parameters()
    assert trainable == lora_parameters(shape, 4, settings.target_modules) > 0
    counts = parameter_counts(model)
    assert counts == shape_counts(shape, settings)
    assert counts.trainable + counts.frozen == total
    assert counts.frozen_matmul == matmul_weights(shape)
    assert adapter_matmul_parameters(model) == trainable


def test_the_planner_predicts_a_lora_step_by_hand():
    lora = MemorySettings(adapter="lora", lora_rank=2, weights="bf16", tokens_per_gpu=10, capacity_gib=1.0)
    plan = plan_memory(SMALL, lora)
    assert plan.parameters == 2008 * 2 + 512 * 4  # frozen bf16 base, fp32 adapter weights
    assert plan.gradients == 512 * 4 and plan.optimizer == 2 * 512 * 4  # the adapter's only
    assert plan.gathered == 512 * 2  # autocast's bf16 copy of the adapter weights
    # A layer saves 400 bytes a token in bf16 (layer_activation_bytes: norms 192, attention 64, MLP 144); LoRA adds
    # a bf16 copy of each targeted linear's input and its rank-wide A output, 2 x (in + 2) for 7 linears = 156,
    # and drops the inputs only a frozen weight's gradient needed, 2 x (8 + 8 + 16) = 64: 492 a layer.
    per_token = 2 * (400 + 156 - 64) + 2 * 8 * 2  # two layers, the embedding output and final norm
    assert plan.activations == 10 * per_token
    assert plan.logits == 10 * 100 * 12
    full = plan_memory(SMALL, dataclasses.replace(lora, adapter="none"))
    assert (full.parameters, full.gradients, full.optimizer) == (4016, 4016, 8032)
    assert full.activations == 10 * (2 * 400 + 32)
    pure = plan_memory(SMALL, dataclasses.replace(lora, autocast=False))
    assert pure.gathered == 0 and pure.activations == 10 * (2 * (400 + 2 * 156 - 64) + 32)


def test_lora_settings_of_a_run_config():
    settings = settings_from_config(RunConfig(adapter="lora", lora_rank=8, lora_targets="q_proj", batch_size=2))
    assert (settings.adapter, settings.lora_rank, settings.lora_targets) == ("lora", 8, "q_proj")
    assert settings.weights == "bf16" and settings.autocast  # a frozen bf16 base under autocast on a GPU
    fp32 = settings_from_config(RunConfig(adapter="lora", dtype="fp32"))
    assert fp32.weights == "fp32" and not fp32.autocast
    assert settings_from_config(RunConfig()).adapter == "none"
    with pytest.raises(ConfigError) as caught:
        MemorySettings(adapter="lora", lora_rank=0)
    assert caught.value.parameter == "lora_rank"


def test_the_27b_preset_with_lora_is_not_refused_on_one_h200_and_full_fine_tuning_is():
    capacity = int(139 * GIB)
    lora = AdapterSettings("lora")
    assert memory_refusal("qwen3.8-27b", "bf16", capacity, lora) == ""
    full = memory_refusal("qwen3.8-27b", "bf16", capacity)
    assert "200 GiB" in full and "at least 2 GPUs" in full
    assert memory_refusal("qwen3.8-27b", "fp32", capacity) != ""
    shape = model_shape(preset_config("qwen3.8-27b"))
    adapter = lora_parameters(shape, 16)
    assert training_state_bytes(shape, "bf16", lora) == shape.total_parameters * 2 + adapter * 16
    tight = memory_refusal("qwen3.8-27b", "bf16", int(40 * GIB), lora)
    assert "frozen bf16 weights plus lora's fp32 weights" in tight


def test_what_fits_one_h200_with_lora_on_the_27b_shape():
    shape = model_shape(preset_config("qwen3.8-27b"))
    frame = lora_fit_frame("qwen3.8-27b", max_length=2048, tokens_per_gpu=4096)
    state = (shape.total_parameters * 2 + lora_parameters(shape, 16) * 16) / GIB
    first = frame.iloc[0]
    # three columns, each rounded to 0.01 GiB: at most 3 x 0.005 apart
    assert first["parameters"] + first["gradients"] + first["optimizer"] == pytest.approx(state, abs=3 * 0.005)
    budgets = dict(zip(frame["setting"], frame["largest_token_budget"]))
    assert budgets["LoRA, eager, full checkpointing"] > budgets["LoRA, eager"] > 0
    assert budgets["LoRA, Liger, full checkpointing"] > budgets["LoRA, eager, full checkpointing"]
    offloaded = "LoRA, Liger, offloaded checkpoints (inputs in host memory)"
    assert budgets[offloaded] > budgets["LoRA, Liger, full checkpointing"]  # the inputs' GPU memory is freed
    hosts = dict(zip(frame["setting"], frame["host_gib_at_largest"]))
    assert hosts[offloaded] == pytest.approx(budgets[offloaded] * shape.num_layers * shape.hidden_size * 2 / GIB,
                                             abs=0.005)  # fmt: skip  # each layer's bf16 input
    assert all(host == 0 for name, host in hosts.items() if name != offloaded)
    for name, setting in lora_settings().items():  # each budget is a step the planner says fits
        assert plan_memory(shape, dataclasses.replace(setting, tokens_per_gpu=budgets[name])).fits, name
    sentence = lora_fit_sentence(frame)
    assert sentence.startswith("qwen3.8-27b with LoRA r16 (all-linear) on 139 GiB")


def test_the_largest_fitting_token_budget_is_the_edge_of_the_plan():
    shape = model_shape(preset_config("qwen3.8-27b"))
    settings = MemorySettings(
        adapter="lora", weights="bf16", checkpointing="full", fused_norm_mlp=True, loss="liger_ce"
    )
    budget = largest_fitting_tokens(shape, settings)
    assert budget % 256 == 0 and budget > 0
    assert plan_memory(shape, dataclasses.replace(settings, tokens_per_gpu=budget)).fits
    assert not plan_memory(shape, dataclasses.replace(settings, tokens_per_gpu=budget + 256)).fits
    assert largest_fitting_tokens(shape, dataclasses.replace(settings, capacity_gib=40.0)) == 0  # base alone: 50 GiB
