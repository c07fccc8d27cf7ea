"""The weight matmuls (``nn.Linear`` modules) of a decoder shape, by name: what LoRA targets, what a frozen base holds.

Read off a :class:`~nbhelpers.models.shape.ModelShape` without building the model, with the module names
transformers gives them (Qwen3's ``self_attn.q_proj``, Qwen3.5's ``linear_attn.in_proj_qkv``, ``mlp.gate_proj``,
``lm_head``), so a count from the shape equals the count PEFT makes on the built model (tests check both).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .shape import ModelShape

ALL_LINEAR = "all-linear"  # PEFT's spelling: every nn.Linear but the output layer (lm_head)
OUTPUT_LAYER = "lm_head"
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class LinearModule:
    """One kind of ``nn.Linear`` of the model: its path inside a layer (or the model), widths and how many."""

    path: str  # e.g. "self_attn.q_proj", "mlp.down_proj", "lm_head"
    in_features: int
    out_features: int
    count: int  # modules of this kind in the model (one per layer that has it)
    reads: str = ""  # the input it shares with other kinds ("" = its own): q, k and v read one normed input

    @property
    def input_name(self) -> str:
        """What it reads: its shared input's name, else its own path."""
        return self.reads or self.path

    @property
    def weights(self) -> int:
        """Weight elements of all modules of this kind."""
        return self.in_features * self.out_features * self.count

    def matches(self, targets: str | Sequence[str]) -> bool:
        """Whether PEFT's ``target_modules`` picks this module: "all-linear" (the lm head left out), or a name
        equal to the module's path or a dotted suffix of it ("q_proj" picks "self_attn.q_proj")."""
        if isinstance(targets, str):
            return self.path != OUTPUT_LAYER if targets == ALL_LINEAR else self.matches([targets])
        return any(self.path == t or self.path.endswith("." + t) for t in targets)


def attention_linears(shape: ModelShape) -> list[LinearModule]:
    """The softmax-attention layers' projections (q with Qwen3.5's output gate doubles its width)."""
    h, d, layers = shape.hidden_size, shape.head_dim, shape.full_attention_layers
    q = shape.num_heads * d * (2 if shape.attention_output_gate else 1)
    kv = shape.num_kv_heads * d
    return [
        LinearModule("self_attn.q_proj", h, q, layers, "self_attn"),
        LinearModule("self_attn.k_proj", h, kv, layers, "self_attn"),
        LinearModule("self_attn.v_proj", h, kv, layers, "self_attn"),
        LinearModule("self_attn.o_proj", shape.num_heads * d, h, layers),
    ]


def linear_attention_linears(shape: ModelShape) -> list[LinearModule]:
    """A Gated DeltaNet layer's projections: qkv, output gate z, beta (b), decay (a), output."""
    layers = shape.linear_attention_layers
    if not layers:
        return []
    h = shape.hidden_size
    key_dim = shape.linear_num_key_heads * shape.linear_key_head_dim
    value_dim = shape.linear_num_value_heads * shape.linear_value_head_dim
    heads = shape.linear_num_value_heads
    return [
        LinearModule("linear_attn.in_proj_qkv", h, 2 * key_dim + value_dim, layers, "linear_attn"),
        LinearModule("linear_attn.in_proj_z", h, value_dim, layers, "linear_attn"),
        LinearModule("linear_attn.in_proj_b", h, heads, layers, "linear_attn"),
        LinearModule("linear_attn.in_proj_a", h, heads, layers, "linear_attn"),
        LinearModule("linear_attn.out_proj", value_dim, h, layers),
    ]


def mlp_linears(shape: ModelShape) -> list[LinearModule]:
    """Every layer's SwiGLU MLP."""
    h, inner, layers = shape.hidden_size, shape.intermediate_size, shape.num_layers
    return [
        LinearModule("mlp.gate_proj", h, inner, layers, "mlp"),
        LinearModule("mlp.up_proj", h, inner, layers, "mlp"),
        LinearModule("mlp.down_proj", inner, h, layers),
    ]


def linear_modules(shape: ModelShape) -> list[LinearModule]:
    """Every ``nn.Linear`` of the model by kind: attention, Gated DeltaNet, MLP, then the lm head."""
    head = LinearModule(OUTPUT_LAYER, shape.hidden_size, shape.vocab_size, 1)
    return attention_linears(shape) + linear_attention_linears(shape) + mlp_linears(shape) + [head]


def matmul_weights(shape: ModelShape) -> int:
    """Weights of every ``nn.Linear`` (the lm head included, tied or not): a frozen base's matmul weights, what
    ``adapters.frozen_matmul_parameters`` counts on the built model once every weight is frozen."""
    return sum(m.weights for m in linear_modules(shape))


def targeted(shape: ModelShape, targets: str | Sequence[str]) -> list[LinearModule]:
    """The linear modules ``targets`` picks (PEFT's ``target_modules``: "all-linear" or module names)."""
    return [m for m in linear_modules(shape) if m.matches(targets)]


def lora_parameters(shape: ModelShape, rank: int, targets: str | Sequence[str] = ALL_LINEAR) -> int:
    """LoRA's trained parameters: rank x (in + out) per targeted linear (A is rank x in, B is out x rank)."""
    return sum(rank * (m.in_features + m.out_features) * m.count for m in targeted(shape, targets))


def parse_targets(text: str) -> str | list[str]:
    """PEFT's ``target_modules`` from a setting: "all-linear", or the names of a comma-separated list."""
    text = text.strip()
    if text == ALL_LINEAR:
        return ALL_LINEAR
    return [name.strip() for name in text.split(",") if name.strip()]


def bad_target_names(text: str) -> list[str]:
    """Names of a comma list that cannot be module names (empty, or not dotted identifiers such as
    ``mlp.down_proj``); [] for "all-linear" or a valid list."""
    if text.strip() == ALL_LINEAR:
        return []
    names = [name.strip() for name in text.split(",")]
    return [name for name in names if not _MODULE_NAME.fullmatch(name)] if any(names) else [text]
