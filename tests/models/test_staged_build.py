"""A model too large for the device as built, whose quantized frozen base fits it: built on the host, each linear
moved to the device as it is quantized, then the rest (the 27B with an NF4 base under a 24 GiB cap)."""

from __future__ import annotations

import dataclasses
import weakref

import pytest
import torch

import nbhelpers.models.float8_base as float8_base
import nbhelpers.models.float8_linear as float8_linear
import nbhelpers.models.frozen_base as frozen_base
import nbhelpers.models.loading as loading
import nbhelpers.models.nf4_base as nf4_base
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.adapters import quantized_state_bytes, training_state_bytes
from nbhelpers.models.families import model_shape, preset_config

GIB = 2**30


def _lora(base: str) -> object:
    return RunConfig(model="qwen3.8-27b", adapter="lora", frozen_base=base).adapter_settings


def test_the_27b_is_built_on_the_host_only_where_its_quantized_base_fits_the_device():
    shape = model_shape(preset_config("qwen3.8-27b"))
    for cap in (24, 48):
        capacity = cap * GIB
        nf4 = _lora("nf4_bf16")
        assert training_state_bytes(shape, "bf16", nf4) > capacity  # as built: refused
        assert quantized_state_bytes(shape, "bf16", nf4) <= capacity  # quantized: fits
        assert loading.stages_on_host(shape, "bf16", capacity, "cuda", nf4)
        assert not loading.stages_on_host(shape, "bf16", capacity, "cuda", _lora("bf16"))  # nothing to quantize
        assert not loading.stages_on_host(shape, "bf16", capacity, "cpu", nf4)  # the host is the device
    assert not loading.stages_on_host(shape, "bf16", 8 * GIB, "cuda", _lora("nf4_bf16"))  # too large even in NF4


def test_the_quantized_state_counts_the_tables_bytes():
    shape = model_shape(preset_config("qwen3.8-27b"))
    nf4 = _lora("nf4_bf16")
    adapter = training_state_bytes(shape, "bf16", nf4) - shape.total_parameters * 2
    stored = frozen_base.frozen_base_bytes(shape, "nf4_bf16", "bf16")
    assert quantized_state_bytes(shape, "bf16", nf4) == stored + adapter
    assert quantized_state_bytes(shape, "bf16", _lora("bf16")) == training_state_bytes(shape, "bf16", _lora("bf16"))


def test_a_staged_build_starts_on_the_host_and_says_for_which_device(monkeypatch):
    monkeypatch.setattr(loading, "device_memory_bytes", lambda device: 1)  # nothing fits the device as built
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: True)
    adapter = RunConfig(model="qwen3-tiny", adapter="lora", frozen_base="nf4_bf16").adapter_settings
    model = loading.build_model("qwen3-tiny", "sdpa", 0, torch.bfloat16, "meta", adapter)
    assert next(model.parameters()).device.type == "cpu"
    assert getattr(model, frozen_base.STAGED_DEVICE) == "meta"
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: False)
    with pytest.raises(ValueError, match="training it needs at least"):
        loading.build_model("qwen3-tiny", "sdpa", 0, torch.bfloat16, "meta", adapter)


def test_the_frozen_base_quantizes_each_linear_on_the_device_then_moves_the_rest(monkeypatch):
    """NF4 stood in for (bitsandbytes may be missing here): each linear reaches the quantizer on the device, and
    every parameter is there afterwards; the device is ``meta``, which a CPU can move a model to."""
    seen: list[str] = []

    def quantize(linear, compute_dtype):
        seen.append(linear.weight.device.type)
        return linear

    entry = dataclasses.replace(frozen_base.FROZEN_BASES["nf4_bf16"], status=lambda device: "")
    monkeypatch.setitem(frozen_base.FROZEN_BASES, "nf4_bf16", entry)
    monkeypatch.setattr(nf4_base, "nf4_linear", quantize)
    model = loading.build_model("qwen3-tiny", "sdpa", 0, torch.bfloat16, "cpu")
    setattr(model, frozen_base.STAGED_DEVICE, "meta")
    model = frozen_base.apply_frozen_base(model, "nf4_bf16")
    linears = sum(1 for m in model.modules() if type(m) is torch.nn.Linear) - 1  # the head stays as built
    assert seen == ["meta"] * linears and linears > 0
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert not hasattr(model, frozen_base.STAGED_DEVICE)


