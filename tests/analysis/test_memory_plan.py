"""The memory planner: its arithmetic against meta-device parameter counts and against measured peaks."""

import dataclasses
import math
from pathlib import Path

import pytest

from nbhelpers.analysis.gpu_results import load_gpu_records
from nbhelpers.analysis.memory_plan import (
    GIB,
    MemorySettings,
    gpus_needed,
    plan_frame,
    plan_memory,
    planned_vs_measured,
    settings_from_config,
)
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.families import model_shape, preset_config
from nbhelpers.models.loading import count_parameters, meta_model
from nbhelpers.validation import ConfigError


@pytest.mark.parametrize("preset", ["qwen3-0.6b", "qwen3-8b"])
def test_weights_gradients_and_adam_follow_the_meta_model_count(preset):
    model = meta_model(preset)
    count = count_parameters(model)
    shape = model_shape(model.config)
    assert shape.total_parameters == count
    assert shape.layer_parameters == sum(p.numel() for p in model.model.layers[0].parameters())
    for weights, size in (("bf16", 2), ("fp32", 4)):
        for gpus in (1, 2, 8):
            sharding = "fsdp2" if gpus > 1 else "none"
            plan = plan_memory(shape, MemorySettings(gpus=gpus, sharding=sharding, weights=weights))
            assert plan.parameters == plan.gradients == math.ceil(count / gpus) * size
            assert plan.optimizer == 2 * plan.parameters


def test_checkpointing_and_sharding_lower_the_plan():
    shape = model_shape(preset_config("qwen3-8b"))
    base = MemorySettings(tokens_per_gpu=16384)
    none, full = plan_memory(shape, base), plan_memory(shape, dataclasses.replace(base, checkpointing="full"))
    every2 = plan_memory(shape, dataclasses.replace(base, checkpointing="every_k", checkpoint_every=2))
    assert full.activations < every2.activations < none.activations
    assert none.parameters == full.parameters
    two = plan_memory(shape, dataclasses.replace(base, gpus=2, sharding="fsdp2"))
    # ceil(count / 2) parameters per GPU: two shards hold at most one more than the whole, 2 bytes in bf16
    assert two.parameters * 2 == pytest.approx(none.parameters, abs=2)
    assert two.activations == none.activations  # tokens are per GPU


def test_gpus_needed_is_the_first_count_that_fits():
    shape = model_shape(preset_config("qwen3-8b"))
    plain = MemorySettings(weights="fp32", tokens_per_gpu=16384, capacity_gib=139.0)
    # 8B with a 16k budget ran out of memory on one H200 (measured, bf16); its activations are per GPU, so more
    # GPUs alone do not help, while checkpointing plus sharding does.
    assert gpus_needed(shape, plain) is None
    settings = dataclasses.replace(plain, checkpointing="full")
    needed = gpus_needed(shape, settings)
    assert needed is not None and needed > 1
    fits = lambda n: plan_memory(shape, dataclasses.replace(settings, gpus=n, sharding="fsdp2")).fits  # noqa: E731
    assert fits(needed) and not fits(needed - 1)
    assert gpus_needed(shape, dataclasses.replace(settings, capacity_gib=1.0)) is None
    frame = plan_frame(shape, {"16k": plain, "16k, full checkpointing": settings})
    assert frame["gpus_needed"].isna().iloc[0] and frame["gpus_needed"].iloc[1] == needed
    assert frame["total"].iloc[1] < frame["total"].iloc[0]


def test_plan_is_within_twelve_percent_of_the_shipped_h200_peaks():
    frame = planned_vs_measured(load_gpu_records())
    assert len(frame) >= 20
    assert frame["error"].abs().max() <= 0.12, frame[["label", "planned_gib", "measured_gib", "error"]]


# The H100 job beside the tools people pick (benchmarks/gpu/NOTES.md, 2026-12-06): LoRA picks, the frozen bases'
# parity probes and the best row under memory caps of 79, 48 and 24 GiB.
H100_PEERS_AND_CAPS = ("qwen3-1.7b/lora-peers/unsloth.jsonl", "qwen3-8b/lora-peers/unsloth.jsonl",
                       "qwen3-8b/frozen-base/parity.jsonl", "qwen3-8b/memory-caps/best.jsonl")  # fmt: skip


def test_plan_is_within_ten_percent_of_each_peak_measured_on_an_h100_and_under_its_caps():
    from nbhelpers.measure.store import RunStore
    from nbhelpers.resources import REPO_ROOT

    records = [r for name in H100_PEERS_AND_CAPS for r in RunStore(REPO_ROOT / "benchmarks" / "gpu" / name).load()]
    frame = planned_vs_measured(records)
    capped = [r for r in records if r.ok and r.kind == "step" and r.config.get("gpu_memory_gib")]
    assert len(frame) >= 12 and len(capped) >= 8
    assert frame["error"].abs().max() <= 0.10, frame[["label", "planned_gib", "measured_gib", "error"]]
    assert all(r.metrics["peak_memory_gib"] <= r.config["gpu_memory_gib"] for r in capped)


