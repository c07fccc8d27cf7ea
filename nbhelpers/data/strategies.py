"""The padding strategies, in one table: how each plans its steps, how wide its rows are, how it is exported.

:data:`STRATEGIES` maps a name to a :class:`Strategy`; every other module reads it and none branches on a
strategy's name. :class:`PaddingSettings` holds the parameters that travel together (strategy, batch size,
max length, multiple, buckets, token budget, seed), validated when made.

Adding a strategy is one entry in :data:`STRATEGIES` plus its planning function (a row-width function too
when its rows are padded to something new). Pure Python: no torch, no transformers.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbhelpers.validation import check_choice, check_int

Planner = Callable[[Sequence[int], "PaddingSettings"], list[list[int]]]
# A configuration's (RunConfig's, a record config's) name of each padding field -> its PaddingSettings name.
PADDING_FIELDS: dict[str, str] = {
    "padding": "strategy", "batch_size": "batch_size", "max_length": "max_length",
    "pad_to_multiple_of": "pad_to_multiple_of", "num_buckets": "num_buckets", "token_budget": "token_budget",
    "seed": "seed",
}  # fmt: skip
# Of those, the ones a strategy chooses (the rest, batch size, max length and seed, belong to the workload).
STRATEGY_FIELDS: tuple[str, ...] = ("padding", "pad_to_multiple_of", "num_buckets", "token_budget")
RowWidth = Callable[[int, "PaddingSettings"], int]


@dataclass(frozen=True)
class PaddingSettings:
    """One padding setting: the strategy and the parameters its plan and rows depend on.

    A refused value raises :class:`~nbhelpers.validation.ConfigError` naming it (the strategy as
    ``padding``, RunConfig's name for it). ``token_budget=0`` means ``batch_size * max_length``.
    """

    strategy: str = "dynamic"  # a key of STRATEGIES
    batch_size: int = 4  # sequences per step (packed: flattened into one row)
    max_length: int = 128  # longer sequences are truncated to it
    pad_to_multiple_of: int = 8  # row width multiple of "multiple"
    num_buckets: int = 4  # length quantiles of "bucketed"
    token_budget: int = 0  # tokens per step of "token_budget" (0 = batch_size * max_length)
    seed: int = 0  # order of the bucketed batches
    # A step's rows rounded up to it, pads at the end (a packed row's length, a padded batch's width): a kernel's
    # need (float8 matmuls take token counts in multiples of 16); set from the kernel backend, not by a strategy.
    token_multiple: int = 1

    def __post_init__(self) -> None:
        check_choice("padding", self.strategy, PADDING_STRATEGIES)
        check_int("batch_size", self.batch_size, 1, 1 << 20)
        check_int("max_length", self.max_length, 1, 1 << 24)
        check_int("pad_to_multiple_of", self.pad_to_multiple_of, 1, 1 << 16)
        check_int("num_buckets", self.num_buckets, 1, 1 << 20)
        check_int("token_budget", self.token_budget, 0, 1 << 30)
        check_int("seed", self.seed, 0, (1 << 63) - 1)
        check_int("token_multiple", self.token_multiple, 1, 1 << 16)

    @property
    def entry(self) -> Strategy:
        """This setting's strategy in the table."""
        return STRATEGIES[self.strategy]

    @property
    def effective_token_budget(self) -> int:
        """Tokens per step of token-budget batching."""
        return self.token_budget or self.batch_size * self.max_length

    @property
    def most_tokens_per_step(self) -> int:
        """Token positions one step holds at most: the budget for budget batching (one row of ``max_length`` when
        that is longer: a sample alone in its step), else ``batch_size`` rows of ``max_length``; rounded up to
        ``token_multiple``."""
        rows = self.batch_size * self.max_length
        tokens = max(self.effective_token_budget, self.max_length) if self.entry.plan is plan_token_budget else rows
        return math.ceil(tokens / self.token_multiple) * self.token_multiple

    def describe(self) -> str:
        """The strategy with the settings it reads, e.g. ``token budget, 16,384 tokens a step``."""
        shown = {
            "pad_to_multiple_of": f"to a multiple of {self.pad_to_multiple_of}",
            "num_buckets": f"{self.num_buckets} buckets",
            "token_budget": f"{self.effective_token_budget:,} tokens a step",
        }
        return ", ".join([self.entry.label, *(shown[field] for field in self.entry.reads)])

    def replace(self, **changes: Any) -> PaddingSettings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_config(self) -> dict[str, Any]:
        """This setting under a configuration's field names (:data:`PADDING_FIELDS`), e.g. for RunConfig.replace."""
        return {key: getattr(self, field) for key, field in PADDING_FIELDS.items()}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> PaddingSettings:
        """The padding setting of a configuration dict (RunConfig's field names, :data:`PADDING_FIELDS`); a key it
        lacks takes this class's default, and a strategy the table no longer has reads as the default strategy."""
        values = {field: config[key] for key, field in PADDING_FIELDS.items() if config.get(key) is not None}
        if values.get("strategy") not in STRATEGIES:
            values.pop("strategy", None)
        return cls(**{k: v if k == "strategy" else int(v) for k, v in values.items()})


@dataclass(frozen=True)
class TrlSettings:
    """How a strategy is spelled in TRL's ``SFTConfig``."""

    packing: bool = False  # packing="bfd": sequences packed into rows of the token budget, one row per step
    padding_free: bool = False  # each batch flattened into one row with position_ids
    pad_to_multiple_of: str = ""  # the PaddingSettings field SFTConfig.pad_to_multiple_of takes ("" = not set)
    note: str = ""  # comment beside the setting that carries the strategy


@dataclass(frozen=True)
class Strategy:
    """One padding strategy: its plan, its rows, and what it is in Hugging Face and TRL."""

    name: str
    label: str  # the waste explorer's button
    description: str  # one line
    plan: Planner  # (lengths clipped to max_length, settings) -> the sample indices of each step, each once
    width: RowWidth | None  # padded rows: width for a batch's longest clipped length; None: packed, one flat row
    same_first_batch: bool  # first step holds the first batch_size samples, as static's does: parity compares
    length_grouped: bool  # batches of similar lengths: HF Trainer's length-grouped sampling
    collator: str  # HF data collator for plain Trainer, formatted with the settings' fields
    trl: TrlSettings
    reads: tuple[str, ...] = ()  # the PaddingSettings fields of the strategy's own choosing that its plan or rows read

    @property
    def packed(self) -> bool:
        """Padding-free: the batch is one row with ``position_ids`` restarting at 0 per sequence."""
        return self.width is None

    @property
    def budgeted(self) -> bool:
        """A step's size is its token budget (``PaddingSettings.token_budget``), not ``batch_size`` rows."""
        return "token_budget" in self.reads


# -- planning functions: which samples form each step ---------------------------------------------------


def plan_in_order(lengths: Sequence[int], settings: PaddingSettings) -> list[list[int]]:
    """``batch_size`` samples per step, in dataset order."""
    size = settings.batch_size
    return [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), size)]