def test_a_model_on_the_host_is_quantized_onto_the_device_named(monkeypatch):
    """What an export tells a user with a GPU that holds only the quantized base: load on the CPU, name the GPU."""
    seen: list[str] = []
    entry = dataclasses.replace(frozen_base.FROZEN_BASES["nf4_bf16"], status=lambda device: "")
    monkeypatch.setitem(frozen_base.FROZEN_BASES, "nf4_bf16", entry)
    monkeypatch.setattr(nf4_base, "nf4_linear", lambda linear, dtype: seen.append(linear.weight.device.type) or linear)
    model = loading.build_model("qwen3-tiny", "sdpa", 0, torch.bfloat16, "cpu")
    model = frozen_base.apply_frozen_base(model, "nf4_bf16", device="meta")
    assert seen and set(seen) == {"meta"}
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_a_model_from_a_folder_stays_on_the_host_when_only_its_quantized_base_fits(monkeypatch, tmp_path):
    """The real loading path (``from_pretrained``) on a folder this test writes: kept on the host for the device
    its quantized base fits, moved to the device otherwise."""
    loading.build_model("qwen3-tiny", "sdpa", 0, torch.bfloat16, "cpu").save_pretrained(str(tmp_path))
    adapter = RunConfig(model="qwen3-tiny", adapter="lora", frozen_base="nf4_bf16").adapter_settings
    resolved = loading.resolve_model(str(tmp_path))
    assert not resolved.preset
    monkeypatch.setattr(loading, "device_memory_bytes", lambda device: 1)  # the bf16 weights do not fit
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: True)  # the quantized base does
    model = loading.build_resolved(resolved, "sdpa", 0, torch.bfloat16, "meta", adapter)
    assert next(model.parameters()).device.type == "cpu" and getattr(model, frozen_base.STAGED_DEVICE) == "meta"
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: False)
    model = loading.build_resolved(resolved, "sdpa", 0, torch.bfloat16, "meta", adapter)
    assert next(model.parameters()).device.type == "meta" and not hasattr(model, frozen_base.STAGED_DEVICE)


def _stand_in_nf4(monkeypatch) -> list[tuple[torch.Tensor, bool]]:
    """NF4 stood in for (bitsandbytes may be missing here): each linear passes through unquantized; the list gets a
    copy of each weight as it reaches the quantizer, and whether the model's initialisation had drawn it."""
    reached: list[tuple[torch.Tensor, bool]] = []

    def quantize(linear, dtype):
        reached.append((linear.weight.detach().clone(), bool(getattr(linear, "_is_hf_initialized", False))))
        return linear

    entry = dataclasses.replace(frozen_base.FROZEN_BASES["nf4_bf16"], status=lambda device: "")
    monkeypatch.setitem(frozen_base.FROZEN_BASES, "nf4_bf16", entry)
    monkeypatch.setattr(nf4_base, "nf4_linear", quantize)
    return reached


def _staged_build(monkeypatch, preset: str, device: str):
    adapter = RunConfig(model=preset, adapter="lora", frozen_base="nf4_bf16").adapter_settings
    monkeypatch.setattr(loading, "device_memory_bytes", lambda device: 1)  # nothing fits the device as built
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: True)  # the quantized base does
    model = loading.build_model(preset, "sdpa", 0, torch.bfloat16, device, adapter)
    monkeypatch.undo()
    return model


def _assert_drawn_like(name: str, param: torch.Tensor, reference: torch.Tensor) -> None:
    """``param`` drawn as the regular build drew ``reference``: shape and dtype, constants equal, random weights with
    its spread, a few random values at least not all alike."""
    drawn, expected = param.detach().float(), reference.detach().float()
    assert drawn.shape == expected.shape and param.dtype == reference.dtype, name
    assert torch.isfinite(drawn).all(), name
    if expected.min() == expected.max():  # a constant (norm weights, the gates' dt_bias)
        assert torch.equal(drawn, expected), name
    elif expected.numel() >= 256:  # a random weight: the same spread
        assert 0.8 <= drawn.std().item() / expected.std().item() <= 1.25, name
    else:  # a few random values (the gates' A_log): drawn, not left as allocated
        assert drawn.std() > 0, name


@pytest.mark.parametrize("preset", ["qwen3-tiny", "qwen3.5-tiny"])
def test_a_staged_preset_has_every_weight_drawn_as_the_regular_build_draws_it(monkeypatch, preset):
    """Built undrawn on the host and drawn module by module where it lands (here the host itself), every parameter
    has the regular build's shape, dtype and distribution: constants (norms, gates' biases) equal, random weights
    with its spread; buffers (rotary frequencies) equal; tied weights tied."""
    regular = loading.build_model(preset, "sdpa", 0, torch.bfloat16, "cpu")
    staged = _staged_build(monkeypatch, preset, "cpu")
    assert staged._nbhelpers_undrawn
    in_linears = {f"{name}.{p}" for name, m in staged.named_modules() if type(m) is torch.nn.Linear
                  for p, _ in m.named_parameters(recurse=False)}  # fmt: skip
    theirs = dict(regular.named_parameters())
    for name, param in staged.named_parameters():  # before the base moves it: all but the linears drawn on the host
        if name not in in_linears:  # what a kernel may copy first (fla's fused gated norm copies its weight)
            _assert_drawn_like(name, param, theirs[name])
    reached = _stand_in_nf4(monkeypatch)
    staged = frozen_base.apply_frozen_base(staged, "nf4_bf16")
    assert not hasattr(staged, "_nbhelpers_undrawn") and not hasattr(staged, frozen_base.STAGED_DEVICE)
    std = regular.config.get_text_config().initializer_range  # each linear drawn before it was quantized
    assert reached and all(drawn for _, drawn in reached)
    assert all(0.8 * std <= weight.float().std().item() <= 1.25 * std for weight, _ in reached)
    mine = dict(staged.named_parameters())
    assert mine.keys() == theirs.keys()
    for name, reference in theirs.items():
        _assert_drawn_like(name, mine[name], reference)
    for (name, buffer), (_, reference) in zip(staged.named_buffers(), regular.named_buffers(), strict=True):
        assert torch.equal(buffer, reference), name
    head, embeddings = staged.get_output_embeddings(), staged.get_input_embeddings()
    assert (head.weight is embeddings.weight) == regular.config.tie_word_embeddings


