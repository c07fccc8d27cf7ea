"""The training loops a configuration can be measured in, in one table: the workbook's step, TRL's SFTTrainer, Unsloth.

A TRL entry is a peer row: TRL's ``SFTTrainer`` on the same samples, timed the same way (one untimed pass, one
timed epoch, real tokens per second), so its record is of the same workload and divides with the workbook's.
Each TRL entry says which ``SFTConfig`` flags it sets; :mod:`nbhelpers.measure.trl_loop` runs it. The Unsloth entry
runs in :mod:`nbhelpers.measure.unsloth_loop`, in a fresh process whose own site folder (``site_variable``) comes
first on its ``PYTHONPATH``: Unsloth pins other versions of transformers and TRL than the workbook's.

Adding an engine is one entry in :data:`ENGINES`. Light at import (RunConfig reads :data:`ENGINE_NAMES`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.models.frozen_base import BF16_BASE, FROZEN_BASE_NAMES, FROZEN_BASES

from .trainer_args import Settings, sft_settings, spelled

SftFlags = Callable[[Mapping[str, Any], str], Settings]  # (config dict, device type) -> SFTConfig flags, comments
UNSLOTH_LOOP = "unsloth"  # Engine.loop of the Unsloth entry (nbhelpers.measure.unsloth_loop)
UNSLOTH_SITE_VARIABLE = "NBHELPERS_UNSLOTH_SITE"  # a `pip install --target` folder (scripts/gpu_unsloth_wheels.sh)


class EngineRefusal(RuntimeError):
    """A peer engine cannot run this workload here; the message is the failed record's reason, decided before any
    work."""


@dataclass(frozen=True)
class Engine:
    """One training loop: the workbook's own step, TRL's SFTTrainer with some flags, or Unsloth's."""

    name: str
    label: str  # the records' label (peer entries)
    description: str
    sft_flags: SftFlags | None = None  # None: the workbook's own loop (or the loop named by ``loop``)
    loop: str = ""  # "" : the workbook's step or TRL (by sft_flags); UNSLOTH_LOOP: nbhelpers.measure.unsloth_loop
    site_variable: str = ""  # environment variable naming a site folder that goes first on its process's PYTHONPATH
    frozen_bases: tuple[str, ...] = (BF16_BASE,)  # the frozen bases (nbhelpers.models.frozen_base) it loads
    packs_to_budget: bool = False  # one row of the configuration's token budget a step (not batch x max_length)

    @property
    def is_trl(self) -> bool:
        return self.sft_flags is not None

    @property
    def needs_fresh_process(self) -> bool:
        """Whether it must start in a process of its own (never a spare worker, which imported transformers)."""
        return bool(self.site_variable) or self.loop == UNSLOTH_LOOP


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
# A TRL peer's QLoRA as TRL's docs set it up (a BitsAndBytesConfig NF4 load in bf16): NF4 linears, the rest as loaded
# (TRL 1.16's SFTTrainer runs no k-bit upcast; it casts the adapters to bf16); the export's row ("trl") takes the
# base the workbook measured, which the export writes (analysis.exports.frozen_base_code).
TRL_PEER_BASES = (BF16_BASE, "nf4_bf16")
ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        Engine(WORKBOOK, "", "the workbook's measured step (nbhelpers.measure.step)",
               frozen_bases=FROZEN_BASE_NAMES),
        Engine("trl", "TRL from the export", "TRL SFTTrainer with this configuration's exported SFTConfig",
               export_flags, frozen_bases=FROZEN_BASE_NAMES),
        Engine("trl_defaults", "TRL SFTTrainer defaults",
               "TRL SFTTrainer defaults: pads to the longest row, gradient checkpointing on", defaults_flags,
               frozen_bases=TRL_PEER_BASES),
        Engine("trl_best", "TRL best flags (padding_free + Liger, no checkpointing)",
               "TRL padding_free + use_liger_kernel, gradient checkpointing off", best_flags,
               frozen_bases=TRL_PEER_BASES),
        Engine("trl_packing", "TRL packing (bfd) + Liger, no checkpointing",
               "TRL packing='bfd' into rows of the token budget + use_liger_kernel, gradient checkpointing off",
               packing_flags, frozen_bases=TRL_PEER_BASES, packs_to_budget=True),
        Engine("unsloth", "Unsloth (FastLanguageModel, its LoRA, checkpointing and packing)",
               "Unsloth's FastLanguageModel and get_peft_model with its recommended settings, TRL's SFTTrainer as "
               "Unsloth patches it, in its own process and site folder", loop=UNSLOTH_LOOP,
               site_variable=UNSLOTH_SITE_VARIABLE, frozen_bases=(BF16_BASE, "nf4", "nf4_bf16"),  # 4-bit: its QLoRA
               packs_to_budget=True),
    )
}  # fmt: skip
ENGINE_NAMES = tuple(ENGINES)


