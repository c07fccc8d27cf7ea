"""The Qwen3.5/3.6/3.8 hybrid family: three Gated DeltaNet (linear attention) layers to one gated attention layer.

Presets have random weights and the text-model shapes of the released checkpoints' ``config.json``
(``text_config``): Qwen3.5-0.8B and Qwen3.5-2B (hidden 1,024 / 2,048, 24 layers, 18 of them Gated
DeltaNet, tied 248,320-token vocabulary), and the 27B shape shared by Qwen3.5-27B, Qwen3.6-27B and
Qwen3.8-27B (hidden 5,120, 64 layers, 48 of them Gated DeltaNet, 48 value heads, untied vocabulary).
The released checkpoints are multimodal (``model_type`` "qwen3_5" with a ``text_config``);
``AutoModelForCausalLM`` loads their text model, which is what the workbook trains.

``qwen3.5-tiny`` keeps the real 248,320-token vocabulary: the Qwen3.5 tokenizer's ids reach 248,076,
and a step of the tiny model on a CPU costs about as much as ``qwen3-tiny``'s (its lm head dominates).
"""

from __future__ import annotations

from typing import Any

from .shape import ModelShape

MODEL_TYPE = "qwen3_5_text"  # presets and checkpoints saved from them
CHECKPOINT_MODEL_TYPE = "qwen3_5"  # the released (multimodal) checkpoints
VOCAB_SIZE = 248_320
FULL_ATTENTION_INTERVAL = 4  # every fourth layer is full attention, the other three Gated DeltaNet


def layer_types(num_layers: int, interval: int = FULL_ATTENTION_INTERVAL) -> list[str]:
    """``config.layer_types`` of a hybrid stack: linear attention, with full attention every ``interval``-th layer."""
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]


_COMMON: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "head_dim": 256,
    "num_key_value_heads": 2,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "max_position_embeddings": 262_144,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "eos_token_id": 248_044,
}
_SHAPE_27B: dict[str, Any] = {
    **_COMMON,
    "hidden_size": 5120,
    "intermediate_size": 17_408,
    "num_hidden_layers": 64,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "linear_num_value_heads": 48,
    "tie_word_embeddings": False,
    "layer_types": layer_types(64),
}
PRESETS: dict[str, dict[str, Any]] = {
    "qwen3.5-tiny": {
        **_COMMON,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
        "layer_types": layer_types(4),
    },
    "qwen3.5-0.8b": {
        **_COMMON,
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_hidden_layers": 24,
        "num_attention_heads": 8,
        "tie_word_embeddings": True,
        "layer_types": layer_types(24),
    },
    "qwen3.5-2b": {
        **_COMMON,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 8,
        "tie_word_embeddings": True,
        "layer_types": layer_types(24),
    },
    "qwen3.5-27b": _SHAPE_27B,
    "qwen3.6-27b": _SHAPE_27B,
    "qwen3.8-27b": _SHAPE_27B,
}
HUB_IDS: dict[str, str] = {
    "qwen3.5-0.8b": "Qwen/Qwen3.5-0.8B",
    "qwen3.5-2b": "Qwen/Qwen3.5-2B",
    "qwen3.5-27b": "Qwen/Qwen3.5-27B",
    "qwen3.6-27b": "Qwen/Qwen3.6-27B",
    "qwen3.8-27b": "Qwen/Qwen3.8-27B",
}


def build_config(preset: str, **overrides: Any) -> Any:
    """A transformers ``Qwen3_5TextConfig`` with a preset's shape (``overrides`` win)."""
    from transformers import Qwen3_5TextConfig

    values = {**PRESETS[preset], **overrides}
    values["layer_types"] = list(values["layer_types"])  # never share the preset's list with a config
    if "num_hidden_layers" in overrides and "layer_types" not in overrides:
        values["layer_types"] = layer_types(values["num_hidden_layers"])
    return Qwen3_5TextConfig(**values)


def text_config(config: Any) -> Any:
    """The text model's config: a released checkpoint's ``text_config``, else the config itself."""
    return getattr(config, "text_config", None) or config


def shape(config: Any) -> ModelShape:
    """Parameter and FLOP arithmetic of a hybrid config: which layers are full attention, and the
    Gated DeltaNet dimensions of the others (``ModelShape`` counts both kinds)."""
    text = text_config(config)
    dense = ModelShape.from_config(text)
    types = list(text.layer_types)
    return ModelShape(
        vocab_size=dense.vocab_size,
        hidden_size=dense.hidden_size,
        intermediate_size=dense.intermediate_size,
        num_layers=dense.num_layers,
        num_heads=dense.num_heads,
        num_kv_heads=dense.num_kv_heads,
        head_dim=dense.head_dim,
        # a released checkpoint ties (or not) by its top-level flag, which transformers follows when loading
        tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", dense.tie_word_embeddings)),
        num_attention_layers=types.count("full_attention"),
        attention_output_gate=True,
        linear_num_key_heads=text.linear_num_key_heads,
        linear_num_value_heads=text.linear_num_value_heads,
        linear_key_head_dim=text.linear_key_head_dim,
        linear_value_head_dim=text.linear_value_head_dim,
        linear_conv_kernel=text.linear_conv_kernel_dim,
    )
