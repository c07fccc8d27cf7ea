"""Qwen3 presets with random weights, real loading from a hub id or a local folder, parameter counts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.kernels.attention import prepare_attention

QWEN3_VOCAB_SIZE = 151_936

# Shapes of the released Qwen3 dense models (their config.json files), plus a tiny one for CPUs.
_COMMON: dict[str, Any] = {
    "vocab_size": QWEN3_VOCAB_SIZE,
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
MODEL_PRESETS: dict[str, dict[str, Any]] = {
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
HUB_IDS = {
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "qwen3-8b": "Qwen/Qwen3-8B",
}


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP and memory arithmetic needs to know about a decoder."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: Any) -> ModelShape:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers,
            num_heads=config.num_attention_heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            head_dim=head_dim,
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
        )

    @property
    def layer_parameters(self) -> int:
        """One decoder layer: q/k/v/o projections, q/k norms, SwiGLU MLP, two RMSNorms."""
        h, d = self.hidden_size, self.head_dim
        attention = h * self.num_heads * d + 2 * h * self.num_kv_heads * d + self.num_heads * d * h
        qk_norm = 2 * d
        mlp = 3 * h * self.intermediate_size
        return attention + qk_norm + mlp + 2 * h

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_parameters(self) -> int:
        """Stored parameters (a tied lm head shares the embedding matrix)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_parameters
        return self.embedding_parameters + self.num_layers * self.layer_parameters + self.hidden_size + lm_head

    @property
    def non_embedding_parameters(self) -> int:
        """Parameters without the embedding table and an untied lm head (the figure Qwen's model cards quote)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_parameters
        return self.total_parameters - self.embedding_parameters - lm_head

    @property
    def flop_parameters(self) -> int:
        """Parameters that do matmul work per token: every layer plus the lm head, no embedding lookup."""
        return self.num_layers * self.layer_parameters + self.hidden_size + self.embedding_parameters


def preset_config(name: str, **overrides: Any) -> Any:
    """A transformers Qwen3Config for a preset name."""
    from transformers import Qwen3Config

    if name not in MODEL_PRESETS:
        raise ValueError(f"model={name!r} is not a preset: presets are {', '.join(MODEL_PRESETS)}")
    return Qwen3Config(**{**MODEL_PRESETS[name], **overrides})


def is_preset(name: str) -> bool:
    return name in MODEL_PRESETS


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
    return str(path) if path.exists() else name_or_path


def build_model(
    name_or_path: str, attn_implementation: str = "sdpa", seed: int = 0, dtype: Any = None, device: str = "cpu"
) -> Any:
    """A causal LM: random weights for a preset, else ``from_pretrained`` on a hub id or a folder.

    A local folder must hold a ``config.json``; anything else is taken as a hub id, which needs
    network access (or a filled hub cache) at run time.
    """
    import torch
    from transformers import AutoModelForCausalLM

    prepare_attention(attn_implementation)  # e.g. torch_varlen registers itself with transformers
    torch.manual_seed(seed)
    if is_preset(name_or_path):
        config = preset_config(name_or_path)
        config._attn_implementation = attn_implementation
        with torch.device(device):  # initialise where it will run: seconds, not minutes, for 1.7B on a GPU
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
        model = model.to(dtype) if dtype is not None else model
    else:
        source = model_source(name_or_path)
        kwargs: dict[str, Any] = {"attn_implementation": attn_implementation}
        if dtype is not None:
            kwargs["dtype"] = dtype
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs).to(device)
    disable_kv_cache(model)
    return model


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


def count_parameters(model: Any) -> int:
    """Stored parameters of a model (shared tensors counted once)."""
    seen: set[int] = set()
    total = 0
    for parameter in model.parameters():
        if id(parameter) not in seen:
            seen.add(id(parameter))
            total += parameter.numel()
    return total
