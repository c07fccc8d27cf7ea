"""What a measured configuration is called in ``TrainingArguments`` and TRL's ``SFTConfig``, with comments.

Every setting that Trainer or TRL would otherwise default differently from how the workbook measured is
written out with a comment: TRL turns gradient checkpointing and bf16 on by default, pads to the longest row,
shuffles; Trainer shuffles, clips gradients, decays the learning rate linearly. Without these, a pasted export
runs slower (measured on an H200: 30,728 tok/s with TRL's checkpointing left on, 38,743 without) or trains
differently. The config is a record's ``config`` dict (RunConfig's fields). TRL's peer rows
(:mod:`nbhelpers.measure.engines`) and the exports (:mod:`nbhelpers.analysis.exports`) both read it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from nbhelpers.data.strategies import PaddingSettings, sft_config_settings
from nbhelpers.kernels.attention import DEFAULT_ATTENTION
from nbhelpers.kernels.registry import BASELINE_BACKEND, training_kwargs
from nbhelpers.models.adapters import AdapterSettings, bf16_weights
from nbhelpers.models.checkpointing import CHECKPOINTINGS
from nbhelpers.models.precision import MASTER_WEIGHTS, PRECISIONS

from .padding import padding_settings_of

OUTPUT_DIR = "outputs"
Settings = tuple[dict[str, Any], dict[str, str]]  # keyword arguments, and a comment for some of them


@functools.lru_cache(maxsize=1)
def argument_names() -> frozenset[str]:
    """The installed transformers' TrainingArguments fields (empty without transformers: newest spelling)."""
    try:
        from transformers import TrainingArguments
    except Exception:  # transformers missing or broken
        return frozenset()
    return frozenset(f.name for f in dataclasses.fields(TrainingArguments))


def spelled(new: str, old: str) -> str:
    """``new`` where the installed transformers has it (or none is installed), else the older name ``old``."""
    names = argument_names()
    return new if not names or new in names else old


def resolved_dtype(config: Mapping[str, Any], device_type: str) -> str:
    """The compute dtype a record measured: "auto" is fp32 on a CPU, bf16 autocast on a GPU."""
    dtype = str(config.get("dtype", "auto"))
    if dtype == "auto":
        return "bf16-autocast" if device_type == "cuda" else "fp32"
    return dtype


def _checkpointing(config: Mapping[str, Any]) -> Settings:
    mode = str(config.get("activation_checkpointing", "none"))
    comment = f"activation_checkpointing={mode!r}" + (" (TRL's default is True)" if mode == "none" else "")
    key = spelled("activation_checkpointing", "gradient_checkpointing")  # TRL's gradient_checkpointing maps to it
    if CHECKPOINTINGS[mode].offloads:  # the trainer checkpoints every layer; the export adds the offload after it
        return {key: True}, {key: comment + ": each layer's input offloaded by offload_checkpoints (below)"}
    if mode != "every_k":
        return {key: mode == "full"}, {key: comment}
    every = int(config.get("checkpoint_every", 2))
    if key == "activation_checkpointing":  # transformers' every_n_layers: layers 0, n, 2n, ... as measured
        options = "activation_checkpointing_kwargs"
        return {key: True, options: {"every_n_layers": every}}, {key: comment, options: f"every {every}-th layer"}
    return {key: False}, {key: comment + ": this transformers checkpoints every layer or none; measured every k-th"}


def _optimizer(config: Mapping[str, Any], device_type: str) -> Settings:
    """The measured optimizer: AdamW (fused on a GPU), constant learning rate, torch's weight decay, no clipping."""
    kwargs = {
        "learning_rate": float(config.get("learning_rate", 1e-5)),
        "lr_scheduler_type": "constant",
        "weight_decay": 0.01,
        "optim": "adamw_torch_fused" if device_type == "cuda" else "adamw_torch",
        "max_grad_norm": 0.0,
        "seed": int(config.get("seed", 0)),
    }
    comments = {
        "lr_scheduler_type": "as measured (Trainer's default decays linearly)",
        "weight_decay": "torch.optim.AdamW's default, as measured (Trainer's is 0.0)",
        "max_grad_norm": "as measured: the norm is computed, never clipped (Trainer clips at 1.0)",
    }
    return kwargs, comments


