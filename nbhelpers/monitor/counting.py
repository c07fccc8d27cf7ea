"""What one batch holds: positions, real tokens, loss tokens and the length of each sequence.

The counts are the data layer's (:func:`nbhelpers.data.collate.count_tokens` and ``sequence_lengths``), so a
monitored run counts as the workbook's measured steps do: padded rows say which positions are real with an
``attention_mask``; padding-free (packed) rows carry no mask and split into sequences where ``position_ids``
restart at 0, and the pads a collator adds at a row's end to reach a multiple (position id 0 each) are not
real tokens; loss tokens are labels other than -100 after the one-position shift.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.collate import count_tokens, sequence_lengths

BATCH_KEYS = ("input_ids", "attention_mask", "labels", "position_ids")  # what the counts read


@dataclass(frozen=True)
class BatchCount:
    """The counts of one batch (or of several, added)."""

    positions: int  # every position the model computes, padding included
    real: int  # non-pad tokens
    loss: int | None  # tokens in the loss; None when a batch carried no labels
    sequence_lengths: tuple[int, ...]  # real length of each sequence (for the attention FLOPs)

    def __add__(self, other: BatchCount) -> BatchCount:
        loss = None if self.loss is None or other.loss is None else self.loss + other.loss
        return BatchCount(
            self.positions + other.positions, self.real + other.real, loss,
            self.sequence_lengths + other.sequence_lengths,
        )  # fmt: skip

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.real / self.positions if self.positions else 0.0


EMPTY = BatchCount(0, 0, 0, ())


def batch_tensors(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The tensors the counts read (:data:`BATCH_KEYS`), checked: ``input_ids`` must be a tensor."""
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch={type(batch).__name__}: must be a mapping of tensors with at least 'input_ids'")
    input_ids = batch.get("input_ids")
    if input_ids is None or not hasattr(input_ids, "numel"):
        raise ValueError(
            f"batch: needs 'input_ids' as a tensor (token ids, one row per sequence or one packed row); got keys "
            f"{sorted(batch)}"
        )
    return {key: batch[key] for key in BATCH_KEYS if batch.get(key) is not None}


def count_batch(batch: Mapping[str, Any]) -> BatchCount:
    """Positions, real tokens, loss tokens (None without labels) and sequence lengths of one batch."""
    tensors = batch_tensors(batch)
    labels = tensors.get("labels")
    # Without labels, a one-wide stand-in has nothing left after the shift: the loss count is then None.
    tokens = count_tokens(tensors if labels is not None else {**tensors, "labels": tensors["input_ids"][..., :1]})
    return BatchCount(
        positions=tokens.positions,
        real=tokens.real,
        loss=tokens.loss if labels is not None else None,
        sequence_lengths=tuple(sequence_lengths(tensors)),
    )
