"""The Qwen3 dense family: the released shapes as presets (random weights), their hub ids, the config."""

from __future__ import annotations

from typing import Any

MODEL_TYPE = "qwen3"
VOCAB_SIZE = 151_936

# Shapes of the released Qwen3 dense models (their config.json files), plus a tiny one for CPUs.
_COMMON: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "head_dim": 128,
    "num_key_value_heads": 8,
    "max_position_embeddings": 40_960,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "bos_token_id": 151_643,
    "eos_token_id": 151_645,
}
PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-tiny": {
        **_COMMON,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": True,
    },
    "qwen3-0.6b": {
        **_COMMON,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "qwen3-1.7b": {
        **_COMMON,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "qwen3-4b": {
        **_COMMON,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": True,
    },
    "qwen3-8b": {
        **_COMMON,
        "hidden_size": 4096,
        "intermediate_size": 12_288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": False,
    },
}
HUB_IDS: dict[str, str] = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
}


def build_config(preset: str, **overrides: Any) -> Any:
    """A transformers ``Qwen3Config`` with a preset's shape (``overrides`` win)."""
    from transformers import Qwen3Config

    return Qwen3Config(**{**PRESETS[preset], **overrides})
