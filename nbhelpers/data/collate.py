"""A step's tensors under a padding setting, and the token counts of a collated batch.

Which samples form a step, and how wide a padded row is, come from the strategy table
(:mod:`nbhelpers.data.strategies`); this module builds the tensors: padded rows with an
``attention_mask``, or for a packed strategy one flat row with ``position_ids`` restarting at 0 for each
sequence (transformers' ``DataCollatorWithFlattening``). A model whose layers cannot see boundaries in
``position_ids`` (a hybrid's Gated DeltaNet layers and their convolution) also gets them as keyword arguments
(``boundaries=True``): ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32 offsets), ``max_length_q``/``max_length_k``
(ints) and ``seq_idx`` (int32, the sequence of each position), all passed on to the model by ``model(**batch)``.

Labels never cross a sequence boundary: padded positions and the first token of each packed
sequence carry -100, so no token is trained to predict the next sequence's first token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .loading import IGNORE_INDEX, Example
from .strategies import PaddingSettings, row_width


@dataclass
class TokenCounts:
    """The three token counts of one step."""

    positions: int  # every position the model computes, padding included
    real: int  # non-pad tokens
    loss: int  # tokens whose next-token prediction is in the loss

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.real / self.positions if self.positions else 0.0


BOUNDARY_KEYS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")


def collate(
    examples: Sequence[Example], settings: PaddingSettings, pad_token_id: int, boundaries: bool = False
) -> dict[str, Any]:
    """Tensors for one step: input_ids, labels and attention_mask (padded) or position_ids (packed), and for
    a packed row with ``boundaries`` the sequence boundaries (:data:`BOUNDARY_KEYS`)."""
    import torch

    cut = settings.max_length
    rows = [{"input_ids": e["input_ids"][:cut], "labels": e["labels"][:cut]} for e in examples]
    if settings.entry.packed:
        from transformers import DataCollatorWithFlattening

        flat = DataCollatorWithFlattening(
            return_position_ids=True, separator_id=IGNORE_INDEX,
            return_flash_attn_kwargs=boundaries, return_seq_idx=boundaries,
        )  # fmt: skip
        return pad_packed_row(dict(flat(rows, return_tensors="pt")), settings.token_multiple, pad_token_id)
    width = row_width([len(r["input_ids"]) for r in rows], settings)
    width += -width % settings.token_multiple  # the kernels' multiple (float8: 16), past max_length if need be
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        input_ids[i, :n] = torch.tensor(row["input_ids"])
        labels[i, :n] = torch.tensor(row["labels"])
        attention_mask[i, :n] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask}


def pad_packed_row(batch: dict[str, Any], multiple: int, pad_token_id: int) -> dict[str, Any]:
    """A packed row with its positions rounded up to ``multiple``: pad tokens at the end, labels -100 and
    position ids 0 (each pad a one-token sequence, as :func:`trailing_padding` reads them); its boundaries, where
    present, gain one sequence a pad."""
    import torch

    width = batch["input_ids"].shape[-1]
    extra = -width % multiple
    if not extra:
        return batch
    padded = dict(batch)
    for key, fill in (("input_ids", pad_token_id), ("labels", IGNORE_INDEX), ("position_ids", 0)):
        tail = torch.full((*batch[key].shape[:-1], extra), fill, dtype=batch[key].dtype)
        padded[key] = torch.cat([batch[key], tail], dim=-1)
    if "seq_idx" in batch:
        first = int(batch["seq_idx"].max()) + 1
        tail = torch.arange(first, first + extra, dtype=batch["seq_idx"].dtype).reshape(1, extra)
        padded["seq_idx"] = torch.cat([batch["seq_idx"], tail], dim=-1)
    for key in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if key in batch:
            ends = torch.arange(width + 1, width + extra + 1, dtype=batch[key].dtype)
            padded[key] = torch.cat([batch[key], ends])
    return padded


def _packed_rows(batch: dict[str, Any]) -> list[list[int]] | None:
    """The position_ids of each row of a padding-free batch (position_ids, no mask), else None."""
    if "position_ids" not in batch or batch.get("attention_mask") is not None:
        return None
    ids = batch["position_ids"]
    return ids.reshape(-1, ids.shape[-1]).tolist() if ids.dim() > 1 else [ids.tolist()]


def trailing_padding(positions: Sequence[int]) -> int:
    """Positions of padding at the end of one padding-free row: the final run of position ids 0.

    A collator that pads a flat row to a multiple (TRL's ``padding_free`` with ``pad_to_multiple_of``) pads
    ``position_ids`` with 0, so each pad looks like a one-token sequence; a real one-token sequence there has
    no token in the loss either and is counted with them."""
    end = len(positions)
    while end and positions[end - 1] == 0:
        end -= 1
    return len(positions) - end


def count_tokens(batch: dict[str, Any]) -> TokenCounts:
    """Positions, real tokens and loss tokens of a collated batch (labels are shifted by one); a padding-free
    row's trailing pads (:func:`trailing_padding`) are not real tokens."""
    positions = int(batch["input_ids"].numel())
    mask = batch.get("attention_mask")
    rows = _packed_rows(batch)
    if mask is not None:
        real = int(mask.sum())
    else:
        real = positions - sum(trailing_padding(row) for row in rows or [])
    loss = int((batch["labels"][..., 1:] != IGNORE_INDEX).sum())
    return TokenCounts(positions=positions, real=real, loss=loss)


def to_device(batch: dict[str, Any], device: str) -> dict[str, Any]:
    """A collated batch on a device (tensors moved; ints such as ``max_length_q`` kept as they are)."""
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.items()}


def sequence_lengths(batch: dict[str, Any]) -> list[int]:
    """Real length of each sequence in a batch (packed rows split at position_ids == 0, their trailing pads
    left out; without a mask or position_ids, every row is one sequence of its full width)."""
    rows = _packed_rows(batch)
    if rows is not None:
        lengths = []
        for row in rows:
            positions = row[: len(row) - trailing_padding(row)]
            starts = [i for i, p in enumerate(positions) if p == 0] + [len(positions)]
            lengths += [b - a for a, b in zip(starts, starts[1:]) if b > a]
        return lengths
    if batch.get("attention_mask") is None:
        rows, width = batch["input_ids"].shape if batch["input_ids"].dim() == 2 else (1, batch["input_ids"].numel())
        return [int(width)] * int(rows)
    return [int(n) for n in batch["attention_mask"].sum(dim=-1).tolist()]