def plan_length_buckets(lengths: Sequence[int], settings: PaddingSettings) -> list[list[int]]:
    """``num_buckets`` length quantiles cut into batches (dataset order inside a bucket), batches shuffled by seed."""
    by_length = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    size = max(1, math.ceil(len(by_length) / settings.num_buckets))
    batches = []
    for start in range(0, len(by_length), size):
        bucket = sorted(by_length[start : start + size])
        batches.extend(bucket[i : i + settings.batch_size] for i in range(0, len(bucket), settings.batch_size))
    random.Random(settings.seed).shuffle(batches)
    return batches


def plan_token_budget(lengths: Sequence[int], settings: PaddingSettings) -> list[list[int]]:
    """Samples in dataset order, a step filled greedily up to the token budget."""
    budget = settings.effective_token_budget
    batches: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, length in enumerate(lengths):
        if current and used + length > budget:
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    if current:
        batches.append(current)
    return batches


# -- row widths of the padded strategies ------------------------------------------------------------------


def width_max_length(longest: int, settings: PaddingSettings) -> int:
    """Every row as wide as ``max_length``."""
    return settings.max_length


def width_longest(longest: int, settings: PaddingSettings) -> int:
    """As wide as the batch's longest row."""
    return longest


def width_multiple(longest: int, settings: PaddingSettings) -> int:
    """The longest row rounded up to ``pad_to_multiple_of``, but not past ``max_length``."""
    multiple = settings.pad_to_multiple_of
    return min(math.ceil(longest / multiple) * multiple, max(settings.max_length, longest))


# -- the table ----------------------------------------------------------------------------------------------

SEQ2SEQ = "DataCollatorForSeq2Seq(tokenizer, "
FLATTENING = "DataCollatorWithFlattening()"

STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "static", "static", "pad every row to max_length",
            plan_in_order, width_max_length, same_first_batch=True, length_grouped=False,
            collator=SEQ2SEQ + 'padding="max_length", max_length={max_length})',
            trl=TrlSettings(pad_to_multiple_of="max_length", note="every batch padded to max_length"),
        ),
        Strategy(
            "dynamic", "dynamic", "pad to the longest row of the batch",
            plan_in_order, width_longest, same_first_batch=True, length_grouped=False,
            collator=SEQ2SEQ + 'padding="longest")',
            trl=TrlSettings(),
        ),
        Strategy(
            "multiple", "multiple", "pad to the longest row, rounded up to pad_to_multiple_of",
            plan_in_order, width_multiple, same_first_batch=True, length_grouped=False,
            collator=SEQ2SEQ + "pad_to_multiple_of={pad_to_multiple_of})",
            trl=TrlSettings(pad_to_multiple_of="pad_to_multiple_of"), reads=("pad_to_multiple_of",),
        ),
        Strategy(
            "bucketed", "bucketed", "batches of similar lengths (num_buckets length quantiles), padded to the longest",
            plan_length_buckets, width_longest, same_first_batch=False, length_grouped=True,
            collator=SEQ2SEQ + 'padding="longest")  # with length-grouped sampling',
            trl=TrlSettings(), reads=("num_buckets",),
        ),
        Strategy(
            "packed", "packed", "padding-free: the batch flattened into one row, position_ids restart per sequence",
            plan_in_order, None, same_first_batch=True, length_grouped=False,
            collator=FLATTENING + "  # padding-free: position_ids, no pad tokens",
            trl=TrlSettings(padding_free=True, note="each batch flattened into one row with position_ids"),
        ),
        Strategy(
            "token_budget", "token budget", "packed rows filled greedily up to token_budget tokens per step",
            plan_token_budget, None, same_first_batch=False, length_grouped=False,
            collator=FLATTENING + "  # with the token budget's batch sampler (StrategyTrainer)",
            trl=TrlSettings(packing=True, padding_free=True, note="sequences packed into rows of max_length"),
            reads=("token_budget",),
        ),
    )
}  # fmt: skip

