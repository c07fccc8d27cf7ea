"""Activation checkpointing's modes (nbhelpers.models.checkpointing): the layers each recomputes, and the offloaded
form: its hooks see exactly each checkpointed layer's input, the loss and gradients are those of full checkpointing,
a layer that is not checkpointing is left alone; the planner counts the inputs on the host, not the GPU; the config,
the trainer arguments and the exports say it."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from functools import partial

import pytest
import torch

from nbhelpers.analysis.exports import OFFLOADED_CHECKPOINTS, sft_trainer_code, trainer_code
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.memory_plan import MemorySettings, host_offload_bytes, plan_memory
from nbhelpers.measure.parallel import apply_checkpointing, prepare_model
from nbhelpers.measure.trainer_args import trainer_settings
from nbhelpers.models.checkpointing import (
    CHECKPOINTING_NAMES,
    CHECKPOINTINGS,
    CheckpointOffload,
    checkpointing_layers,
    offload_checkpoints,
    offload_prefetches,
    offloaded_bytes,
    recomputed_layers,
)
from nbhelpers.models.families import model_shape
from nbhelpers.models.loading import build_model, model_config
from nbhelpers.validation import ConfigError

BATCH, LENGTH = 2, 24


@pytest.fixture(scope="module", params=["qwen3-tiny", "qwen3.5-tiny"])  # dense, and a hybrid (the 27B's layers)
def template(request):
    return build_model(request.param, "sdpa", seed=0)


@pytest.fixture
def cpu_template(template):
    """The template where it runs on the CPU: with fla installed, transformers binds fla's Triton kernels to the
    hybrid's delta rule for CPU tensors too (as on the GPU machine), and they run only on a GPU."""
    if model_shape(template.config).linear_attention_layers and importlib.util.find_spec("fla") is not None:
        pytest.skip("fla is installed: transformers runs the hybrid's delta rule in fla's Triton kernels, GPU only")
    return template


def moved_shapes(offload: CheckpointOffload) -> list[tuple[int, ...]]:
    """Record the shape of each tensor ``offload`` moves to the host (not those it leaves where they are)."""
    moved: list[tuple[int, ...]] = []
    pack = offload.pack

    def record(tensor: torch.Tensor):
        packed = pack(tensor)
        if packed is not tensor:
            moved.append(tuple(tensor.shape))
        return packed

    offload.pack = record
    return moved


def every_layer(model) -> list[int]:
    return list(range(model.config.num_hidden_layers))


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (BATCH, LENGTH), generator=generator)
    return {"input_ids": ids, "labels": ids.clone()}


def loss_and_grads(model) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.train()
    loss = model(**batch()).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_each_mode_recomputes_its_layers_and_a_bad_mode_names_the_allowed():
    assert recomputed_layers(5, "none") == []
    assert recomputed_layers(5, "full") == [0, 1, 2, 3, 4]
    assert recomputed_layers(5, "every_k", 2) == [0, 2, 4]
    assert recomputed_layers(5, "offload") == recomputed_layers(5, "full")
    assert [name for name, entry in CHECKPOINTINGS.items() if entry.offloads] == ["offload"]
    with pytest.raises(ValueError, match="'none', 'full', 'every_k', 'offload'"):
        recomputed_layers(5, "sometimes")
    assert "offload" in CHECKPOINTING_NAMES
    with pytest.raises(ConfigError, match="activation_checkpointing"):
        RunConfig(activation_checkpointing="offloaded")


def test_offloaded_checkpoints_see_each_layer_input_and_give_full_checkpointings_numbers(cpu_template):
    template = cpu_template
    full = copy.deepcopy(template)
    apply_checkpointing(full, "full")
    expected_loss, expected_grads = loss_and_grads(full)

    model = copy.deepcopy(template)
    offload = offload_checkpoints(model, min_bytes=0)
    seen = moved_shapes(offload)
    assert apply_checkpointing(model, "offload") == every_layer(model)
    assert offload_checkpoints(model) is offload  # one offloader a model: its hooks are not added twice
    loss, grads = loss_and_grads(model)

    hidden = model.config.hidden_size
    assert seen == [(BATCH, LENGTH, hidden)] * model.config.num_hidden_layers  # each layer's input, nothing inside
    assert offload.packed_tensors == model.config.num_hidden_layers
    # the backward asks from the last layer's input: each after it was prefetched when the one after it was asked for
    assert offload.prefetched_tensors == offload_prefetches(model) == model.config.num_hidden_layers - 1
    from nbhelpers.measure.step import offload_and_cast_metrics

    assert offload_and_cast_metrics(model, RunConfig(), "cpu", steps_run=1) == {
        "checkpoint_offload_gib_per_step": offloaded_bytes(model) / 2**30,
        "checkpoint_prefetches_per_step": model.config.num_hidden_layers - 1}  # fmt: skip
    assert offloaded_bytes(model) == model.config.num_hidden_layers * BATCH * LENGTH * hidden * 4
    torch.testing.assert_close(loss, expected_loss, rtol=0, atol=0)  # the same kernels on the same inputs
    assert len(grads) == len(expected_grads)
    for grad, reference in zip(grads, expected_grads):
        torch.testing.assert_close(grad, reference, rtol=0, atol=0)


