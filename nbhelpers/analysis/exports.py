"""A measured configuration as ready-to-run trainer code: a Trainer on the measured batches, TRL's SFTTrainer.

A configuration measured with an adapter (LoRA) exports it as PEFT's config: the Trainer wraps the model with
``get_peft_model`` and SFTTrainer takes ``peft_config=``, so both train the adapters on a frozen base as measured.

The settings themselves (``TrainingArguments`` / ``SFTConfig`` keyword arguments with their comments) come from
:mod:`nbhelpers.measure.trainer_args`; this module writes them out as Python source.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from nbhelpers.data.strategies import trainer_collator_code
from nbhelpers.measure.config import lora_forward, skips_lora_input_cast
from nbhelpers.measure.padding import padding_settings_of
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.checkpointing import CHECKPOINTINGS
from nbhelpers.models.families import packs_with_boundaries
from nbhelpers.models.frozen_base import FROZEN_BASES


def literal(value: Any) -> str:
    """Python source for a plain value, strings in double quotes (as ruff formats them)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    return repr(value)


def call_code(target: str, func: str, kwargs: Mapping[str, Any], comments: Mapping[str, str]) -> str:
    """``target = func(key=value,  # comment ...)``, one keyword argument a line."""
    lines = [f"{target} = {func}("]
    for key, value in kwargs.items():
        line = f"    {key}={literal(value)},"
        if comments.get(key):
            line += f"  # {comments[key]}"
        lines.append(line)
    lines.append(")")
    return "\n".join(lines)


def peft_config_code(config: Mapping[str, Any], names: str = "") -> tuple[list[str], list[str]]:
    """The import of the measured adapter's PEFT config class (and ``names`` from peft), and the lines that build
    ``peft_config`` (PEFT's ``LoraConfig``); two empty lists without an adapter."""
    adapter = AdapterSettings.from_config(config)
    if not adapter.entry.peft_class:
        return [], []
    comments = {"target_modules": "as measured (PEFT's spelling)", "r": f"{adapter.name}, as measured"}
    imports = ", ".join(n for n in (adapter.entry.peft_class, names) if n)
    kwargs = adapter.entry.peft_kwargs(adapter)
    return [f"from peft import {imports}"], [call_code("peft_config", adapter.entry.peft_class, kwargs, comments)]


# After the trainer wraps the model: each adapted layer's input left in bf16 for autocast, as measured (what PEFT's
# helpers.disable_input_dtype_casting does inside a with block; models.adapters.skip_input_casts in the step).
UNCAST_INPUTS = [
    "from peft.tuners.tuners_utils import BaseTunerLayer",
    "",
    "for layer in trainer.model.modules():  # as measured: bf16 autocast casts each adapter's input (same numbers)",
    "    if isinstance(layer, BaseTunerLayer):",
    "        layer.cast_input_dtype_enabled = False  # no fp32 round trip per adapted layer",
]

# After the trainer wraps the model: LoRA's scale and add inside the GEMM, as measured (models.lora_epilogue).
FUSED_EPILOGUES = [
    "from nbhelpers.models.lora_epilogue import fuse_lora_epilogues",
    "",
    "fuse_lora_epilogues(trainer.model)  # as measured: each LoRA product added by the GEMM into the base's output",
]
# The same with each LoRA linear as one autograd function (models.lora_function), as measured.
ONE_FUNCTION_LORA = [
    "from nbhelpers.models.lora_epilogue import fuse_lora_epilogues",
    "",
    "fuse_lora_epilogues(trainer.model, one_function=True)  # as measured: each LoRA linear one autograd function",
]


# After the trainer wraps the model: each checkpointed layer's input in pinned host memory until its recompute.
OFFLOADED_CHECKPOINTS = [
    "from nbhelpers.models.checkpointing import offload_checkpoints",
    "",
    "offload_checkpoints(trainer.model)  # as measured: checkpointed layers' inputs wait on the host, not the GPU",
]


