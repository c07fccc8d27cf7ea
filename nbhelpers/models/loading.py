"""Loading models: random weights for a preset, ``from_pretrained`` for a hub id or a folder; parameter counts."""

from __future__ import annotations

import copy
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.validation import ConfigError, check_hub_name

from .adapters import AdapterSettings, quantized_state_bytes, training_state_bytes
from .families import (
    BOUNDARIES_PACKING,
    MODEL_PRESETS,
    ModelFamily,
    family_of_model,
    family_of_model_type,
    family_of_preset,
    is_preset,
    preset_config,
)
from .frozen_base import FROZEN_BASES
from .shape import ModelShape
from .staged import mark_undrawn, stage, undrawn_weights


def is_local_model(name_or_path: str) -> bool:
    """A preset or a folder on this machine: its config is read offline, nothing is fetched from the hub."""
    return is_preset(name_or_path) or Path(name_or_path).expanduser().is_dir()


def model_source(name_or_path: str) -> str:
    """A preset name, an existing folder with a config.json, or a hub id; anything else is a clear error."""
    if is_preset(name_or_path):
        return name_or_path
    path = Path(name_or_path).expanduser()
    if not path.exists() and name_or_path.startswith(("/", ".", "~")):
        raise FileNotFoundError(
            f"model={name_or_path!r}: no such folder, and not a preset ({', '.join(MODEL_PRESETS)}) or hub id"
        )
    if path.exists() and not (path / "config.json").exists():
        raise ValueError(f"model={name_or_path!r}: the folder exists but holds no config.json")
    if path.exists():
        return str(path)
    return check_hub_name("model", name_or_path, MODEL_PRESETS)  # fails at once offline or for a typo


def build_model(
    name_or_path: str,
    attn_implementation: str = "sdpa",
    seed: int = 0,
    dtype: Any = None,
    device: str = "cpu",
    adapter: AdapterSettings | None = None,
) -> Any:
    """A causal LM: random weights for a preset, else ``from_pretrained`` on a hub id or a folder.

    A local folder must hold a ``config.json``; anything else is taken as a hub id, which needs
    network access (or a filled hub cache) at run time. A model of a known family must support
    ``attn_implementation`` (see ``families.FAMILIES``); one that registers itself with transformers (the
    kernels' attention table) must be registered first: ``nbhelpers.kernels.attention.prepare_attention``.
    A preset's weights are created on ``device`` in ``dtype`` (no fp32 copy of a bf16 model at any point); the
    memory refusal counts the training state of ``adapter`` (a frozen base) when one is given.
    """
    return build_resolved(resolve_model(name_or_path), attn_implementation, seed, dtype, device, adapter)


def build_resolved(
    resolved: ResolvedModel,
    attn_implementation: str = "sdpa",
    seed: int = 0,
    dtype: Any = None,
    device: str = "cpu",
    adapter: AdapterSettings | None = None,
) -> Any:
    """:func:`build_model` of a model already resolved (no second look-up of its name): refused before any
    weights load when its family cannot run ``attn_implementation``."""
    import torch

    _refuse(resolved.name, resolved.refusal(attn_implementation))
    torch.manual_seed(seed)
    if resolved.preset:
        model = _from_preset(resolved, attn_implementation, dtype, device, adapter)
    else:
        from transformers import AutoModelForCausalLM

        kwargs: dict[str, Any] = {"attn_implementation": attn_implementation}
        if dtype is not None:
            kwargs["dtype"] = dtype
        model = AutoModelForCausalLM.from_pretrained(resolved.source, **kwargs)
        if _placement(resolved, dtype, device, adapter)[0]:  # on the host: its frozen base quantizes it onto device
            model = stage(model, device)
        else:
            model = model.to(device)
    disable_kv_cache(model)
    return model


def _placement(
    resolved: ResolvedModel, dtype: Any, device: str, adapter: AdapterSettings | None
) -> tuple[bool, str]:
    """Whether the model is built on the host for ``device`` (:func:`stages_on_host`: its training state as built
    does not fit the device, its quantized base does), and why it cannot be trained there ('' when it can)."""
    import torch

    weights = "bf16" if dtype in (torch.bfloat16, torch.float16) else "fp32"
    shape, capacity = resolved.shape(), device_memory_bytes(device)
    refusal = state_refusal(shape, weights, capacity, adapter)
    if refusal and stages_on_host(shape, weights, capacity, device, adapter):
        return True, ""
    return False, refusal