def _sampling(length_grouped: bool, comments: dict[str, str]) -> dict[str, Any]:
    """Sampling in the installed transformers' spelling: dataset order as measured, or length-grouped."""
    key = spelled("train_sampling_strategy", "group_by_length")
    if length_grouped:
        comments[key] = "batches of similar lengths (approximates the measured buckets)"
        return {key: "group_by_length" if key == "train_sampling_strategy" else True}
    if key != "train_sampling_strategy":
        return {}  # older transformers: no sequential sampler to name (the order does not change the speed)
    comments[key] = "as measured: dataset order (the default 'random' shuffles)"
    return {key: "sequential"}


def trainer_settings(config: Mapping[str, Any], device_type: str) -> Settings:
    """TrainingArguments keyword arguments (shared by SFTConfig) of a measured configuration, with comments."""
    kwargs: dict[str, Any] = {"output_dir": OUTPUT_DIR, "per_device_train_batch_size": int(config.get("batch_size", 1))}
    comments = {"per_device_train_batch_size": "as measured"}
    kernels = str(config.get("kernels", BASELINE_BACKEND))
    backend_kwargs, backend_comments = training_kwargs(kernels, config.get("liger_kernels") or ())
    kwargs.update(backend_kwargs)  # use_liger_kernel, liger_kernel_config, torch_compile from the table
    comments.update(backend_comments)
    for part in (_checkpointing(config), _optimizer(config, device_type)):
        kwargs.update(part[0])
        comments.update(part[1])
    dtype = resolved_dtype(config, device_type)
    precision = PRECISIONS.get(dtype)
    kwargs["bf16"] = precision is not None and (precision.bf16_weights or precision.autocast)
    comments["bf16"] = f"dtype={dtype!r}" + (" (TRL's default is True)" if not kwargs["bf16"] else "")
    if dtype == MASTER_WEIGHTS:  # the trainer has no fp32-master optimizer over a bf16 model
        comments["bf16"] += (" -- no trainer equivalent of fp32 master weights over a bf16 model: this trains pure "
                             "bf16 (AdamW state in bf16); for fp32 masters load fp32 weights (bf16 autocast) or use "
                             "FSDP2 with mixed_precision bf16")  # fmt: skip
    if device_type == "cuda":
        kwargs["tf32"] = True
        comments["tf32"] = "as measured: TF32 matmuls outside autocast"
    kwargs.update(_sampling(PaddingSettings.from_config(config).entry.length_grouped, comments))
    if device_type == "cpu":
        kwargs["use_cpu"] = True
        comments["use_cpu"] = "measured on a CPU"
    return kwargs, comments


def model_init_settings(config: Mapping[str, Any], device_type: str) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments: the attention implementation, bf16 weights when measured so (a bf16
    step, or an adapter's frozen base on a GPU)."""
    kwargs: dict[str, Any] = {"attn_implementation": str(config.get("attn_implementation", DEFAULT_ATTENTION))}
    if bf16_weights(AdapterSettings.from_config(config), resolved_dtype(config, device_type), device_type):
        kwargs["dtype"] = "bfloat16"
    return kwargs


def sft_settings(config: Mapping[str, Any], device_type: str) -> Settings:
    """TRL SFTConfig keyword arguments of a measured configuration, with comments (see the module docstring)."""
    kwargs, comments = trainer_settings(config, device_type)
    strategy_kwargs, strategy_comments = sft_config_settings(padding_settings_of(config))
    kwargs.update(strategy_kwargs)
    comments.update(strategy_comments)
    liger = kwargs.get("liger_kernel_config")
    if isinstance(liger, dict) and liger.get("fused_linear_cross_entropy"):
        kwargs["liger_kernel_config"] = {**liger, "fused_linear_cross_entropy": False}
        comments["liger_kernel_config"] = (
            "measured with Liger's fused linear cross-entropy, which TRL refuses (it fuses the LM head itself)"
        )
    kwargs["completion_only_loss"] = True
    comments["completion_only_loss"] = "as measured: the loss covers the response tokens only"
    kwargs["model_init_kwargs"] = model_init_settings(config, device_type)
    return kwargs, comments


__all__ = [
    "OUTPUT_DIR",
    "Settings",
    "argument_names",
    "model_init_settings",
    "resolved_dtype",
    "sft_settings",
    "spelled",
    "trainer_settings",
]
