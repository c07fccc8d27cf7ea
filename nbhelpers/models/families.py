"""The table of model families: presets, how they build, and what each family supports.

Adding a family is one entry in ``FAMILIES`` plus its own module (presets, hub ids, a config builder and,
where its parameter and FLOP arithmetic differs from a dense decoder's, a shape function). Everything
else (loading, tokenizer choice, FLOP counting, the hub ids that recommendations export) reads this table.

A family names no kernel backend: it declares its capabilities (keys of ``MODEL_CAPABILITIES``), each backend
declares the ones it needs, and :mod:`nbhelpers.kernels.registry` works out which backends a family takes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import qwen3, qwen3_5
from .shape import ModelShape

POSITION_IDS_PACKING = "position_ids"
BOUNDARIES_PACKING = "cu_seqlens"
# How a packed row keeps its sequences apart; a family lists the ones its token-mixing layers honour.
PACKING_MODES = {
    POSITION_IDS_PACKING: "padding-free packed rows; position_ids restart at 0 at every sequence",
    BOUNDARIES_PACKING: "padding-free packed rows that also carry the sequence boundaries as model keyword "
    "arguments (cu_seq_lens_q/k, max_length_q/k, seq_idx), so linear-attention layers and their causal "
    "convolution keep the sequences apart",
}

# What a family's models have that some kernel backend needs (capability -> what it means).
GATED_DELTANET = "gated_deltanet"
REPEATED_LAYERS = "repeated_layers"
FLOAT8_LINEARS = "float8_linears"
LIGER_PATCH = "liger_patch"
MAX_LAYER_KINDS = 2  # compiled graphs per layer's code: well inside Dynamo's cache of 8 recompiles
MODEL_CAPABILITIES = {
    GATED_DELTANET: "Gated DeltaNet (linear attention) layers, config.layer_types 'linear_attention'",
    REPEATED_LAYERS: f"decoder layers of at most {MAX_LAYER_KINDS} kinds (config.layer_types), every layer of a kind "
    "running the same code on parameters of the same shapes (one compiled graph per kind serves all of its layers)",
    FLOAT8_LINEARS: "decoder linear layers measured to train in torchao float8 within float8's tolerance (the "
    "hybrids' Gated DeltaNet projections, which feed the decay gates, are not measured)",
    LIGER_PATCH: "a Liger patch for every model_type of the family (liger_kernel's MODEL_TYPE_TO_APPLY_LIGER_FN)",
}


@dataclass(frozen=True)
class ModelFamily:
    """One model family: its presets and hub ids, how a preset becomes a config, and what it supports.

    Attention implementations are spelled as ``RunConfig`` accepts them (``attn_implementation``); packing modes
    are keys of ``PACKING_MODES``; capabilities are keys of ``MODEL_CAPABILITIES``.
    """

    name: str
    description: str
    presets: Mapping[str, Mapping[str, Any]]  # preset name -> transformers config values (random weights)
    hub_ids: Mapping[str, str]  # preset name -> hub id of the released model of that shape
    config_class: str  # the transformers config class of its checkpoints
    model_types: tuple[str, ...]  # config.json "model_type" values it covers
    build_config: Callable[..., Any]  # (preset name, **overrides) -> a config_class instance
    shape: Callable[[Any], ModelShape]  # transformers config -> parameter and FLOP arithmetic
    tokenizer: str  # the embedded tokenizer of its presets (a key of data.tokenizer.EMBEDDED_TOKENIZERS)
    attention_implementations: tuple[str, ...]
    capabilities: tuple[str, ...]  # what its models have (keys of MODEL_CAPABILITIES); backends need them
    packing: tuple[str, ...]  # packing modes on the reference path (any kernel backend)
    kernel_packing: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # backend -> modes it adds
    packing_hint: str = ""  # what to install for packing the family cannot do yet, said in the refusal
    shipped_results: str = ""  # folder under benchmarks/gpu holding this family's shipped GPU records ("" = top)
    liger_gaps: Mapping[str, str] = field(default_factory=dict)  # Liger switch -> why this family's patch lacks it
    # Kernel backend -> why this family does not take it although its capabilities cover every part's needs.
    kernel_gaps: Mapping[str, str] = field(default_factory=dict)

    def packing_modes(self, kernels: str = "") -> tuple[str, ...]:
        """The packing modes this family keeps apart with the kernel backend ``kernels``."""
        return self.packing + tuple(self.kernel_packing.get(kernels, ()))

    def refusal(
        self, attn_implementation: str = "", kernels: str = "", packing: str = "", liger_kernels: Sequence[str] = ()
    ) -> str:
        """Why this family cannot run these settings, or '' when it can (empty arguments are not checked;
        ``liger_kernels`` are the Liger switches a backend that runs Liger turns on). Whether it takes the kernel
        backend ``kernels`` is the backend table's question (``nbhelpers.kernels.registry.family_kernel_refusal``);
        here ``kernels`` only selects the packing modes the backend adds."""
        if gap := self.liger_refusal(liger_kernels):
            return gap
        for parameter, value, allowed in (
            ("attn_implementation", attn_implementation, self.attention_implementations),
            ("packing", packing, self.packing_modes(kernels)),
        ):
            if value and value not in allowed:
                supported = ", ".join(repr(a) for a in allowed) or "none"
                reason = f"{parameter}={value!r} is not supported by the {self.name} family (supported: {supported})"
                if parameter == "packing" and self.packing_hint:
                    reason += f": {self.packing_hint}"
                return reason
        return ""

    def liger_refusal(self, switches: Sequence[str]) -> str:
        """Why Liger's patch of this family cannot turn on one of ``switches``, with the set that it can."""
        missing = [switch for switch in switches if switch in self.liger_gaps]
        if not missing:
            return ""
        rest = ",".join(switch for switch in switches if switch not in self.liger_gaps) or "none"
        reasons = "; ".join(f"{switch!r}: {self.liger_gaps[switch]}" for switch in missing)
        return f"liger_kernels: {reasons} (the {self.name} family); leave it out (LIGER_KERNELS={rest})"


