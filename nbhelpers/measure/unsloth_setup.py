"""What the Unsloth engine hands Unsloth for a workload, and why it cannot run one: pure, light at import.

Read from Unsloth 2026.10.9 and unsloth-zoo 2026.10.9 (their wheels' source) and Unsloth's own notebooks and docs:

- ``FastLanguageModel.from_pretrained`` loads Qwen3 (``model_type`` "qwen3") through ``FastQwen3Model``, its own
  Qwen3 path, and anything else through ``FastModel``: the Qwen3.5/3.8 hybrids ("qwen3_5*", Gated DeltaNet) run
  transformers' modeling compiled by unsloth-zoo with the fla 0.5.1 kernels unsloth-zoo bundles
  (``unsloth/models/loader.py``, ``unsloth_zoo/temporary_patches/fla_vendor.py``). Its default ``load_in_4bit=True``
  is QLoRA; a bf16 frozen base is ``load_in_4bit=False, load_in_16bit=True``, an NF4 one (``nf4``, ``nf4_bf16``)
  ``load_in_4bit=True``.
- ``get_peft_model``: the rank, alpha and targets of the workload; ``lora_dropout=0`` and ``bias="none"`` ("optimized"
  in the Qwen3 notebooks); ``use_gradient_checkpointing="unsloth"`` (its default there and in from_pretrained).
  Targets are handed by name: Unsloth moves an ``lm_head`` target to ``modules_to_save`` (a full copy that trains),
  so a workload that targets it is refused.
- Batches: padding-free is Unsloth's default; ``packing=True`` packs rows (its "3x faster training with packing"
  docs); a hybrid packs only where its varlen shim's probe passes on CUDA (``unsloth/trainer.py``), else Unsloth
  turns packing off itself and the record says so. Packed rows hold the workload's token budget, one row a step,
  as TRL's packing entry does. ``optim="adamw_8bit"`` is the notebooks' optimizer (bitsandbytes).
- On a machine without a GPU, Unsloth 2026.10 trains through stock transformers, PEFT and TRL
  (``unsloth/_cpu_init.py``): no Unsloth step to measure, so a CPU is refused.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.machine import package_versions
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.families import MODEL_PRESETS, family_of_preset
from nbhelpers.models.frozen_base import BF16_BASE
from nbhelpers.models.linears import parse_targets, targeted
from nbhelpers.models.shape import ModelShape

from .engines import ENGINES, UNSLOTH_SITE_VARIABLE
from .trainer_args import resolved_dtype

WHEELS_SCRIPT = "scripts/gpu_unsloth_wheels.sh"
# How Unsloth 2026.10.9 loads each model_type the workbook's families make (else: not one it is run on here).
LOADERS: dict[str, str] = {
    "qwen3": "FastQwen3Model (Unsloth's Qwen3 path: its RoPE, SwiGLU, RMSNorm and LoRA kernels)",
    "qwen3_5_text": "FastModel (transformers' Qwen3.5 text model compiled by unsloth-zoo, its bundled fla kernels)",
}
REQUIRED = ("unsloth", "unsloth_zoo", "bitsandbytes", "trl", "datasets")  # importable in the engine's process
PINNED = ("transformers", "trl", "peft", "torch", "accelerate", "datasets", "bitsandbytes")  # checked against Unsloth
VERSION_PACKAGES = ("unsloth", "unsloth_zoo", "transformers", "trl", "peft", "bitsandbytes", "torch", "triton",
                    "accelerate", "datasets")  # fmt: skip
BF16_DTYPES = ("bf16", "bf16-autocast")
FROZEN_BASES = ENGINES["unsloth"].frozen_bases  # the workload's frozen base -> load_in_16bit or load_in_4bit
FOUR_BIT_BASES = tuple(b for b in FROZEN_BASES if b != BF16_BASE)  # NF4: load_in_4bit (its rest stays bf16)
BYTES_PER_WEIGHT = 2  # bf16
SAVE_MARGIN_BYTES = 2 * 2**30  # tokenizer, config and room left on the disk


@dataclass(frozen=True)
class UnslothPlan:
    """The keyword arguments of each Unsloth call for one workload, and where each setting comes from."""

    from_pretrained: dict[str, Any]  # FastLanguageModel.from_pretrained (model_name added at run time)
    peft: dict[str, Any]  # FastLanguageModel.get_peft_model
    sft: dict[str, Any]  # SFTConfig flags (the harness adds epochs, logging, seed and the workload's dtype)
    sources: dict[str, str] = field(default_factory=dict)


def preset_shape(preset: str) -> ModelShape:
    """A preset's shape from its table values, without transformers (it must not be imported before Unsloth)."""
    return family_of_preset(preset).shape(SimpleNamespace(**MODEL_PRESETS[preset]))