PADDING_STRATEGIES = tuple(STRATEGIES)
PACKED_STRATEGIES = tuple(name for name, s in STRATEGIES.items() if s.packed)
SAME_FIRST_BATCH_STRATEGIES = tuple(name for name, s in STRATEGIES.items() if s.same_first_batch)
BASELINE_STRATEGY = "static"  # every row padded to max_length: what speedups, parity and waste compare with


def plan_batches(lengths: Sequence[int], settings: PaddingSettings) -> list[list[int]]:
    """Indices of the samples in each step, in order; every sample appears exactly once."""
    clipped = [min(int(length), settings.max_length) for length in lengths]
    return settings.entry.plan(clipped, settings)


def row_width(lengths: Sequence[int], settings: PaddingSettings) -> int:
    """Width of a step's row(s) for these lengths: the padded width, or a packed row's whole length."""
    clipped = [min(int(length), settings.max_length) for length in lengths]
    width = settings.entry.width
    return sum(clipped) if width is None else width(max(clipped), settings)


def collator_code(settings: PaddingSettings) -> str:
    """Source of the Hugging Face data collator that batches as this setting does (plain Trainer)."""
    return settings.entry.collator.format(**dataclasses.asdict(settings))


def keeps_dataset_order(settings: PaddingSettings) -> bool:
    """Whether the plan is ``batch_size`` samples at a time in dataset order (a collator alone reproduces it)."""
    return settings.entry.plan is plan_in_order


def trainer_collator_code(settings: PaddingSettings) -> str:
    """The HF collator that batches as measured in a plain Trainer with sequential sampling; "" when the
    strategy's plan needs the workbook's batch sampler (buckets, token budget)."""
    return collator_code(settings) if keeps_dataset_order(settings) else ""


def sft_config_settings(settings: PaddingSettings) -> tuple[dict[str, Any], dict[str, str]]:
    """TRL ``SFTConfig`` keyword arguments of this setting, and a comment for some of them.

    Each of ``max_length``, ``packing``, ``padding_free`` and ``pad_to_multiple_of`` is written out, since
    TRL's defaults (1024, off, off, "auto") differ from most measured settings.
    """
    trl = settings.entry.trl
    kwargs: dict[str, Any] = {}
    comments: dict[str, str] = {}
    if trl.packing:
        kwargs["per_device_train_batch_size"] = 1
        comments["per_device_train_batch_size"] = "one packed row of max_length tokens per step"
        kwargs["max_length"] = settings.effective_token_budget
        comments["max_length"] = "the measured token budget per step"
    elif trl.padding_free:
        kwargs["max_length"] = None
        comments["max_length"] = (
            f"TRL refuses max_length with padding_free and no packing: truncate the data to {settings.max_length} "
            "tokens first, as measured"
        )
    else:
        kwargs["max_length"] = settings.max_length
    kwargs["packing"] = trl.packing
    if trl.packing:
        kwargs["packing_strategy"] = "bfd"
    kwargs["padding_free"] = trl.padding_free
    kwargs["pad_to_multiple_of"] = getattr(settings, trl.pad_to_multiple_of) if trl.pad_to_multiple_of else None
    if kwargs["pad_to_multiple_of"] is None and settings.token_multiple > 1:
        kwargs["pad_to_multiple_of"] = settings.token_multiple
        comments["pad_to_multiple_of"] = "rows padded to the multiple the kernels need (float8: 16)"
    if trl.note:
        carrier = "packing" if trl.packing else "padding_free" if trl.padding_free else "pad_to_multiple_of"
        comments[carrier] = f"padding={settings.strategy!r}: {trl.note}"
    return kwargs, comments


__all__ = [
    "BASELINE_STRATEGY",
    "PACKED_STRATEGIES",
    "PADDING_STRATEGIES",
    "SAME_FIRST_BATCH_STRATEGIES",
    "STRATEGIES",
    "PaddingSettings",
    "Strategy",
    "TrlSettings",
    "collator_code",
    "keeps_dataset_order",
    "plan_batches",
    "row_width",
    "sft_config_settings",
    "trainer_collator_code",
]