def batch_label(engine: str, batch_size: int, max_length: int, token_budget: int) -> str:
    """How a row on ``engine`` batches, as its label says it: the token budget where the engine packs one row of it a
    step, else batch size x max length."""
    return f"budget {token_budget}" if ENGINES[engine].packs_to_budget else f"b{batch_size}x{max_length}"


def peer_base(engine: str, frozen_base: str) -> str:
    """The frozen base a peer row loads for a workload on ``frozen_base``: the same where the engine loads it, else
    the engine's base with the same quantized weights (NF4 for NF4: a TRL user's 4-bit load runs no k-bit upcast),
    else the base as built (TRL has no float8 base)."""
    loads = ENGINES[engine].frozen_bases
    if frozen_base in loads:
        return frozen_base
    weights = FROZEN_BASES[frozen_base].stored_bytes
    same = [name for name in loads if weights is not None and FROZEN_BASES[name].stored_bytes is weights]
    return same[0] if same else BF16_BASE


RUNS_WORKBOOK_SETUP = (WORKBOOK, "trl")  # the workbook's step, and TRL running its export (which sets the model up so)


def peer_lora_epilogue(engine: str, setting: str) -> str:
    """The LoRA forward a row on ``engine`` runs for a workload whose ``lora_epilogue`` is ``setting``: as set for the
    workbook's step and its export's TRL run; every other tool runs its own, recorded as PEFT's ("peft")."""
    return setting if engine in RUNS_WORKBOOK_SETUP else "peft"


def peer_base_note(engine: str, frozen_base: str) -> tuple[str, str]:
    """:func:`peer_base`, and what a peer row's label adds for it ('' where it is the workload's own base)."""
    base = peer_base(engine, frozen_base)
    return base, "" if base == frozen_base else f", {base} base"
TRL_ENGINES = tuple(name for name, e in ENGINES.items() if e.is_trl)
PEER_ENGINES = tuple(name for name in ENGINES if name != WORKBOOK)  # what PEER_ROWS may name


def engine_of(config: Mapping[str, Any]) -> Engine:
    """A config's engine (records written before the field: the workbook's)."""
    return ENGINES.get(str(config.get("engine", WORKBOOK)), ENGINES[WORKBOOK])


def site_env(engine: Engine, environ: Mapping[str, str]) -> dict[str, str]:
    """What the engine's process adds to ``environ``: ``PYTHONPATH`` with its own site folder first, where it has one
    and ``environ`` names it ({} otherwise: its process then finds only the workbook's packages)."""
    site = environ.get(engine.site_variable, "") if engine.site_variable else ""
    if not site:
        return {}
    rest = [part for part in environ.get("PYTHONPATH", "").split(os.pathsep) if part and part != site]
    return {"PYTHONPATH": os.pathsep.join([site, *rest])}


__all__ = [
    "ENGINES", "ENGINE_NAMES", "PEER_ENGINES", "TRL_ENGINES", "UNSLOTH_LOOP", "UNSLOTH_SITE_VARIABLE", "WORKBOOK",
    "Engine", "EngineRefusal", "engine_of", "site_env",
]  # fmt: skip
