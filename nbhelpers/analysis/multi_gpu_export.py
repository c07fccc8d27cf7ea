"""A measured multi-GPU configuration as an accelerate FSDP2 config file and a TRL launch command.

:func:`export_multi_gpu` takes a RunConfig (or a record's config dict) and, optionally, the SFTConfig
keyword arguments a recommendation already derived (``Recommendation.sft_config_kwargs()``), and returns
the two texts a user needs on a multi-GPU machine: ``accelerate_fsdp2.yaml`` and the command that runs
TRL's SFT script under it. The mapping is the workbook's own FSDP2 set-up: one FSDP unit per decoder layer,
parameters resharded after forward, bf16 mixed precision, activation checkpointing by accelerate (TRL's own
``gradient_checkpointing`` off, since FSDP checkpoints inside its units).
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.checkpointing import CHECKPOINTINGS
from nbhelpers.models.families import NO_CHECKPOINT, family_of_model, hub_id

CONFIG_FILE = "accelerate_fsdp2.yaml"


def _as_config(config: RunConfig | dict[str, Any]) -> RunConfig:
    return config if isinstance(config, RunConfig) else RunConfig.from_record(config)


def decoder_layer_class(model: str) -> str:
    """The decoder layer class FSDP wraps, from the model family's config class (Qwen3Config -> Qwen3DecoderLayer)."""
    family = family_of_model(model)
    if family is None:
        return "DECODER_LAYER_CLASS"  # a model of no known family: fill in its decoder layer class
    return family.config_class.removesuffix("Config") + "DecoderLayer"


def accelerate_fsdp2_config(config: RunConfig | dict[str, Any]) -> dict[str, Any]:
    """The accelerate config (as a dict) that runs ``config.gpus`` processes with FSDP2 as measured."""
    cfg = _as_config(config)
    return {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "mixed_precision": "bf16" if cfg.dtype != "fp32" else "no",
        "num_machines": 1,
        "num_processes": cfg.gpus,
        "machine_rank": 0,
        "main_training_function": "main",
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": decoder_layer_class(cfg.model),
            "fsdp_reshard_after_forward": True,
            "fsdp_offload_params": False,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_activation_checkpointing": cfg.activation_checkpointing != "none",
            # accelerate >= 1.16: each checkpointed layer's input in pinned host memory, as "offload" measured it
            **({"fsdp_activation_checkpointing_offload": True} if CHECKPOINTINGS[cfg.activation_checkpointing].offloads
               else {}),
        },
    }


def accelerate_config_yaml(config: RunConfig | dict[str, Any]) -> str:
    """The accelerate config file's text, with notes where accelerate cannot say what was measured."""
    import yaml

    cfg = _as_config(config)
    notes = [f"# accelerate FSDP2 config for {cfg.name} ({cfg.gpus} GPUs), from the workbook's measured settings."]
    notes.append("# The workbook reduced gradients in fp32 (MixedPrecisionPolicy(reduce_dtype=float32));")
    notes.append("# accelerate's mixed_precision: bf16 may reduce in bf16.")
    if cfg.activation_checkpointing == "every_k":
        k = cfg.checkpoint_every
        notes.append(f"# Measured with layers 0, {k}, {2 * k}, ... checkpointed (every_k, k={k}); accelerate")
        notes.append("# checkpoints every layer (more recompute, less memory).")
    return "\n".join(notes) + "\n" + yaml.safe_dump(accelerate_fsdp2_config(cfg), sort_keys=False)


def _flag(name: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [f"--{name}", "true" if value else "false"]
    if isinstance(value, (dict, list)):
        return [f"--{name}", json.dumps(value)]
    return [f"--{name}", str(value)]


def trl_command(
    config: RunConfig | dict[str, Any], sft_kwargs: dict[str, Any] | None = None, dataset: str = "DATASET_NAME"
) -> str:
    """``accelerate launch`` of TRL's SFT script with the measured settings (``sft_kwargs`` win)."""
    cfg = _as_config(config)
    args: dict[str, Any] = {
        "model_name_or_path": hub_id(cfg.model),
        "dataset_name": dataset,
        "per_device_train_batch_size": cfg.batch_size,
        "max_length": cfg.max_length,
        "bf16": cfg.dtype != "fp32",
        "output_dir": "sft-output",
    }
    adapter = cfg.adapter_settings  # TRL's ModelConfig flags for the measured adapter, on a frozen bf16 base
    if adapter.active:
        args.update(use_peft=True, lora_r=adapter.rank, lora_alpha=adapter.alpha, lora_dropout=0.0)
        args["dtype"] = "bfloat16" if cfg.dtype != "fp32" else None
    args.update(sft_kwargs or {})
    args["gradient_checkpointing"] = False  # FSDP's activation checkpointing (in the config file) does it
    parts = ["accelerate", "launch", "--config_file", CONFIG_FILE, "-m", "trl.scripts.sft"]
    for name, value in args.items():
        if value is not None:
            parts += _flag(name, value)
    if adapter.active:  # one value or several (nargs): "all-linear", or module names
        targets = adapter.target_modules
        parts += ["--lora_target_modules", *([targets] if isinstance(targets, str) else targets)]
    return " ".join(shlex.quote(p) for p in parts)


def export_multi_gpu(
    config: RunConfig | dict[str, Any], sft_kwargs: dict[str, Any] | None = None, dataset: str = "DATASET_NAME"
) -> dict[str, str]:
    """The config file's name -> text, and "command" -> the launch command."""
    return {CONFIG_FILE: accelerate_config_yaml(config), "command": trl_command(config, sft_kwargs, dataset)}


def export_markdown(records: Any) -> str:
    """Notebook 05's export of the last (widest) measured configuration: the config file and the command, as
    Markdown; with an adapter, which the workbook trains on one GPU, a sentence pointing to notebook 04's
    one-GPU exports instead."""
    config = records[-1].config
    if AdapterSettings.from_config(config).active:
        return (
            "No multi-GPU configuration to export: the workbook trains an adapter (LoRA) on one GPU. Notebook 04's "
            "recommendation exports the measured LoRA step for one GPU (PEFT's `LoraConfig`, `SFTTrainer(peft_config="
            "...)`)."
        )
    exported = export_multi_gpu(config)
    text = f"`{CONFIG_FILE}`:\n```yaml\n{exported[CONFIG_FILE]}```\n\n```bash\n{exported['command']}\n```"
    if hub_id(str(config.get("model", ""))) == NO_CHECKPOINT:
        model = config.get("model")
        text += (f"\n\nReplace `{NO_CHECKPOINT}` with your checkpoint: the measured preset `{model}` is a "
                 "random-weight miniature that no released model has the shape of.")  # fmt: skip
    return text