FAMILIES: dict[str, ModelFamily] = {
    family.name: family
    for family in (
        ModelFamily(
            name="qwen3",
            description="Qwen3 dense decoders: the 0.6B-8B shapes and a tiny one for CPUs",
            presets=qwen3.PRESETS,
            hub_ids=qwen3.HUB_IDS,
            config_class="Qwen3Config",
            model_types=(qwen3.MODEL_TYPE,),
            build_config=qwen3.build_config,
            shape=ModelShape.from_config,
            tokenizer="qwen3",
            attention_implementations=("eager", "sdpa", "flex_attention", "flash_attention_2", "torch_varlen"),
            capabilities=(REPEATED_LAYERS, FLOAT8_LINEARS, LIGER_PATCH),
            packing=("position_ids",),
        ),
        ModelFamily(
            name="qwen3_5",
            description="Qwen3.5/3.6/3.8 hybrids: 3 Gated DeltaNet layers to 1 gated attention layer; 0.8B-27B",
            presets=qwen3_5.PRESETS,
            hub_ids=qwen3_5.HUB_IDS,
            config_class="Qwen3_5TextConfig",
            model_types=(qwen3_5.MODEL_TYPE, qwen3_5.CHECKPOINT_MODEL_TYPE),
            build_config=qwen3_5.build_config,
            shape=qwen3_5.shape,
            tokenizer="qwen3.5",
            # of the full-attention layers; flex_attention is refused by transformers for this model class
            attention_implementations=("eager", "sdpa", "flash_attention_2", "torch_varlen"),
            # Gated DeltaNet and gated attention layers alternate: two kinds of layer, one compiled graph each.
            capabilities=(GATED_DELTANET, REPEATED_LAYERS, LIGER_PATCH),
            # Packed rows carry their boundaries: fla's kernels take cu_seqlens, and the reference path
            # (kernels.hybrid_paths) runs the delta rule and the convolution once per sequence. With position_ids
            # alone transformers' Gated DeltaNet mixes the sequences (measured: logits off by up to 0.107 on CPU).
            packing=(BOUNDARIES_PACKING,),
            shipped_results="hybrid",
            liger_gaps={"rope": "Liger's Qwen3.5 patch has no rotary kernel (it raises NotImplementedError for rope)"},
            kernel_gaps={
                "cce+compile": "Cut Cross-Entropy under whole-model compile has no measurement on a hybrid "
                "(cce and compile each run on it; cce+compile is measured on Qwen3)"
            },
        ),
    )
}


