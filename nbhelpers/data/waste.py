"""Padding waste from token lengths alone: no model, no tensors, the same plan the measured step uses.

For every step of an epoch: the real tokens (lengths clipped to ``max_length``) and the positions the
model computes (rows x padded width, or the packed row's length). The padding fraction is
``1 - real / positions`` over the epoch, exactly what :func:`nbhelpers.data.collate.count_tokens` reports
on the collated tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .strategies import BASELINE_STRATEGY, PADDING_STRATEGIES, PaddingSettings, plan_batches, row_width

WASTE_COLUMNS = ("step", "sequences", "real", "positions", "padding", "width")


def waste_table(lengths: Sequence[int], settings: PaddingSettings) -> Any:
    """One row per step: sequences, real tokens, positions, padding positions and row width.

    Packed strategies have one row whose width is its length, so their padding is 0.
    """
    import pandas as pd

    if not lengths:
        raise ValueError("lengths is empty: at least one sequence is needed")
    rows = []
    for step, batch in enumerate(plan_batches(lengths, settings)):
        clipped = [min(int(lengths[i]), settings.max_length) for i in batch]
        real = sum(clipped)
        width = row_width(clipped, settings)
        positions = width if settings.entry.packed else width * len(batch)
        rows.append((step, len(batch), real, positions, positions - real, width))
    return pd.DataFrame(rows, columns=list(WASTE_COLUMNS))


@dataclass(frozen=True)
class WasteSummary:
    """An epoch's padding arithmetic under one setting."""

    strategy: str
    steps_per_epoch: int
    real_tokens: int
    positions: int
    padding_fraction: float  # padding positions / all positions
    positions_per_step: float
    real_tokens_per_step: float
    max_positions_per_step: int  # the largest step: what memory must hold
    truncated_fraction: float  # tokens beyond max_length, dropped, over all tokens of the data

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_waste(table: Any, lengths: Sequence[int], strategy: str, max_length: int) -> WasteSummary:
    """Totals of a :func:`waste_table`."""
    real, positions = int(table["real"].sum()), int(table["positions"].sum())
    total = sum(int(n) for n in lengths)
    kept = sum(min(int(n), max_length) for n in lengths)
    steps = len(table)
    return WasteSummary(
        strategy=strategy,
        steps_per_epoch=steps,
        real_tokens=real,
        positions=positions,
        padding_fraction=1.0 - real / positions if positions else 0.0,
        positions_per_step=positions / steps,
        real_tokens_per_step=real / steps,
        max_positions_per_step=int(table["positions"].max()),
        truncated_fraction=1.0 - kept / total if total else 0.0,
    )


def waste_summary(lengths: Sequence[int], settings: PaddingSettings) -> WasteSummary:
    """:func:`waste_table` and its totals in one call."""
    return summarize_waste(waste_table(lengths, settings), lengths, settings.strategy, settings.max_length)


def compare_strategies(
    lengths: Sequence[int], settings: PaddingSettings, strategies: Sequence[str] = PADDING_STRATEGIES
) -> Any:
    """One row per strategy (the other settings as given): steps per epoch, padding fraction, positions and
    real tokens per step, and positions against the baseline strategy's."""
    import pandas as pd

    rows = [waste_summary(lengths, settings.replace(strategy=s)).to_dict() for s in strategies]
    frame = pd.DataFrame(rows).set_index("strategy")
    static = frame["positions"].get(BASELINE_STRATEGY)
    frame["positions_vs_static"] = frame["positions"] / static if static else float("nan")
    return frame


def length_stats(lengths: Sequence[int]) -> dict[str, float]:
    """Count, min, median, mean, 90th and 99th percentile, max of token lengths."""
    import numpy as np

    values = np.asarray(lengths, dtype=float)
    if values.size == 0:
        raise ValueError("lengths is empty")
    return {
        "sequences": float(values.size),
        "min": float(values.min()),
        "median": float(np.median(values)),
        "mean": float(values.mean()),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "max": float(values.max()),
    }