def _from_preset(
    resolved: ResolvedModel, attn_implementation: str, dtype: Any, device: str, adapter: AdapterSettings | None
) -> Any:
    """Random weights of a preset on ``device`` in ``dtype``, refused when its training state cannot fit there."""
    import torch
    from transformers import AutoModelForCausalLM

    staged, refusal = _placement(resolved, dtype, device, adapter)
    _refuse(resolved.name, refusal)
    config = copy.deepcopy(resolved.config)  # the resolved config stays as resolved for the next build
    config._attn_implementation = attn_implementation
    created = {"dtype": dtype} if dtype is not None else {}  # parameters made in it, as from_pretrained does
    if staged:  # only the quantized base fits the device: built on the host, each weight drawn on the device later
        with torch.device("cpu"), undrawn_weights() as undrawn:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation, **created)
        return mark_undrawn(model, device) if undrawn else stage(model, device)
    # initialise where it will run (seconds, not minutes, for 1.7B on a GPU)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation, **created)


def stages_on_host(
    shape: ModelShape, weights: str, capacity: int, device: str, adapter: AdapterSettings | None
) -> bool:
    """Whether a model too large for the device as built fits it once its frozen base is quantized: then it is built
    on the host and quantized onto the device linear by linear (a 27B with an NF4 base on a 24 GiB GPU)."""
    quantizing = adapter is not None and adapter.entry.frozen_base and FROZEN_BASES[adapter.frozen_base].quantized
    return bool(quantizing) and device != "cpu" and quantized_state_bytes(shape, weights, adapter) <= capacity


@dataclass(frozen=True)
class ResolvedModel:
    """A model named by a configuration, resolved once: where it loads from, its transformers config, its family
    and whether that family hands packed rows their sequence boundaries."""

    name: str  # as the configuration names it (preset, folder or hub id)
    source: str  # a preset name, a folder or a hub id (checked)
    config: Any  # the transformers config, without weights
    boundaries: bool  # packed rows carry cu_seqlens / seq_idx (linear-attention layers need them)
    family: ModelFamily | None = None  # by its name, else by its config's model_type; None when no family covers it
    preset: bool = False  # random weights from the family's config builder (no checkpoint to load)

    def refusal(
        self, attn_implementation: str = "", kernels: str = "", packing: str = "", liger_kernels: Sequence[str] = ()
    ) -> str:
        """Why its family cannot run these settings, or '' (no family: nothing refused)."""
        return self.family.refusal(attn_implementation, kernels, packing, liger_kernels) if self.family else ""

    def shape(self) -> ModelShape:
        """Parameter and FLOP arithmetic of its config, by its family (a dense decoder's without one)."""
        return self.family.shape(self.config) if self.family else ModelShape.from_config(self.config)


def resolve_model(name_or_path: str) -> ResolvedModel:
    """Resolve a model once per measurement: its source, its config, its family and how it packs (errors name the
    model). ``boundaries`` follows the family of the name (a preset, a preset's hub id, a folder), as the exports
    read it; a hub id outside the table is refused packed rows by its config's family rather than guessed."""
    source = model_source(name_or_path)
    preset = is_preset(source)
    config = preset_config(source) if preset else _pretrained_config(source)
    named = family_of_model(name_or_path)
    family = named or family_of_model_type(getattr(config, "model_type", ""))
    boundaries = named is not None and BOUNDARIES_PACKING in named.packing
    return ResolvedModel(name_or_path, source, config, boundaries, family, preset)


def _pretrained_config(source: str) -> Any:
    """The transformers config of a checked folder or hub id (``model_source``'s answer)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(source)


def model_config(name_or_path: str) -> Any:
    """The transformers config of a preset, a folder or a hub id, without building the model."""
    if is_preset(name_or_path):
        return preset_config(name_or_path)
    return _pretrained_config(model_source(name_or_path))


def check_positions(model_config: Any, max_length: int) -> None:
    """``max_length`` within the model's positions (``max_position_embeddings``), else ConfigError."""
    text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    limit = getattr(text, "max_position_embeddings", None)
    if isinstance(limit, int) and max_length > limit:
        raise ConfigError("max_length", max_length, f"at most the model's {limit} positions (max_position_embeddings)")


