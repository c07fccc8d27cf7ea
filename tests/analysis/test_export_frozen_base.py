"""The exports set up the frozen base the workbook measured (a quantized base before the adapter wraps the model),
and nothing for the base as built."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.exports import frozen_base_code, sft_trainer_code, trainer_code
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES


@pytest.mark.parametrize("base", [b for b in FROZEN_BASE_NAMES if b != "bf16"])
def test_a_quantized_base_is_applied_before_the_adapter_wraps_the_model(base):
    config = RunConfig(adapter="lora", frozen_base=base, kernels="liger", padding="packed").to_dict()
    call = f"model = apply_frozen_base(model, {base!r})"
    trainer = trainer_code(config)
    assert call in trainer and trainer.index(call) < trainer.index("model = get_peft_model(")
    sft = sft_trainer_code(config)
    assert call in sft and sft.index(call) < sft.index("trainer = SFTTrainer(")
    for text in (trainer, sft):
        compile(text, "<export>", "exec")


def test_the_base_as_built_needs_no_line():
    config = RunConfig(adapter="lora", kernels="liger", padding="packed").to_dict()
    assert frozen_base_code(config) == []
    assert "apply_frozen_base" not in trainer_code(config) + sft_trainer_code(config)
    assert frozen_base_code(RunConfig().to_dict()) == []  # no adapter, no frozen base
