"""Each padding strategy as a collator and a batch sampler, for plain PyTorch and for HF Trainer.

Built on :mod:`nbhelpers.data.collate` (the same plan and tensors the measured step uses):

- :class:`StrategyCollator` is callable on a list of examples and returns tensors, so it serves as a
  ``DataLoader(collate_fn=...)`` or a Trainer ``data_collator``.
- :class:`StrategyBatchSampler` is a ``Sampler[list[int]]`` built from token lengths, for
  ``DataLoader(batch_sampler=...)``; it decides which samples share a step (length buckets, token
  budgets), which a collator alone cannot.

Plain PyTorch::

    settings = PaddingSettings("bucketed", batch_size=8, max_length=2048)
    loader = strategy_dataloader(examples, settings, pad_token_id=tok.pad_token_id)

HF Trainer: pass ``data_collator=StrategyCollator("packed", tok.pad_token_id, 2048)``. Trainer builds its
own sampler, so for ``bucketed``/``token_budget`` grouping either use its ``group_by_length=True`` or
override ``Trainer.get_train_dataloader`` to return :func:`strategy_dataloader`'s loader.

Labels never cross a sequence boundary: padding carries -100, and so does the first token of every
packed sequence (nothing is trained to predict the next sequence's first token).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from torch.utils.data import Sampler

from .collate import collate
from .loading import Example
from .strategies import PaddingSettings, plan_batches


def _as_list(value: Any) -> list[int]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def as_example(item: Mapping[str, Any]) -> Example:
    """``input_ids`` and ``labels`` as int lists (labels default to the input ids); other keys dropped."""
    input_ids = _as_list(item["input_ids"])
    labels = _as_list(item["labels"]) if item.get("labels") is not None else list(input_ids)
    if len(labels) != len(input_ids):
        raise ValueError(f"labels ({len(labels)}) and input_ids ({len(input_ids)}) differ in length")
    return {"input_ids": input_ids, "labels": labels}


class StrategyCollator:
    """Tensors for one step under a padding strategy; a DataLoader ``collate_fn`` or Trainer ``data_collator``.

    Padded strategies return ``input_ids``, ``labels`` and ``attention_mask`` of shape (batch, width);
    packed ones (``Strategy.packed`` in the table) return one row of ``input_ids``, ``labels`` and
    ``position_ids`` restarting at 0 per sequence; rows are padded to ``token_multiple`` positions where a
    kernel needs it (float8: 16). A strategy that groups lengths collates like its
    padding alone (the grouping is the sampler's job).
    """

    def __init__(
        self,
        strategy: str,
        pad_token_id: int,
        max_length: int,
        pad_to_multiple_of: int = 8,
        boundaries: bool = False,
        token_multiple: int = 1,
    ) -> None:
        self.settings = PaddingSettings(
            strategy, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
            token_multiple=token_multiple,
        )  # fmt: skip
        self.strategy = strategy
        self.pad_token_id = pad_token_id
        self.max_length = max_length
        self.pad_to_multiple_of = pad_to_multiple_of
        self.boundaries = boundaries  # packed rows also carry cu_seq_lens/seq_idx (a hybrid's linear attention)

    @property
    def packed(self) -> bool:
        return self.settings.entry.packed

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not examples:
            raise ValueError("a batch needs at least one example")
        rows = [as_example(e) for e in examples]
        return collate(rows, self.settings, self.pad_token_id, self.boundaries)

    def __repr__(self) -> str:
        return (
            f"StrategyCollator({self.strategy!r}, pad_token_id={self.pad_token_id}, max_length={self.max_length}, "
            f"pad_to_multiple_of={self.pad_to_multiple_of})"
        )


class StrategyBatchSampler(Sampler[list[int]]):
    """Indices of each step's samples under a padding setting, from token lengths; every index once per epoch.

    Without ``shuffle`` epoch 0 is exactly :func:`nbhelpers.data.strategies.plan_batches` (the measured plan).
    With ``shuffle`` the samples are permuted by ``seed + epoch`` before planning. ``set_epoch``
    changes the permutation and the bucket order, as ``DistributedSampler.set_epoch`` does.
    """

    def __init__(self, lengths: Sequence[int], settings: PaddingSettings, shuffle: bool = False) -> None:
        self.lengths = [int(n) for n in lengths]
        self.settings = settings
        self.shuffle = shuffle
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def plan(self) -> list[list[int]]:
        """The batches of the current epoch."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        seed = self.settings.seed + self.epoch
        order = list(range(len(self.lengths)))
        if self.shuffle:
            random.Random(seed).shuffle(order)
        batches = plan_batches([self.lengths[i] for i in order], self.settings.replace(seed=seed))
        plan = [[order[j] for j in batch] for batch in batches]
        self._cache = (self.epoch, plan)
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        return iter([list(batch) for batch in self.plan()])

    def __len__(self) -> int:
        return len(self.plan())


def strategy_dataloader(
    examples: Sequence[Mapping[str, Any]],
    settings: PaddingSettings,
    pad_token_id: int,
    shuffle: bool = False,
    **loader_kwargs: Any,
) -> Any:
    """A ``torch.utils.data.DataLoader`` over tokenized examples with this setting's sampler and collator."""
    from torch.utils.data import DataLoader

    lengths = [len(e["input_ids"]) for e in examples]
    sampler = StrategyBatchSampler(lengths, settings, shuffle)
    collator = StrategyCollator(
        settings.strategy, pad_token_id, settings.max_length, settings.pad_to_multiple_of,
        token_multiple=settings.token_multiple,
    )  # fmt: skip
    return DataLoader(list(examples), batch_sampler=sampler, collate_fn=collator, **loader_kwargs)
