"""HF ``Trainer`` that batches as a padding strategy measured: the workbook's sampler and collator.

``Trainer`` builds its own sampler (random or length-grouped) and cannot cut batches to a token budget or into
the workbook's length buckets. :class:`StrategyTrainer` replaces only its training data loader: the steps are
:class:`~nbhelpers.data.samplers.StrategyBatchSampler`'s plan (without ``shuffle``, exactly
:func:`~nbhelpers.data.strategies.plan_batches`) and the tensors come from
:class:`~nbhelpers.data.samplers.StrategyCollator`, as in the measured step. Everything else (optimizer,
precision, Liger, compile) stays the Trainer's. One process: each step is one batch of the plan.

    trainer = StrategyTrainer(model=model, args=training_args, train_dataset=train_dataset,
                              processing_class=tokenizer, padding=PaddingSettings("token_budget", ...))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import Trainer

from .samplers import StrategyBatchSampler, StrategyCollator
from .strategies import PaddingSettings


def example_lengths(dataset: Any) -> list[int]:
    """Token count of every row (``input_ids`` lengths) of a ``datasets.Dataset`` or a list of dicts."""
    column = getattr(dataset, "column_names", None)
    if column is not None:
        if "input_ids" not in column:
            raise ValueError(f"train_dataset needs an 'input_ids' column; it has {', '.join(column)}")
        return [len(ids) for ids in dataset["input_ids"]]
    return [len(row["input_ids"]) for row in dataset]


def strategy_loader(
    dataset: Sequence[Any],
    padding: PaddingSettings,
    pad_token_id: int,
    shuffle: bool = False,
    boundaries: bool = False,
    **loader_kwargs: Any,
) -> Any:
    """A DataLoader over tokenized rows whose steps are the strategy's plan and whose tensors its collator's
    (``boundaries``: packed rows carry their sequence boundaries too, as a hybrid model needs)."""
    from torch.utils.data import DataLoader

    sampler = StrategyBatchSampler(example_lengths(dataset), padding, shuffle)
    collator = StrategyCollator(
        padding.strategy, pad_token_id, padding.max_length, padding.pad_to_multiple_of, boundaries,
        padding.token_multiple,
    )  # fmt: skip
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collator, **loader_kwargs)


class StrategyTrainer(Trainer):
    """``transformers.Trainer`` whose training batches are a padding strategy's plan (see the module docstring).

    ``padding`` is the measured setting; ``shuffle`` permutes the samples per epoch before planning
    (off: dataset order, as measured); ``pad_token_id`` defaults to the processing class's; ``boundaries`` hands
    packed rows their sequence boundaries (``cu_seq_lens_*``, ``seq_idx``), which a hybrid family needs.
    """

    def __init__(
        self,
        *args: Any,
        padding: PaddingSettings,
        shuffle: bool = False,
        pad_token_id: int | None = None,
        boundaries: bool = False,
        **kwargs: Any,
    ) -> None:
        if not isinstance(padding, PaddingSettings):
            raise TypeError(f"padding must be a PaddingSettings, not {type(padding).__name__}")
        self.padding = padding
        self.shuffle = shuffle
        self.pad_token_id = pad_token_id
        self.boundaries = boundaries
        super().__init__(*args, **kwargs)

    def _pad_id(self) -> int:
        if self.pad_token_id is not None:
            return self.pad_token_id
        pad = getattr(self.processing_class, "pad_token_id", None)
        if pad is None:
            raise ValueError("pad_token_id: pass it, or a processing_class (tokenizer) that has one")
        return int(pad)

    def get_train_dataloader(self) -> Any:
        if self.train_dataset is None:
            raise ValueError("StrategyTrainer: training needs a train_dataset")
        loader = strategy_loader(
            self.train_dataset, self.padding, self._pad_id(), self.shuffle, self.boundaries,
            num_workers=self.args.dataloader_num_workers, pin_memory=self.args.dataloader_pin_memory,
        )  # fmt: skip
        return self.accelerator.prepare(loader)


__all__ = ["StrategyTrainer", "example_lengths", "strategy_loader"]