def test_a_staged_preset_draws_no_linear_on_the_host(monkeypatch):
    """Construction draws every module but the linears on the host (what a kernel may copy before the model moves);
    no linear layer (nearly all of a large model's weights) is drawn there: the frozen base draws each on the device
    it moves it to (``meta``), the head with the rest of the model."""
    from transformers.modeling_utils import PreTrainedModel

    drawn: list[tuple[str, bool, str]] = []  # (module name, a linear?, device) of every module drawn, in order
    initialize = PreTrainedModel._initialize_weights

    def recording(self, module, *args, **kwargs):
        own = list(module.parameters(recurse=False))
        if own and not getattr(module, "_is_hf_initialized", False):
            drawn.append((names.get(id(module), "?"), type(module) is torch.nn.Linear, own[0].device.type))
        return initialize(self, module, *args, **kwargs)

    names: dict[int, str] = {}
    monkeypatch.setattr(PreTrainedModel, "_initialize_weights", recording)
    adapter = RunConfig(model="qwen3.5-tiny", adapter="lora", frozen_base="nf4_bf16").adapter_settings
    monkeypatch.setattr(loading, "device_memory_bytes", lambda device: 1)
    monkeypatch.setattr(loading, "stages_on_host", lambda *args: True)
    model = loading.build_model("qwen3.5-tiny", "sdpa", 0, torch.bfloat16, "meta", adapter)
    with_params = [m for m in model.modules() if list(m.parameters(recurse=False))]
    others = [m for m in with_params if type(m) is not torch.nn.Linear]
    assert len(drawn) == len(others) and {(linear, device) for _, linear, device in drawn} == {(False, "cpu")}
    assert all(m._is_hf_initialized for m in others)
    assert not any(m._is_hf_initialized for m in with_params if type(m) is torch.nn.Linear)
    drawn.clear()
    names.update({id(m): name for name, m in model.named_modules()})
    reached = _stand_in_nf4(monkeypatch)
    model = frozen_base.apply_frozen_base(model, "nf4_bf16")
    assert reached and all(drawn for _, drawn in reached)  # drawn on the device before it was quantized
    linears = {name for name, m in model.named_modules() if type(m) is torch.nn.Linear}
    assert sorted(name for name, _, _ in drawn) == sorted(linears)  # each once, the head included
    assert {(linear, device) for _, linear, device in drawn} == {(True, "meta")}
    assert {p.device.type for p in model.parameters()} == {"meta"}


def _freed_as_replaced(replaced: list) -> tuple[list[int], object]:
    """How many replaced linears were still alive each time the quantizer was handed the next one."""
    alive = []

    def check(linear) -> None:
        alive.append(sum(1 for ref in replaced if ref() is not None))
        replaced.append(weakref.ref(linear))

    return alive, check


def test_each_linear_the_nf4_base_replaces_is_freed_before_the_next_is_quantized(monkeypatch):
    """On a 24 GiB device the 27B's bf16 linears (54 GB) fit only one at a time: none may outlive its swap."""
    replaced: list = []
    alive, check = _freed_as_replaced(replaced)
    monkeypatch.setattr(nf4_base, "nf4_linear", lambda linear, dtype: check(linear) or torch.nn.Identity())
    model = loading.build_model("qwen3-tiny", "sdpa", 0, torch.float32, "cpu")
    swapped = nf4_base.quantize_nf4(model, "cpu")
    assert swapped == len(alive) > 1 and alive == [0] * swapped, alive
    assert all(ref() is None for ref in replaced)


def test_each_linear_the_float8_base_replaces_is_freed_before_the_next_is_converted(monkeypatch):
    replaced: list = []
    alive, check = _freed_as_replaced(replaced)

    class Converted(torch.nn.Identity):
        def __init__(self, linear, emulate=False):
            super().__init__()
            check(linear)

    monkeypatch.setattr(float8_linear, "Float8FrozenLinear", Converted)
    model = loading.build_model("qwen3-tiny", "sdpa", 0, torch.float32, "cpu")
    swapped = float8_base.convert_frozen_float8(model, emulate=True, device="cpu")
    assert swapped == len(alive) > 1 and alive == [0] * swapped, alive
    assert all(ref() is None for ref in replaced)
