"""How many samples a loss curve needs so that each of its steps trains on a batch it has not seen.

A measurement cycles over its plan when the plan has fewer batches than it takes steps. For timing that is
harmless; for a loss curve it is not: a curve of 50 steps over a plan of one batch learns that batch by heart,
its loss falls toward zero, and there relative differences between two curves grow without meaning (a float8
curve at 0.069 against a baseline at 0.024 reads "2.6x apart" while both have memorised the batch).
"""

from __future__ import annotations

import math

from nbhelpers.data.loading import IGNORE_INDEX
from nbhelpers.data.strategies import plan_batches
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.models.loading import resolve_model
from nbhelpers.validation import check_int

from .config import RunConfig
from .step import config_examples

GROWTH_MARGIN = 1.1  # ask for a little more than the proportion says: plans do not grow exactly with samples


def plan_length(config: RunConfig, num_samples: int) -> tuple[int, int, int | None]:
    """The number of batches in the configuration's plan over its first ``num_samples`` samples, how many samples
    the dataset gave (fewer than asked when it holds fewer), and the index of the plan's first batch without a
    loss token (None when every batch has some)."""
    tokenizer = load_tokenizer(resolve_model(config.model).source)
    examples = config_examples(config, tokenizer, num_samples)
    plan = plan_batches([len(e["input_ids"]) for e in examples], config.padding_settings)
    learns = [any(label != IGNORE_INDEX for label in e["labels"]) for e in examples]
    empty = next((n for n, rows in enumerate(plan) if not any(learns[i] for i in rows)), None)
    return len(plan), len(examples), empty


def samples_for_steps(config: RunConfig, steps: int, limit: int = 1_000_000) -> int:
    """The samples, starting from the configuration's ``num_samples`` and grown in proportion, whose plan has at
    least ``steps`` batches, so no step of a curve repeats a batch; the dataset's whole size (or ``limit``) when
    it holds fewer (the plan then repeats, as a second epoch would). Growth stops short of a plan whose first
    ``steps`` batches include one without a loss token (truncation can leave one; its loss would be NaN): the
    last count without one is kept, and the plan repeats from there."""
    check_int("steps", steps, 1, 100_000)
    wanted = kept = config.num_samples
    while True:
        batches, given, empty = plan_length(config, wanted)
        if wanted > config.num_samples and empty is not None and empty < steps:
            return kept
        kept = given
        if batches >= steps or given < wanted or wanted >= limit:
            return given
        wanted = min(limit, max(wanted + 1, math.ceil(wanted * steps / batches * GROWTH_MARGIN)))


__all__ = ["plan_length", "samples_for_steps"]
