"""A measured configuration as ready-to-run trainer code: a Trainer on the measured batches, TRL's SFTTrainer.

The settings themselves (``TrainingArguments`` / ``SFTConfig`` keyword arguments with their comments) come from
:mod:`nbhelpers.measure.trainer_args`; this module writes them out as Python source.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from nbhelpers.data.strategies import PaddingSettings, trainer_collator_code
from nbhelpers.models.families import packs_with_boundaries


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


def trainer_code(config: Mapping[str, Any]) -> str:
    """Runnable given ``model``, ``tokenizer``, ``training_args`` and ``train_dataset`` (rows of ``input_ids`` and
    ``labels``, prompt tokens -100): a Trainer whose batches are the measured strategy's plan."""
    settings = PaddingSettings.from_config(config)
    fields = ", ".join(f"{f.name}={literal(getattr(settings, f.name))}" for f in dataclasses.fields(settings))
    boundaries = settings.entry.packed and packs_with_boundaries(str(config.get("model", "")))
    lines = [
        "from nbhelpers.data.strategies import PaddingSettings",
        "from nbhelpers.data.trainer_batching import StrategyTrainer",
        "",
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
    return "\n".join(lines)


def sft_trainer_code() -> str:
    """Runnable given ``model``, ``tokenizer``, ``sft_config`` and ``train_dataset`` (``input_ids`` and ``labels``)."""
    return "\n".join(
        [
            "from trl import SFTTrainer",
            "",
            "trainer = SFTTrainer(",
            "    model=model, args=sft_config, train_dataset=train_dataset, processing_class=tokenizer",
            ")",
        ]
    )


__all__ = ["call_code", "literal", "sft_trainer_code", "trainer_code"]
