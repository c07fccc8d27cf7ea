"""Parameter and FLOP arithmetic of a dense decoder, from its transformers config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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
