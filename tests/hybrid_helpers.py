"""A tiny Qwen3.5 hybrid (3 Gated DeltaNet layers, 1 full attention layer) and token sequences, for CPU tests.

Built from transformers' Qwen3_5TextConfig directly; the family's own tiny preset can replace it.
"""

from __future__ import annotations

from typing import Any

VOCAB = 512
LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]


def tiny_hybrid(seed: int = 0, attn_implementation: str = "sdpa") -> Any:
    """A 4-layer 3:1 hybrid with random weights, fp32, on the CPU, without a KV cache."""
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=LAYER_TYPES, use_cache=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    return Qwen3_5ForCausalLM._from_config(config, attn_implementation=attn_implementation).eval()


def token_examples(lengths: tuple[int, ...] = (70, 45, 90), seed: int = 0) -> list[dict[str, list[int]]]:
    """Random sequences of the given lengths; the first token of each is a prompt (label -100)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    examples = []
    for n in lengths:
        ids = torch.randint(1, VOCAB, (n,), generator=generator).tolist()
        examples.append({"input_ids": ids, "labels": [-100] + ids[1:]})
    return examples
