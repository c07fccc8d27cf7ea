"""Unsloth measured as a peer of the workbook's step: its FastLanguageModel and LoRA, TRL's SFTTrainer as Unsloth
patches it, on the same samples and tokens, timed as :mod:`nbhelpers.measure.trl_loop` times TRL.

Runs in a process of its own (the runner never hands it a spare worker): ``import unsloth`` must come before
transformers, TRL and PEFT are imported, so nothing here imports them at module level, and every refusal
(:mod:`nbhelpers.measure.unsloth_setup`) is decided before Unsloth is imported or any weights are made. A preset
is saved to a folder first (:mod:`nbhelpers.measure.preset_folder`): Unsloth loads from a folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from nbhelpers.models.families import is_preset, model_type_of
from nbhelpers.models.loading import is_local_model

from .config import RunConfig
from .engines import UNSLOTH_SITE_VARIABLE, EngineRefusal, engine_of
from .memory_cap import cap_lifted
from .preset_folder import folders_root, free_bytes, is_complete, preset_folder, save_preset
from .progress import report_progress
from .unsloth_setup import (
    VERSION_PACKAGES,
    device_refusal,
    disk_refusal,
    missing_packages,
    missing_refusal,
    pin_refusal,
    preset_model_type,
    preset_shape,
    save_need_bytes,
    unsloth_plan,
    workload_refusal,
)

CRITICAL = ("transformers", "trl", "peft")  # Unsloth patches them at import: they must not be imported before it
# Set in the engine's process before Unsloth is imported: no statistics download from the hub, and its compiled
# trainer code kept out of the working directory.
QUIET = {"UNSLOTH_DISABLE_STATISTICS": "1"}


def model_type_of_workload(model: str) -> str | None:
    """A preset's or a folder's model_type; None for a hub id (left to Unsloth's own loader)."""
    if is_preset(model):
        return preset_model_type(model)
    if Path(model).expanduser().is_dir():
        return model_type_of(Path(model).expanduser()) or "unknown"
    return None


def refusal(config: RunConfig) -> str:
    """Why the Unsloth engine cannot run ``config`` here, found without importing Unsloth or transformers or making
    any weights ('' when it can): the workload, the packages and their pins, the device, the disk."""
    data = config.to_dict()
    reason = workload_refusal(data, model_type_of_workload(config.model))
    reason = reason or missing_refusal(missing_packages(), os.environ.get(UNSLOTH_SITE_VARIABLE, ""))
    reason = reason or pin_refusal()
    if reason:
        return reason
    from nbhelpers.machine import resolve_device

    try:
        device = resolve_device(config.device)
    except Exception as error:  # noqa: BLE001 - the device's own reason (e.g. device='cuda' without a GPU)
        return str(error).splitlines()[0]
    if reason := device_refusal(device):
        return reason
    if is_preset(config.model):
        folder = preset_folder(config.model, config.seed)
        if not is_complete(folder, config.model, config.seed):
            need = save_need_bytes(preset_shape(config.model))
            return disk_refusal(config.model, need, free_bytes(folder), str(folder.parent))
    return ""


def import_unsloth(compile_folder: Path) -> dict[str, Any]:
    """Import Unsloth (its patches of transformers, TRL and PEFT), first; returns its attention back-ends."""
    already = [name for name in CRITICAL if name in sys.modules]
    if already:
        raise EngineRefusal(
            f"Unsloth must be imported before {', '.join(already)}, which this process imported already: it runs "
            "in its own process (run_config(isolate=True))"
        )
    for name, value in (QUIET | {"UNSLOTH_COMPILE_LOCATION": str(compile_folder)}).items():
        os.environ.setdefault(name, value)
    import unsloth  # noqa: F401 - its patches, before transformers

    backends: dict[str, Any] = {}
    try:
        from unsloth.models import _utils

        backends = {"xformers": getattr(_utils, "xformers_version", None),
                    "flash_attention": bool(getattr(_utils, "HAS_FLASH_ATTENTION", False))}  # fmt: skip
    except Exception as error:  # noqa: BLE001 - a record without them still stands
        backends = {"unread": str(error)[:200]}
    return backends


def load_folder(config: RunConfig, device: str) -> tuple[str, float]:
    """The folder Unsloth loads: a preset's saved weights (saved now unless a complete save exists; seconds it took),
    else the configuration's own folder or hub id."""
    if not is_preset(config.model):
        return config.model, 0.0
    started = time.perf_counter()
    folder = preset_folder(config.model, config.seed)
    report_progress("saving the preset for Unsloth", 0, 0)
    with cap_lifted(device):  # set-up, not the step: a 24 GiB cap would refuse the 27B's bf16 weights it saves
        save_preset(config.model, config.seed, device, config.adapter_settings, folder)
    return str(folder), time.perf_counter() - started


def measure_unsloth(config: RunConfig, notebook: str = "") -> Any:
    """Measure ``config`` with Unsloth (one untimed epoch, then timed epochs up to the floor of timed steps) and
    return its record; raises :class:`EngineRefusal` at once for a workload it cannot run here."""
    if reason := refusal(config):
        raise EngineRefusal(reason)
    if is_local_model(config.model):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a folder: nothing to fetch, from Unsloth's import on
    phases: dict[str, float] = {}
    started = time.perf_counter()
    backends = import_unsloth(folders_root() / "compiled")
    phases["import_unsloth"] = time.perf_counter() - started
    import torch

    device = "cuda"
    torch.manual_seed(config.seed)
    source, phases["save_preset"] = load_folder(config, device)
    shape = preset_shape(config.model) if is_preset(config.model) else None
    if shape is None:
        from nbhelpers.models.families import model_shape
        from nbhelpers.models.loading import model_config

        shape = model_shape(model_config(source))
    plan = unsloth_plan(config.to_dict(), shape)
    with tempfile.TemporaryDirectory(prefix="nbhelpers-unsloth-") as output_dir:
        built, rows, used = build_unsloth_trainer(config, source, plan, output_dir, phases)
        from .trl_loop import timed_record

        record = timed_record(config, built, rows, notebook, VERSION_PACKAGES)
    record.metrics["unsloth"] = {
        "from_pretrained": plan.from_pretrained | {"model_name": source}, "get_peft_model": plan.peft,
        "sources": plan.sources, "attention_backends": backends, **used,
    }  # fmt: skip
    record.metrics["gradient_checkpointing"] = "on (unsloth)"
    record.metrics.setdefault("phase_s", {}).update({k: round(v, 3) for k, v in phases.items()})
    return record


def build_unsloth_trainer(
    config: RunConfig, source: str, plan: Any, output_dir: str, phases: dict[str, float]
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Unsloth's model, its LoRA and its SFTTrainer on the workload's samples (the workbook's tokenizer makes the
    same tokens); returns the built trainer, the rows and what Unsloth actually used (packing, padding-free)."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer
    from unsloth import FastLanguageModel

    from nbhelpers.models.adapters import base_model_of

    from .step import compute_dtype
    from .trl_loop import BuiltTrainer, harness_settings, sft_rows

    device = "cuda"
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    report_progress("loading with Unsloth", 0, 0)
    kwargs = dict(plan.from_pretrained, dtype=getattr(torch, plan.from_pretrained["dtype"]))
    model, tokenizer = FastLanguageModel.from_pretrained(model_name=source, **kwargs)
    model = FastLanguageModel.get_peft_model(model, **plan.peft)
    phases["load_and_lora"] = time.perf_counter() - started
    base = base_model_of(model)
    base.config.use_cache = False  # a training model: with a cache, packed rows attend across sequences
    _, rows = sft_rows(config)  # the workbook's tokenizer and samples: the same tokens as every other row
    processing = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's text tokenizer
    args = SFTConfig(**(harness_settings(config, device, output_dir) | plan.sft))
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=processing)
    trainer.remove_callback(PrinterCallback)  # the logs are kept in the records, not printed
    used = {
        "packing_used": bool(getattr(trainer.args, "packing", False)),
        "padding_free_used": bool(getattr(trainer.args, "padding_free", False)),
        "lora_rank": plan.peft["r"], "lora_alpha": plan.peft["lora_alpha"],
        "lora_targets_used": sorted(_adapted_leaves(model)),
    }  # fmt: skip
    attention = str(getattr(base.config, "_attn_implementation", "unknown"))
    engine = engine_of(config.to_dict())
    built = BuiltTrainer(trainer, base, attention, engine, device, compute_dtype(config, device), dict(plan.sft))
    return built, rows, used


def _adapted_leaves(model: Any) -> set[str]:
    """The leaf names of the modules a LoRA adapter wraps in ``model`` (what get_peft_model actually targeted)."""
    return {name.rsplit(".", 2)[-2] for name, _ in model.named_modules() if name.endswith(".lora_A")}


__all__ = ["measure_unsloth", "refusal"]
