"""Parameter and FLOP arithmetic of a decoder from its transformers config: dense, or hybrid (Gated DeltaNet)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Training state per parameter, in bytes: weights + gradients + AdamW's two moments (all in the weights' dtype,
# as torch.optim.AdamW keeps them). Activations come on top.
TRAINING_BYTES_PER_PARAMETER = {"fp32": 4 * 4, "bf16": 2 * 4}


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP and memory arithmetic needs to know about a decoder.

    A dense decoder has ``num_attention_layers == num_layers`` (``None`` means that). A hybrid one has
    fewer full-attention layers; the others are Gated DeltaNet layers with the ``linear_*`` dimensions
    (Qwen3.5: q/k/v projection, a depthwise causal convolution of ``linear_conv_kernel`` taps over q/k/v,
    output-gate, beta and decay projections, a gated RMSNorm per value head, an output projection).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_word_embeddings: bool
    num_attention_layers: int | None = None
    attention_output_gate: bool = False  # q_proj also yields a sigmoid gate per head (Qwen3.5's gated attention)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel: int = 0

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
    def full_attention_layers(self) -> int:
        """Layers of softmax attention (all of a dense decoder's)."""
        return self.num_layers if self.num_attention_layers is None else self.num_attention_layers

    @property
    def linear_attention_layers(self) -> int:
        """Gated DeltaNet layers (none in a dense decoder)."""
        return self.num_layers - self.full_attention_layers

    def is_full_attention(self, layer: int) -> bool:
        """Whether decoder layer ``layer`` (0-based) is softmax attention: every layer of a dense decoder; in a
        hybrid, the last of each equal group (Qwen3.5's ``layer_types``: layers 3, 7, 11, ... of 3:1)."""
        full = self.full_attention_layers
        if full >= self.num_layers:
            return True
        return full > 0 and (layer + 1) % (self.num_layers // full) == 0

    @property
    def _common_layer_parameters(self) -> int:
        """What every layer has besides its token mixer: SwiGLU MLP and two RMSNorms."""
        return 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size

    @property
    def attention_layer_parameters(self) -> int:
        """One full-attention layer: q (and gate)/k/v/o projections, q/k norms, MLP, norms."""
        h, d = self.hidden_size, self.head_dim
        q = h * self.num_heads * d * (2 if self.attention_output_gate else 1)
        attention = q + 2 * h * self.num_kv_heads * d + self.num_heads * d * h
        return attention + 2 * d + self._common_layer_parameters

    @property
    def linear_attention_layer_parameters(self) -> int:
        """One Gated DeltaNet layer: qkv, z (output gate), beta and decay projections, the depthwise conv over
        q/k/v, per-head dt bias and A_log, the gated RMSNorm (one head's width), output projection, MLP, norms."""
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        conv_dim = 2 * key_dim + value_dim
        projections = h * conv_dim + h * value_dim + 2 * h * self.linear_num_value_heads + value_dim * h
        per_head = 2 * self.linear_num_value_heads  # dt_bias, A_log
        mixer = projections + conv_dim * self.linear_conv_kernel + per_head + self.linear_value_head_dim
        return mixer + self._common_layer_parameters

    @property
    def layer_parameters(self) -> int:
        """All decoder layers' parameters divided by the layer count (a dense decoder's one layer)."""
        return self.decoder_parameters // self.num_layers

    @property
    def decoder_parameters(self) -> int:
        """Every decoder layer together."""
        linear = self.linear_attention_layers * self.linear_attention_layer_parameters
        return self.full_attention_layers * self.attention_layer_parameters + linear

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_parameters(self) -> int:
        """Stored parameters (a tied lm head shares the embedding matrix)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_parameters
        return self.embedding_parameters + self.decoder_parameters + self.hidden_size + lm_head

    @property
    def non_embedding_parameters(self) -> int:
        """Parameters without the embedding table and an untied lm head (the figure Qwen's model cards quote)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_parameters
        return self.total_parameters - self.embedding_parameters - lm_head

    @property
    def flop_parameters(self) -> int:
        """Parameters that do matmul work per token: every layer plus the lm head, no embedding lookup."""
        return self.decoder_parameters + self.hidden_size + self.embedding_parameters

    def training_state_bytes(self, weights: str = "fp32") -> int:
        """Weights, gradients and AdamW moments of the whole model (``weights``: "fp32" or "bf16"); no activations."""
        return self.total_parameters * TRAINING_BYTES_PER_PARAMETER[weights]
