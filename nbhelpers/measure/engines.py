"""The training loops a configuration can be measured in, in one table: the workbook's step or TRL's SFTTrainer.

A TRL entry is a peer row: TRL's ``SFTTrainer`` on the same samples, timed the same way (one untimed pass, one
timed epoch, real tokens per second), so its record is of the same workload and divides with the workbook's.
Each TRL entry says which ``SFTConfig`` flags it sets; :mod:`nbhelpers.measure.trl_loop` runs it.

Adding an engine is one entry in :data:`ENGINES`. Light at import (RunConfig reads :data:`ENGINE_NAMES`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.strategies import PaddingSettings

from .trainer_args import Settings, sft_settings, spelled

SftFlags = Callable[[Mapping[str, Any], str], Settings]  # (config dict, device type) -> SFTConfig flags, comments


@dataclass(frozen=True)
class Engine:
    """One training loop: the workbook's own step, or TRL's SFTTrainer with some flags."""

    name: str
    label: str  # the records' label (TRL entries)
    description: str
    sft_flags: SftFlags | None = None  # None: the workbook's own loop

    @property
    def is_trl(self) -> bool:
        return self.sft_flags is not None


def _no_checkpointing() -> dict[str, bool]:
    """Checkpointing off, under the name the installed transformers takes (TRL turns it on by default)."""
    return {spelled("activation_checkpointing", "gradient_checkpointing"): False}


def defaults_flags(config: Mapping[str, Any], device_type: str) -> Settings:
    """What a user writes first: the batch size and max_length; everything else TRL's default."""
    return (
        {"per_device_train_batch_size": int(config.get("batch_size", 1)), "max_length": int(config["max_length"])},
        {},
    )


def best_flags(config: Mapping[str, Any], device_type: str) -> Settings:
    """TRL's own best flags: padding-free batches, Liger, no gradient checkpointing."""
    kwargs, comments = defaults_flags(config, device_type)
    kwargs.update(padding_free=True, max_length=None, use_liger_kernel=True, **_no_checkpointing())
    return kwargs, comments


def packing_flags(config: Mapping[str, Any], device_type: str) -> Settings:
    """TRL's packing (bfd) into rows of the configuration's token budget, Liger, no gradient checkpointing."""
    budget = PaddingSettings.from_config(config).effective_token_budget
    kwargs = {"per_device_train_batch_size": 1, "max_length": budget, "packing": True, "packing_strategy": "bfd",
              "use_liger_kernel": True, **_no_checkpointing()}  # fmt: skip
    return kwargs, {}


def export_flags(config: Mapping[str, Any], device_type: str) -> Settings:
    """The configuration's own exported SFTConfig (what the recommendation tells a user to paste)."""
    return sft_settings(config, device_type)


WORKBOOK = "workbook"
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine(WORKBOOK, "", "the workbook's measured step (nbhelpers.measure.step)"),
        Engine("trl", "TRL from the export", "TRL SFTTrainer with this configuration's exported SFTConfig",
               export_flags),
        Engine("trl_defaults", "TRL SFTTrainer defaults",
               "TRL SFTTrainer defaults: pads to the longest row, gradient checkpointing on", defaults_flags),
        Engine("trl_best", "TRL best flags (padding_free + Liger, no checkpointing)",
               "TRL padding_free + use_liger_kernel, gradient checkpointing off", best_flags),
        Engine("trl_packing", "TRL packing (bfd) + Liger, no checkpointing",
               "TRL packing='bfd' into rows of the token budget + use_liger_kernel, gradient checkpointing off",
               packing_flags),
    )
}  # fmt: skip
ENGINE_NAMES = tuple(ENGINES)
TRL_ENGINES = tuple(name for name, e in ENGINES.items() if e.is_trl)


def engine_of(config: Mapping[str, Any]) -> Engine:
    """A config's engine (records written before the field: the workbook's)."""
    return ENGINES.get(str(config.get("engine", WORKBOOK)), ENGINES[WORKBOOK])


__all__ = ["ENGINES", "ENGINE_NAMES", "TRL_ENGINES", "WORKBOOK", "Engine", "engine_of"]