def _refuse(model: str, refusal: str) -> None:
    """A model whose family cannot run the requested settings is an error that names the model."""
    if refusal:
        raise ValueError(f"model={model!r}: {refusal}")


def device_memory_bytes(device: str) -> int:
    """Memory of one device as this process may use it: the current CUDA GPU's total times the allocator's
    per-process fraction (a memory cap, RunConfig.gpu_memory_gib), or the machine's physical memory for a CPU."""
    if device.startswith("cuda"):
        import torch

        index = torch.cuda.current_device()
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", lambda index: 1.0)(index)
        return int(torch.cuda.get_device_properties(index).total_memory * min(float(fraction), 1.0))
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_refusal(preset: str, weights: str, capacity_bytes: int, adapter: AdapterSettings | None = None) -> str:
    """Why a preset cannot be trained on one device of ``capacity_bytes``, or '' when its training state fits.

    Counts weights, gradients and AdamW moments in the weights' dtype ("fp32" or "bf16"), not activations,
    so a preset that passes may still run out of memory, but one refused here cannot fit. With an adapter
    (LoRA), the frozen base's weights alone and the adapter's fp32 weights, gradients and moments.
    """
    return state_refusal(family_of_preset(preset).shape(preset_config(preset)), weights, capacity_bytes, adapter)


def state_refusal(shape: ModelShape, weights: str, capacity_bytes: int, adapter: AdapterSettings | None = None) -> str:
    """:func:`memory_refusal` of a model's shape, as built (a quantized base is built in the weights' dtype first;
    :func:`stages_on_host` says when it can be built on the host instead)."""
    need = training_state_bytes(shape, weights, adapter)
    if need <= capacity_bytes:
        return ""
    state = f"{weights} weights, gradients and AdamW moments"
    if adapter is not None and adapter.entry.frozen_base:
        state = f"frozen {weights} weights plus {adapter.name}'s fp32 weights, gradients and AdamW moments"
    return (
        f"training it needs at least {need / 2**30:,.0f} GiB ({shape.total_parameters:,} parameters: {state}, "
        "before activations) and one device here has "
        f"{capacity_bytes / 2**30:,.0f} GiB: shard it over at least {math.ceil(need / capacity_bytes)} GPUs "
        "(FSDP2), or pick a smaller preset; meta_model() builds it without memory"
    )


def disable_kv_cache(model: Any) -> None:
    """Training needs no KV cache, and with one, packed rows attend across sequence boundaries.

    Seen with transformers 5.24 on a CPU (a packed row's logits differed from the padded batch's by up
    to 0.9) and consistent with the H200 parity failure of packed rows under 5.17: a forward pass with
    ``use_cache=True`` (the config default) builds a cache, and the packed-sequence detection from
    ``position_ids`` is skipped when a cache exists, so a flattened row is attended as one long
    causal sequence.
    """
    model.config.use_cache = False
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.use_cache = False


def meta_model(name: str) -> Any:
    """A preset built on the meta device: shapes and parameter counts without memory."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(preset_config(name))


def modeling_module(model: Any) -> Any | None:
    """The module that defines a model's class (its modeling file, where transformers binds the kernels it
    calls), also through a wrapper class that subclasses it: FSDP2's ``fully_shard`` turns Qwen3ForCausalLM
    into ``torch.distributed.fsdp...FSDPQwen3ForCausalLM``. The first class of the MRO outside torch."""
    for cls in type(model).__mro__:
        name = getattr(cls, "__module__", "") or ""
        if not name.startswith("torch.") and name != "builtins":
            return sys.modules.get(name)
    return None


def count_parameters(model: Any) -> int:
    """Stored parameters of a model (shared tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for parameter in model.parameters():
        if id(parameter) not in seen:
            seen.add(id(parameter))
            total += parameter.numel()
    return total
