"""PEFT's cast of each adapted layer's input to the fp32 adapters, left out under bf16 autocast: the same loss and
adapter gradients to the bit, fewer elementwise copies, and the setting's rule in RunConfig, the computation key,
the record and the exports."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nbhelpers.analysis.exports import UNCAST_INPUTS, sft_trainer_code, trainer_code
from nbhelpers.analysis.identity import computation_key
from nbhelpers.measure.config import RunConfig, skips_lora_input_cast
from nbhelpers.models.adapters import wrap_model
from nbhelpers.models.loading import build_model, resolve_model
from nbhelpers.validation import ConfigError


class CopyCounter(TorchDispatchMode):
    """Counts the dtype copies (``aten._to_copy``) the ops under it run."""

    def __init__(self) -> None:
        super().__init__()
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default:
            self.copies += 1
        return func(*args, **(kwargs or {}))


def _adapted(cast_inputs: bool) -> torch.nn.Module:
    """qwen3-tiny as the GPU step has it: a bf16 frozen base, fp32 LoRA adapters (B random, so they matter)."""
    config = RunConfig(model="qwen3-tiny", adapter="lora", lora_rank=4, lora_alpha=8, device="cpu")
    model = build_model(resolve_model(config.model).source, "sdpa", 0, torch.bfloat16, "cpu")
    model.train()
    settings = dataclasses.replace(config.adapter_settings, cast_inputs=cast_inputs)
    adapted = wrap_model(model, settings)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return adapted


def _step(model: torch.nn.Module) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    ids = torch.randint(0, 1000, (2, 24), generator=torch.Generator().manual_seed(5))
    counter = CopyCounter()
    with torch.autocast("cpu", dtype=torch.bfloat16), counter:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads, counter.copies


def test_leaving_the_cast_to_autocast_changes_no_number_and_saves_copies():
    cast_loss, cast_grads, cast_copies = _step(_adapted(cast_inputs=True))
    uncast = _adapted(cast_inputs=False)
    loss, grads, copies = _step(uncast)
    assert torch.equal(loss, cast_loss)
    assert grads.keys() == cast_grads.keys() and grads
    differ = [n for n in grads if not torch.equal(grads[n], cast_grads[n])]
    assert not differ, differ[:3]
    layers = sum(1 for m in uncast.modules() if getattr(m, "cast_input_dtype_enabled", True) is False)
    assert layers > 0
    # each adapted layer: bf16 -> fp32 (PEFT) and fp32 -> bf16 (autocast) forward, both again for the gradient
    assert cast_copies - copies >= 2 * layers, (cast_copies, copies, layers)


@pytest.mark.parametrize(
    ("fields", "skipped"),
    [
        ({"adapter": "lora", "kernels": "eager"}, False),  # auto: the baseline stays stock PEFT
        ({"adapter": "lora", "kernels": "liger"}, True),  # auto: skipped with a fused backend
        ({"adapter": "lora", "kernels": "eager", "lora_input_cast": "off"}, True),
        ({"adapter": "lora", "kernels": "liger", "lora_input_cast": "on"}, False),
        ({"adapter": "none", "kernels": "liger"}, False),  # no adapter, nothing to cast
        ({"adapter": "lora", "kernels": "liger", "dtype": "bf16"}, False),  # no autocast to do the cast
    ],
)
def test_the_rule_in_run_config_and_stored_records(fields, skipped):
    config = RunConfig(device="cpu", **fields)
    assert config.adapter_settings.cast_inputs is not skipped
    assert skips_lora_input_cast(config.to_dict()) is skipped


def test_an_older_record_without_the_field_cast_as_peft_does():
    assert not skips_lora_input_cast({"adapter": "lora", "kernels": "liger"})


def test_off_with_a_pure_bf16_step_and_an_unknown_value_name_the_parameter():
    with pytest.raises(ConfigError, match="lora_input_cast"):
        RunConfig(adapter="lora", dtype="bf16", lora_input_cast="off")
    with pytest.raises(ConfigError, match="lora_input_cast.*auto"):
        RunConfig(adapter="lora", lora_input_cast="never")


def test_the_computation_key_resolves_auto():
    auto = RunConfig(adapter="lora", kernels="liger").to_dict()
    off = RunConfig(adapter="lora", kernels="liger", lora_input_cast="off").to_dict()
    on = RunConfig(adapter="lora", kernels="liger", lora_input_cast="on").to_dict()
    assert computation_key(auto) == computation_key(off) != computation_key(on)


def test_the_exports_turn_the_cast_off_as_measured_and_compile():
    skipped = RunConfig(adapter="lora", kernels="liger", padding="packed").to_dict()
    kept = RunConfig(adapter="lora", kernels="eager", padding="packed").to_dict()
    for code in (trainer_code, sft_trainer_code):
        text = code(skipped)
        assert "\n".join(UNCAST_INPUTS) in text and text.index("trainer = ") < text.index("BaseTunerLayer)")
        compile(text, "<export>", "exec")
        assert "cast_input_dtype_enabled" not in code(kept)