def preset_model_type(preset: str) -> str:
    """The ``model_type`` a preset's saved config.json carries (its family's first)."""
    return family_of_preset(preset).model_types[0]


def target_names(shape: ModelShape, targets: str) -> list[str]:
    """The leaf names of the linear modules the workload's ``lora_targets`` picks on ``shape`` ("all-linear": every
    nn.Linear but the lm head, as PEFT reads it), in the model's order: what get_peft_model is handed."""
    names: list[str] = []
    for module in targeted(shape, parse_targets(targets)):
        leaf = module.path.rsplit(".", 1)[-1]
        if leaf not in names:
            names.append(leaf)
    return names


def unsloth_plan(config: Mapping[str, Any], shape: ModelShape) -> UnslothPlan:
    """Unsloth's recommended settings for a LoRA workload (a RunConfig's dict) on a model of ``shape``."""
    adapter = AdapterSettings.from_config(config)
    budget = PaddingSettings.from_config(config).effective_token_budget
    seed = int(config.get("seed", 0))
    checkpointing = "unsloth"
    four_bit = config.get("frozen_base", "bf16") in FOUR_BIT_BASES  # QLoRA only where the workload's base is NF4
    return UnslothPlan(
        from_pretrained={
            "max_seq_length": budget, "dtype": "bfloat16", "load_in_4bit": four_bit, "load_in_16bit": not four_bit,
            "full_finetuning": False, "use_gradient_checkpointing": checkpointing, "random_state": seed,
            "use_exact_model_name": True,
        },
        peft={
            "r": adapter.rank, "lora_alpha": adapter.alpha, "target_modules": target_names(shape, adapter.targets),
            "lora_dropout": 0.0, "bias": "none", "use_gradient_checkpointing": checkpointing, "random_state": seed,
            "use_rslora": False, "loftq_config": None,
        },
        sft={
            "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "max_length": budget,
            "packing": True, "optim": "adamw_8bit", "learning_rate": float(config.get("learning_rate", 1e-5)),
        },
        sources={
            "load_in_16bit": "the workload's frozen base: bf16 -> load_in_16bit (Unsloth's default load_in_4bit=True "
            "is QLoRA), nf4 or nf4_bf16 -> load_in_4bit (bitsandbytes NF4, as Unsloth's QLoRA)",
            "use_gradient_checkpointing": "'unsloth': from_pretrained's and get_peft_model's default, Qwen3 notebooks",
            "lora_dropout": "0: 'Supports any, but = 0 is optimized' (Unsloth's Qwen3 notebooks)",
            "bias": "'none': 'Supports any, but = \"none\" is optimized' (Unsloth's Qwen3 notebooks)",
            "target_modules": "the workload's lora_targets by leaf name; r and lora_alpha the workload's",
            "random_state": "the workload's seed (Unsloth's notebooks use 3407)",
            "packing": "packing=True on Unsloth's padding-free default (Unsloth docs: 3x faster training with "
            "packing); rows of the workload's token budget, one a step; hybrids pack where Unsloth's varlen probe "
            "passes",
            "optim": "adamw_8bit, the optimizer of Unsloth's notebooks (bitsandbytes)",
            "max_seq_length": "the packed row's length: the workload's token budget",
        },
    )  # fmt: skip


def workload_refusal(config: Mapping[str, Any], model_type: str | None, device_type: str = "cuda") -> str:
    """Why the Unsloth engine does not measure this workload ('' when it does): not LoRA, an lm_head target, a frozen
    base other than bf16 or NF4, not bf16 compute, or a model type it is not run on here (None: a hub id, left to
    Unsloth's own loader)."""
    adapter = AdapterSettings.from_config(config)
    if not adapter.active:
        return (
            f"Unsloth's peer row is measured for LoRA (adapter='lora'), not adapter={adapter.name!r}: its full "
            "fine-tuning trains bf16 weights, another precision than the workbook's rows"
        )
    if adapter.targets_output:
        return (
            f"lora_targets={adapter.targets!r}: Unsloth trains an lm_head named in target_modules as a full copy "
            "(modules_to_save), not as LoRA; leave lm_head out for this peer"
        )
    frozen = config.get("frozen_base", "bf16")
    if frozen not in FROZEN_BASES:
        return (
            f"frozen_base={frozen!r}: the Unsloth engine loads a bf16 base (load_in_16bit) or an NF4 one "
            "(load_in_4bit); it is not run on other frozen bases"
        )
    dtype = resolved_dtype(config, device_type)
    if dtype not in BF16_DTYPES:
        return f"dtype={config.get('dtype')!r} computes in {dtype}: Unsloth's LoRA trains a bf16 base under bf16"
    if model_type is not None and model_type not in LOADERS:
        return (
            f"model={config.get('model')!r} has model_type {model_type!r}: the Unsloth engine runs "
            f"{', '.join(LOADERS)} ({'; '.join(f'{k}: {v}' for k, v in LOADERS.items())})"
        )
    return ""