def checkpointing_call_as_in_transformers_5_17(model) -> None:
    """Make each decoder layer checkpoint its whole ``__call__`` (module hooks inside the checkpoint), as
    transformers up to 5.17 did (``GradientCheckpointingLayer.__call__``); 5.2x checkpoints ``forward``."""
    for layer in checkpointing_layers(model):
        kind = type(layer)
        forward = getattr(kind.forward, "__wrapped__", kind.forward)  # 5.2x's forward, without its checkpoint

        class CallCheckpointed(kind):
            def __call__(self, *args, **kwargs):
                if self.gradient_checkpointing and self.training:
                    return self._gradient_checkpointing_func(partial(torch.nn.Module.__call__, self, **kwargs), *args)
                return torch.nn.Module.__call__(self, *args, **kwargs)

        CallCheckpointed.forward = forward  # set after the class: 5.2x's __init_subclass__ would wrap it again
        layer.__class__ = CallCheckpointed


def test_where_checkpointing_wraps_the_whole_call_the_hooks_still_see_only_each_input(cpu_template):
    template = cpu_template
    full = copy.deepcopy(template)
    checkpointing_call_as_in_transformers_5_17(full)
    apply_checkpointing(full, "full")
    expected_loss, expected_grads = loss_and_grads(full)

    model = copy.deepcopy(template)
    checkpointing_call_as_in_transformers_5_17(model)
    offload = offload_checkpoints(model, min_bytes=0)  # before checkpointing is on, as a Trainer turns it on later
    seen = moved_shapes(offload)
    model.register_forward_pre_hook(lambda *_: seen.clear())
    apply_checkpointing(model, "offload")
    loss, grads = loss_and_grads(model)

    assert seen == [(BATCH, LENGTH, model.config.hidden_size)] * model.config.num_hidden_layers
    torch.testing.assert_close(loss, expected_loss, rtol=0, atol=0)
    for grad, reference in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, reference, rtol=0, atol=0)


def test_small_inputs_and_layers_that_are_not_checkpointing_stay_as_they_are(cpu_template):
    template = cpu_template
    model = copy.deepcopy(template)
    offload = offload_checkpoints(model)  # the default threshold: the tiny preset's inputs are under it
    apply_checkpointing(model, "offload")
    loss_and_grads(model)
    assert offload.packed_tensors == 0

    unchecked = copy.deepcopy(template)
    offload = offload_checkpoints(unchecked, min_bytes=0)  # hooks on, checkpointing off: nothing is the hooks' to save
    loss_and_grads(unchecked)
    with torch.no_grad():
        unchecked(**batch())
    assert offload.packed_tensors == 0


def test_empty_saved_tensors_stay_where_they_are():
    """torch up to 2.11 saves an empty placeholder beside each checkpoint's inputs: nothing to move or count."""
    offload = CheckpointOffload(min_bytes=0)
    placeholder = torch.empty((0,), requires_grad=True)
    assert offload.pack(placeholder) is placeholder and offload.packed_tensors == offload.packed_bytes == 0
    saved = torch.arange(6.0)
    assert offload.unpack(offload.pack(saved)).equal(saved) and offload.packed_bytes == saved.nbytes


def test_each_input_asked_for_starts_the_copy_back_of_the_one_saved_before_it():
    offload = CheckpointOffload(min_bytes=0)
    first, second, third = (torch.full((4,), float(i)) for i in range(3))
    packed = [offload.pack(t) for t in (first, second, third)]
    assert offload.unpack(packed[2]).equal(third) and offload.prefetched_tensors == 1
    assert packed[1].prefetched is not None and packed[0].prefetched is None  # one ahead, no more
    assert offload.unpack(packed[1]).equal(second) and packed[1].prefetched is None  # taken, not kept
    assert offload.unpack(packed[0]).equal(first) and offload.prefetched_tensors == 2
    assert offload.unpack(packed[1]).equal(second)  # asked for again: copied again