def frozen_base_code(config: Mapping[str, Any]) -> list[str]:
    """Before the adapter wraps the model: the measured quantized frozen base (none for the base as built)."""
    adapter = AdapterSettings.from_config(config)
    if not adapter.entry.frozen_base or not FROZEN_BASES[adapter.frozen_base].quantized:
        return []
    name = adapter.frozen_base
    return [
        "",
        "from nbhelpers.models.frozen_base import apply_frozen_base",
        "",
        f"# the frozen base as measured (frozen_base={name!r}); a model loaded on the CPU for a GPU that holds only",
        f"# its quantized form: apply_frozen_base(model, {name!r}, device='cuda')",
        f"model = apply_frozen_base(model, {name!r})",
        "",
    ]


def after_wrap_code(config: Mapping[str, Any]) -> list[str]:
    """What runs on the wrapped model after the trainer is made, as the measured step ran it."""
    lines = ["", *UNCAST_INPUTS] if skips_lora_input_cast(config) else []
    forward = lora_forward(config)
    fused = {"fused": FUSED_EPILOGUES, "function": ONE_FUNCTION_LORA}.get(forward, [])
    lines += ["", *fused] if fused else []
    offloads = CHECKPOINTINGS[str(config.get("activation_checkpointing", "none"))].offloads
    return lines + (["", *OFFLOADED_CHECKPOINTS] if offloads else [])


def trainer_code(config: Mapping[str, Any]) -> str:
    """Runnable given ``model``, ``tokenizer``, ``training_args`` and ``train_dataset`` (rows of ``input_ids`` and
    ``labels``, prompt tokens -100): a Trainer whose batches are the measured strategy's plan (on the model
    wrapped by ``get_peft_model`` when an adapter was measured; the wrap changes ``model`` in place)."""
    settings = padding_settings_of(config)  # with the kernels' token multiple (float8: 16)
    fields = ", ".join(f"{f.name}={literal(getattr(settings, f.name))}" for f in dataclasses.fields(settings))
    boundaries = settings.entry.packed and packs_with_boundaries(str(config.get("model", "")))
    imports, adapter = peft_config_code(config, "get_peft_model")
    if adapter:
        adapter += [*frozen_base_code(config),
                    "model = get_peft_model(model, peft_config, autocast_adapter_dtype=True)  # fp32 adapters", ""]
    lines = imports + [
        "from nbhelpers.data.strategies import PaddingSettings",
        "from nbhelpers.data.trainer_batching import StrategyTrainer",
        "",
        *adapter,
        f"# batches as measured (padding={settings.strategy!r}): the workbook's sampler and collator",
        f"padding = PaddingSettings({fields})",
        "trainer = StrategyTrainer(",
        "    model=model, args=training_args, train_dataset=train_dataset, processing_class=tokenizer,",
        "    padding=padding,",
    ]
    if boundaries:
        lines.append("    boundaries=True,  # packed rows carry their boundaries: linear-attention layers need them")
    lines.append(")")
    if collator := trainer_collator_code(settings).split("  #")[0]:
        lines.append(f"# the same batches without nbhelpers: Trainer(..., data_collator={collator})")
    return "\n".join(lines + after_wrap_code(config))


def sft_trainer_code(config: Mapping[str, Any] | None = None) -> str:
    """Runnable given ``model``, ``tokenizer``, ``sft_config`` and ``train_dataset`` (``input_ids`` and ``labels``);
    with a measured adapter, SFTTrainer wraps the model itself (``peft_config=``)."""
    imports, adapter = peft_config_code(config or {})
    arguments = "    model=model, args=sft_config, train_dataset=train_dataset, processing_class=tokenizer"
    call = ["trainer = SFTTrainer(", arguments]
    if adapter:
        call[-1] += ","
        call.append("    peft_config=peft_config,  # TRL wraps the model: a frozen base, the adapters trained")
    body = [*adapter, *(frozen_base_code(config or {}) or [""])] if adapter else []
    after = after_wrap_code(config or {})
    return "\n".join([*imports, "from trl import SFTTrainer", "", *body, *call, ")", *after])


__all__ = [
    "FUSED_EPILOGUES", "UNCAST_INPUTS", "after_wrap_code", "call_code", "frozen_base_code", "literal",
    "peft_config_code", "sft_trainer_code", "trainer_code",
]  # fmt: skip
