"""Padding strategies: which samples form each step (the plan) and how a step's tensors are built.

Strategies:
- ``static``: pad every row to ``max_length``.
- ``dynamic``: pad to the longest row of the batch.
- ``multiple``: pad to the longest row, rounded up to ``pad_to_multiple_of``.
- ``bucketed``: group similar lengths into batches (``num_buckets`` length quantiles), pad dynamically.
- ``packed``: padding-free; the batch's rows flattened into one row with ``position_ids``
  restarting at 0 for each sequence (transformers' ``DataCollatorWithFlattening``).
- ``token_budget``: packed rows filled greedily up to ``token_budget`` tokens per step.

Labels never cross a sequence boundary: padded positions and the first token of each packed
sequence carry -100, so no token is trained to predict the next sequence's first token.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nbhelpers.measure.config import _check_int

from .loading import IGNORE_INDEX, Example

PACKED_STRATEGIES = ("packed", "token_budget")


def plan_batches(
    lengths: Sequence[int],
    strategy: str,
    batch_size: int,
    max_length: int,
    num_buckets: int = 4,
    token_budget: int = 0,
    seed: int = 0,
) -> list[list[int]]:
    """Indices of the samples in each step, in order; every sample appears exactly once."""
    _check_int("batch_size", batch_size, 1, 1 << 20)
    _check_int("max_length", max_length, 1, 1 << 24)
    _check_int("num_buckets", num_buckets, 1, 1 << 20)
    _check_int("token_budget", token_budget, 0, 1 << 30)
    clipped = [min(length, max_length) for length in lengths]
    order = list(range(len(clipped)))
    if strategy in ("static", "dynamic", "multiple", "packed"):
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if strategy == "bucketed":
        by_length = sorted(order, key=lambda i: (clipped[i], i))
        size = max(1, math.ceil(len(by_length) / num_buckets))
        batches = []
        for start in range(0, len(by_length), size):
            bucket = sorted(by_length[start : start + size])  # keep dataset order inside a bucket
            batches.extend(bucket[i : i + batch_size] for i in range(0, len(bucket), batch_size))
        random.Random(seed).shuffle(batches)
        return batches
    if strategy == "token_budget":
        budget = token_budget or batch_size * max_length
        batches, current, used = [], [], 0
        for index in order:
            if current and used + clipped[index] > budget:
                batches.append(current)
                current, used = [], 0
            current.append(index)
            used += clipped[index]
        if current:
            batches.append(current)
        return batches
    raise ValueError(
        f"padding={strategy!r} is not a strategy: one of static, dynamic, multiple, bucketed, packed, token_budget"
    )


@dataclass
class TokenCounts:
    """The three token counts of one step."""

    positions: int  # every position the model computes, padding included
    real: int  # non-pad tokens
    loss: int  # tokens whose next-token prediction is in the loss

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.real / self.positions if self.positions else 0.0


def padded_length(lengths: Sequence[int], strategy: str, max_length: int, pad_to_multiple_of: int = 8) -> int:
    """Row length that a padded strategy gives a batch with these (clipped) lengths."""
    _check_int("max_length", max_length, 1, 1 << 24)
    _check_int("pad_to_multiple_of", pad_to_multiple_of, 1, 1 << 16)
    longest = min(max(lengths), max_length)
    if strategy == "static":
        return max_length
    if strategy == "multiple":
        return min(math.ceil(longest / pad_to_multiple_of) * pad_to_multiple_of, max(max_length, longest))
    return longest


def collate(
    examples: Sequence[Example],
    strategy: str,
    max_length: int,
    pad_token_id: int,
    pad_to_multiple_of: int = 8,
) -> dict[str, Any]:
    """Tensors for one step: input_ids, labels and attention_mask (padded) or position_ids (packed)."""
    import torch

    rows = [{"input_ids": e["input_ids"][:max_length], "labels": e["labels"][:max_length]} for e in examples]
    if strategy in PACKED_STRATEGIES:
        from transformers import DataCollatorWithFlattening

        flat = DataCollatorWithFlattening(return_position_ids=True, separator_id=IGNORE_INDEX)
        return dict(flat(rows, return_tensors="pt"))
    width = padded_length([len(r["input_ids"]) for r in rows], strategy, max_length, pad_to_multiple_of)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        input_ids[i, :n] = torch.tensor(row["input_ids"])
        labels[i, :n] = torch.tensor(row["labels"])
        attention_mask[i, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def count_tokens(batch: dict[str, Any]) -> TokenCounts:
    """Positions, real tokens and loss tokens of a collated batch (labels are shifted by one)."""
    positions = int(batch["input_ids"].numel())
    mask = batch.get("attention_mask")
    real = int(mask.sum()) if mask is not None else positions
    loss = int((batch["labels"][..., 1:] != IGNORE_INDEX).sum())
    return TokenCounts(positions=positions, real=real, loss=loss)


def sequence_lengths(batch: dict[str, Any]) -> list[int]:
    """Real length of each sequence in a batch (packed rows split at position_ids == 0)."""
    if "position_ids" in batch and batch.get("attention_mask") is None:
        positions = batch["position_ids"].reshape(-1).tolist()
        starts = [i for i, p in enumerate(positions) if p == 0] + [len(positions)]
        return [b - a for a, b in zip(starts, starts[1:]) if b > a]
    return [int(n) for n in batch["attention_mask"].sum(dim=-1).tolist()]