def test_settings_from_a_run_config():
    config = RunConfig(model="qwen3-8b", dtype="bf16", gpus=2, sharding="fsdp2", activation_checkpointing="every_k",
                       checkpoint_every=3, batch_size=1, max_length=4096, padding="token_budget", token_budget=8192,
                       kernels="liger", liger_kernels=("rope", "cross_entropy"))  # fmt: skip
    settings = settings_from_config(config)
    assert (settings.gpus, settings.weights, settings.sharding, settings.checkpointing) == (2, "bf16", "fsdp2",
                                                                                           "every_k")
    assert (settings.checkpoint_every, settings.tokens_per_gpu, settings.loss) == (3, 8192, "liger_ce")
    assert not settings.fused_norm_mlp  # rms_norm and swiglu were off
    assert settings_from_config(config.replace(liger_kernels=("rms_norm", "swiglu"))).fused_norm_mlp
    assert plan_memory(model_shape(preset_config("qwen3-8b")), settings).total > 10 * GIB


@pytest.mark.parametrize(("field", "value"), [("gpus", 0), ("weights", "fp8"), ("sharding", "zero3"),
                                              ("checkpointing", "some"), ("loss", "focal"), ("capacity_gib", 0),
                                              ("capacity_gib", float("inf")), ("capacity_gib", float("nan"))])
def test_bad_settings_name_the_parameter(field, value):
    with pytest.raises(ConfigError, match=f"^{field}="):
        MemorySettings(**{field: value})
    with pytest.raises(ConfigError, match="sharding"):
        MemorySettings(gpus=2)


def test_a_gated_deltanet_layer_saves_what_fla_and_the_gated_norm_keep():
    from nbhelpers.analysis.memory_plan import delta_net_bytes
    from nbhelpers.models.loading import model_config

    shape = model_shape(model_config("qwen3.8-27b"))
    assert [i for i in range(shape.num_layers) if shape.is_full_attention(i)] == list(range(3, 64, 4))
    # input 2h, conv input 2(2 x 16 x 128 + 6144), v 2 x 6144, q and k at 48 value heads 4 x 48 x 128, A 2 x 48 x 64,
    # fp32 decay and beta 8 x 48, the gated norm 14 x 6144 (transformers') or 4 x 6144 (fused), out_proj input 2 x 6144
    unfused = 10240 + 20480 + 12288 + 24576 + 6144 + 384 + 86016 + 12288
    assert delta_net_bytes(shape, fused_gated_norm=False) == unfused
    assert delta_net_bytes(shape, fused_gated_norm=True) == unfused - 10 * 6144


def test_plan_is_within_ten_percent_of_the_27b_lora_peaks_on_fla():
    from nbhelpers.measure.store import load_records

    hybrid = Path(__file__).resolve().parents[2] / "benchmarks/gpu/hybrid/qwen3.8-27b-lora/toward-35-mfu"
    records = [r for name in ("lora-27b-mfu.jsonl", "lora-27b-larger-steps.jsonl")
               for r in load_records(hybrid / name) if r.ok]  # fmt: skip
    frame = planned_vs_measured(records)
    assert len(frame) == 9
    assert frame["error"].abs().max() <= 0.10, frame[["label", "planned_gib", "measured_gib", "error"]]


def test_bf16_weights_with_fp32_master_state_worked_by_hand():
    # qwen3-tiny, counted by hand: per layer q 64x64 + k 64x32 + v 64x32 + o 64x64 + q/k norms 2x16 + MLP 3x64x192
    # + two norms 2x64 = 49,312; two layers 98,624; tied embedding 151,936 x 64 = 9,723,904; final norm 64.
    shape = model_shape(preset_config("qwen3-tiny"))
    parameters = 2 * 49_312 + 9_723_904 + 64
    assert shape.total_parameters == parameters == 9_822_592
    master = plan_memory(shape, MemorySettings(weights="bf16-master", tokens_per_gpu=64))
    assert master.parameters == 19_645_184  # bf16 weights: 2 bytes each
    assert master.gradients == 39_290_368  # fp32 gradients at the step: 4 bytes each (the bf16 ones freed)
    assert master.optimizer == 117_871_104  # fp32 master 4 + two fp32 moments 8 = 12 bytes each
    pure = plan_memory(shape, MemorySettings(weights="bf16", tokens_per_gpu=64))
    autocast = plan_memory(shape, MemorySettings(weights="fp32", tokens_per_gpu=64))
    assert (pure.parameters, pure.gradients, pure.optimizer) == (19_645_184, 19_645_184, 39_290_368)  # 2+2+4
    assert (autocast.parameters + autocast.gradients + autocast.optimizer) == 16 * parameters  # 4+4+8
    assert master.activations == pure.activations and master.gathered == 0  # bf16 compute, no autocast cache
    settings = settings_from_config(RunConfig(model="qwen3-tiny", dtype="bf16-master"))
    assert settings.weights == "bf16-master"