def _index(keys: Callable[[ModelFamily], Iterable[str]], what: str) -> dict[str, ModelFamily]:
    """Key -> family over the whole table; a key claimed by two families is an error at import."""
    index: dict[str, ModelFamily] = {}
    for family in FAMILIES.values():
        for key in keys(family):
            if key in index:
                raise ValueError(f"{what} {key!r} belongs to both {index[key].name!r} and {family.name!r}")
            index[key] = family
    return index


_BY_PRESET = _index(lambda family: family.presets, "preset")
_BY_MODEL_TYPE = _index(lambda family: family.model_types, "model_type")
_BY_HUB_ID = _index(lambda family: family.hub_ids.values(), "hub id")
# Every preset of every family: name -> config values.
MODEL_PRESETS: dict[str, Mapping[str, Any]] = {name: _BY_PRESET[name].presets[name] for name in _BY_PRESET}


def is_preset(name: str) -> bool:
    return name in _BY_PRESET


def family_of_preset(name: str) -> ModelFamily:
    """The family a preset belongs to; an unknown name is a clear error listing the presets."""
    if name not in _BY_PRESET:
        raise ValueError(f"model={name!r} is not a preset: presets are {', '.join(MODEL_PRESETS)}")
    return _BY_PRESET[name]


def family_of_model_type(model_type: str) -> ModelFamily | None:
    """The family covering a config's ``model_type``, or None when no family does."""
    return _BY_MODEL_TYPE.get(model_type)


def model_type_of(folder: str | Path) -> str | None:
    """The ``model_type`` in a checkpoint folder's config.json, or None without one."""
    config = Path(folder).expanduser() / "config.json"
    if not config.is_file():
        return None
    model_type = json.loads(config.read_text()).get("model_type")
    return model_type if isinstance(model_type, str) else None


def family_of_model(name_or_path: str) -> ModelFamily | None:
    """The family of a preset name, a preset's hub id, or a folder by its config.json; else None (no network)."""
    if name_or_path in _BY_PRESET:
        return _BY_PRESET[name_or_path]
    if name_or_path in _BY_HUB_ID:
        return _BY_HUB_ID[name_or_path]
    model_type = model_type_of(name_or_path)
    return family_of_model_type(model_type) if model_type else None


def packs_with_boundaries(name_or_path: str) -> bool:
    """Whether the family of a model hands packed rows their boundaries as keyword arguments (its packing
    modes list ``BOUNDARIES_PACKING``); False when no family covers the model."""
    family = family_of_model(name_or_path)
    return family is not None and BOUNDARIES_PACKING in family.packing


def smallest_preset(name: str) -> str:
    """The smallest preset of a preset's family (its first: the tiny CPU shape)."""
    return next(iter(family_of_preset(name).presets))


def packing_mode_of(name_or_path: str) -> str:
    """How a model's packed rows keep their sequences apart (a key of ``PACKING_MODES``): ``BOUNDARIES_PACKING``
    for a family that needs the boundaries, else ``position_ids`` that restart at every sequence."""
    return BOUNDARIES_PACKING if packs_with_boundaries(name_or_path) else POSITION_IDS_PACKING


def preset_config(name: str, **overrides: Any) -> Any:
    """The transformers config of a preset, built by its family (``overrides`` win)."""
    return family_of_preset(name).build_config(name, **overrides)


# What an export names in place of a preset no released checkpoint has the shape of (a random-weight miniature).
NO_CHECKPOINT = "YOUR-CHECKPOINT"


def hub_id(model: str) -> str:
    """The hub id of the released model a preset has the shape of (:data:`NO_CHECKPOINT` for a preset that none
    has, such as the tiny miniatures); any other name (a hub id, a local folder) unchanged."""
    family = _BY_PRESET.get(model)
    return family.hub_ids.get(model, NO_CHECKPOINT) if family else model


def unsupported(
    model_type: str,
    attn_implementation: str = "",
    kernels: str = "",
    packing: str = "",
    liger_kernels: Sequence[str] = (),
) -> str:
    """Why the family of ``model_type`` cannot run these settings; '' when it can or no family covers it (the kernel
    backend itself is checked where it is applied: ``nbhelpers.kernels.backends.apply_backend``)."""
    family = family_of_model_type(model_type)
    return family.refusal(attn_implementation, kernels, packing, liger_kernels) if family else ""


def model_shape(config: Any) -> ModelShape:
    """Parameter and FLOP arithmetic of a config, by its family (a dense decoder's when no family covers it)."""
    family = family_of_model_type(getattr(config, "model_type", ""))
    return family.shape(config) if family else ModelShape.from_config(config)