def missing_packages(find: Callable[[str], Any] = importlib.util.find_spec) -> list[str]:
    """The packages of :data:`REQUIRED` this process cannot import (looked up, not imported)."""
    return [name for name in REQUIRED if find(name) is None]


def missing_refusal(missing: Sequence[str], site: str) -> str:
    """The reason for packages Unsloth needs that its process lacks ('' when none)."""
    if not missing:
        return ""
    where = f"{UNSLOTH_SITE_VARIABLE}={site!r}" if site else f"{UNSLOTH_SITE_VARIABLE} is not set"
    return (
        f"missing package: {', '.join(missing)} for the Unsloth engine ({where}; it names a `pip install --target` "
        f"folder of the wheels {WHEELS_SCRIPT} downloads, put first on this engine's PYTHONPATH only)"
    )


def pin_conflicts(requirements: Sequence[str], versions: Mapping[str, str | None]) -> list[str]:
    """Each requirement of :data:`PINNED` packages (Requires-Dist lines, extras left out) that the installed
    ``versions`` break: "transformers 5.25.0 (needs <=5.17.0,...)"."""
    from packaging.requirements import Requirement

    found: list[str] = []
    for line in requirements:
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        if name not in PINNED or (requirement.marker is not None and not requirement.marker.evaluate({"extra": ""})):
            continue
        version = versions.get(name)
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            found.append(f"{name} {version} (needs {requirement.specifier})")
    return found


def installed_requirements(distribution: str) -> list[str]:
    """Requires-Dist of an installed distribution ([] when none is installed or it declares none)."""
    try:
        return list(importlib.metadata.requires(distribution) or [])
    except importlib.metadata.PackageNotFoundError:
        return []


def installed_versions(names: Sequence[str]) -> dict[str, str | None]:
    """The version this process would import of each distribution (None where none is installed)."""
    return package_versions(names, missing=None)


def pin_refusal() -> str:
    """Why the installed packages break Unsloth's own pins ('' when they keep them or Unsloth declares none)."""
    conflicts = [
        conflict for package in ("unsloth", "unsloth_zoo")
        for conflict in pin_conflicts(installed_requirements(package), installed_versions(PINNED))
    ]  # fmt: skip
    if not conflicts:
        return ""
    unsloth = installed_versions(("unsloth",))["unsloth"]
    return f"unsloth {unsloth}'s pins are broken here: {'; '.join(dict.fromkeys(conflicts))}"


def device_refusal(device_type: str) -> str:
    """Why the device cannot run the Unsloth engine ('' on a CUDA GPU)."""
    if device_type == "cuda":
        return ""
    return (
        "Unsloth's peer row runs on a CUDA GPU: without one, Unsloth 2026.10 trains through stock transformers, "
        "PEFT and TRL (its CPU backend), so there is no Unsloth step to measure here"
    )


def save_need_bytes(shape: ModelShape) -> int:
    """Disk a preset's random weights take saved in bf16 for Unsloth's from_pretrained, with its margin."""
    return shape.total_parameters * BYTES_PER_WEIGHT + SAVE_MARGIN_BYTES


def disk_refusal(preset: str, need_bytes: int, free_bytes: int, folder: str) -> str:
    """Why a preset's weights cannot be saved for Unsloth ('' when they fit)."""
    if free_bytes >= need_bytes:
        return ""
    return (
        f"disk: saving {preset}'s random bf16 weights for Unsloth's from_pretrained needs {need_bytes / 2**30:,.1f} "
        f"GiB in {folder} and {free_bytes / 2**30:,.1f} GiB are free there (set NBHELPERS_UNSLOTH_MODELS to a "
        "larger disk)"
    )


__all__ = [
    "FROZEN_BASES",
    "LOADERS",
    "UnslothPlan",
    "device_refusal",
    "disk_refusal",
    "installed_versions",
    "missing_packages",
    "missing_refusal",
    "pin_conflicts",
    "pin_refusal",
    "preset_model_type",
    "preset_shape",
    "save_need_bytes",
    "target_names",
    "unsloth_plan",
    "workload_refusal",
]
