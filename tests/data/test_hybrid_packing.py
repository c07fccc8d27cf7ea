"""Packed rows of a hybrid carry their sequence boundaries, and the measured step hands them to the model."""

import dataclasses
import math

import pytest
import torch
from hybrid_helpers import tiny_hybrid, token_examples

from nbhelpers.data.collate import BOUNDARY_KEYS, collate, count_tokens, sequence_lengths, to_device
from nbhelpers.data.contamination import HYBRID_LOSS_TOLERANCE
from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.kernels.hybrid_paths import use_reference
from nbhelpers.measure import step as step_module
from nbhelpers.measure.config import RunConfig
from nbhelpers.models import families, loading

EXAMPLES = [
    {"input_ids": [11, 12, 13], "labels": [-100, 12, 13]},
    {"input_ids": [21, 22, 23, 24, 25], "labels": [-100, 22, 23, 24, 25]},
    {"input_ids": [31, 32], "labels": [-100, 32]},
]
PACKED = PaddingSettings("packed", max_length=16)


def test_a_packed_row_with_boundaries_carries_cu_seqlens_and_seq_idx():
    batch = collate(EXAMPLES, PACKED, pad_token_id=0, boundaries=True)
    assert set(BOUNDARY_KEYS) <= set(batch)
    assert batch["cu_seq_lens_q"].tolist() == batch["cu_seq_lens_k"].tolist() == [0, 3, 8, 10]
    assert batch["cu_seq_lens_q"].dtype == torch.int32
    assert batch["max_length_q"] == batch["max_length_k"] == 5
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 1, 1, 1, 1, 1, 2, 2]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4, 0, 1]]
    assert sequence_lengths(batch) == [3, 5, 2] and count_tokens(batch).real == 10
    assert to_device(batch, "cpu")["max_length_q"] == 5


def test_without_the_flag_and_on_padded_rows_no_boundaries_are_added():
    assert not set(BOUNDARY_KEYS) & set(collate(EXAMPLES, PACKED, pad_token_id=0))
    padded = collate(EXAMPLES, PaddingSettings("dynamic", max_length=16), pad_token_id=0, boundaries=True)
    assert not set(BOUNDARY_KEYS) & set(padded)


def test_the_flag_comes_from_the_family_packing_modes(monkeypatch):
    assert families.BOUNDARIES_PACKING in families.PACKING_MODES
    assert families.packs_with_boundaries("qwen3-tiny") is False
    hybrid_like = dataclasses.replace(families.FAMILIES["qwen3"], packing=(families.BOUNDARIES_PACKING,))
    monkeypatch.setattr(families, "family_of_model", lambda name: hybrid_like)
    assert families.packs_with_boundaries("qwen3-tiny") is True
    monkeypatch.setattr(loading, "family_of_model", families.family_of_model)  # the one resolve reads the family
    assert loading.resolve_model("qwen3-tiny").boundaries is True
    from nbhelpers.data.tokenizer import load_tokenizer

    config = RunConfig(model="qwen3-tiny", padding="packed", max_length=64, batch_size=2, num_samples=4, steps=1,
                       warmup=0, device="cpu")  # fmt: skip
    batches = step_module.prepare_batches(config, load_tokenizer("qwen3-tiny"), "cpu")
    assert all(set(BOUNDARY_KEYS) <= set(b) for b in batches)
    assert batches[0]["cu_seq_lens_q"][-1] == batches[0]["input_ids"].shape[-1]


def test_a_training_step_on_a_packed_row_with_boundaries_matches_the_sequences_alone():
    """The reference path runs a packed row per sequence: its loss is the token-weighted loss of each
    sequence alone, and a training step (forward and backward) runs on the CPU."""
    model = tiny_hybrid()
    use_reference(model)
    examples = token_examples((40, 25))
    batch = collate(examples, PaddingSettings("packed", max_length=64), pad_token_id=0, boundaries=True)
    with torch.no_grad():
        packed_loss = float(model(**batch).loss)
        alone = [
            (float(model(input_ids=torch.tensor([e["input_ids"]]), labels=torch.tensor([e["labels"]])).loss),
             sum(label != -100 for label in e["labels"][1:]))
            for e in examples
        ]  # fmt: skip
    weighted = sum(loss * n for loss, n in alone) / sum(n for _, n in alone)
    assert abs(packed_loss - weighted) < HYBRID_LOSS_TOLERANCE * weighted  # the package's bound (its comment says why)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_step = step_module.make_step(model.train(), optimizer, "fp32", "cpu")
    loss, grad_norm = train_step(batch)
    # the same fp32 kernels with autograd on: only the blocking of the loss's sums over 512 logits may change, log2(512)
    # = 9 roundings of 2^-24 relative
    assert float(loss) == pytest.approx(packed_loss, rel=math.log2(model.config.vocab_size) * 2**-24)
    assert float(grad_norm) > 0