def test_without_prefetch_each_input_is_copied_back_when_asked_for(monkeypatch):
    from nbhelpers.models.checkpointing import PREFETCH_VARIABLE, prefetch_enabled

    offload = CheckpointOffload(min_bytes=0, prefetch=False)
    packed = [offload.pack(torch.full((4,), float(i))) for i in range(2)]
    assert offload.unpack(packed[1]).equal(torch.ones(4)) and packed[0].prefetched is None
    assert offload.unpack(packed[0]).equal(torch.zeros(4)) and offload.prefetched_tensors == 0
    assert prefetch_enabled()
    monkeypatch.setenv(PREFETCH_VARIABLE, "0")
    assert not prefetch_enabled()
    monkeypatch.setenv(PREFETCH_VARIABLE, "no")
    with pytest.raises(ValueError, match="NBHELPERS_OFFLOAD_PREFETCH='no' is not allowed: one of 1, 0"):
        prefetch_enabled()


def test_an_input_whose_graph_was_freed_is_neither_kept_nor_prefetched():
    offload = CheckpointOffload(min_bytes=0)
    offload.pack(torch.ones(4))  # a forward whose graph is freed without a backward
    kept = offload.pack(torch.zeros(4))
    assert offload.unpack(kept).equal(torch.zeros(4)) and offload.prefetched_tensors == 0
    assert offload._saved == []


def test_a_model_without_decoder_layers_is_refused():
    with pytest.raises(ValueError, match="nothing to offload"):
        offload_checkpoints(torch.nn.Sequential(torch.nn.Linear(4, 4)))


def test_prepare_model_records_the_offload(template):
    model = copy.deepcopy(template)
    config = RunConfig(model="qwen3-tiny", activation_checkpointing="offload")
    assert prepare_model(model, config, "fp32") == {"checkpointed_layers": every_layer(model),
                                                    "checkpoints_offloaded": True}  # fmt: skip
    assert "checkpoints_offloaded" not in prepare_model(copy.deepcopy(template), config.replace(
        activation_checkpointing="full"), "fp32")  # fmt: skip


def test_the_planner_keeps_offloaded_inputs_off_the_gpu_and_counts_them_on_the_host():
    shape = model_shape(model_config("qwen3-8b"))
    full = MemorySettings(checkpointing="full", tokens_per_gpu=8192)
    offloaded = dataclasses.replace(full, checkpointing="offload")
    inputs = 8192 * shape.hidden_size * 2  # one layer's bf16 input
    assert plan_memory(shape, full).activations - plan_memory(shape, offloaded).activations == (
        (shape.num_layers - 2) * inputs)  # fmt: skip  # two back on the GPU: the one recomputed, the next prefetched
    assert host_offload_bytes(shape, offloaded) == shape.num_layers * inputs
    assert host_offload_bytes(shape, full) == 0


def test_trainer_arguments_and_exports_carry_the_offload():
    config = RunConfig(model="qwen3-tiny", activation_checkpointing="offload", adapter="lora").to_dict()
    kwargs, comments = trainer_settings(config, "cuda")
    key = next(k for k in kwargs if k in ("activation_checkpointing", "gradient_checkpointing"))
    assert kwargs[key] is True and "offload_checkpoints" in comments[key]
    for code in (trainer_code(config), sft_trainer_code(config)):
        assert OFFLOADED_CHECKPOINTS[-1] in code
    assert OFFLOADED_CHECKPOINTS[-1] not in trainer_code(config | {"activation_checkpointing": "full"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the copies to pinned host memory and back run on a GPU")
def test_on_a_gpu_the_inputs_wait_in_pinned_host_memory_with_the_same_numbers(template):
    def step_on_gpu(model) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.train()
        loss = model(**{key: value.cuda() for key, value in batch().items()}).loss
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters() if p.grad is not None]

    full = copy.deepcopy(template).cuda()
    apply_checkpointing(full, "full")
    expected_loss, expected_grads = step_on_gpu(full)  # first, alone: a failure here is not the offload's

    model = copy.deepcopy(template).cuda()
    offload = offload_checkpoints(model, min_bytes=0)
    moved: list = []
    pack = offload.pack
    offload.pack = lambda tensor: (packed := pack(tensor)) is not tensor and moved.append(packed) or packed
    apply_checkpointing(model, "offload")
    loss, grads = step_on_gpu(model)
    assert len(moved) == model.config.num_hidden_layers
    assert all(p.host.is_pinned() for p in moved)  # moved, pinned
    torch.testing.assert_close(loss, expected_loss, rtol=0, atol=0)
    for grad, reference in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, reference, rtol=0, atol=0)
