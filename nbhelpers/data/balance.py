"""Split one global step's samples across ranks so every rank gets about the same number of tokens.

With several GPUs a step's samples are planned once for the whole world (the padding strategy's plan at
``world`` times the per-GPU batch or token budget), then dealt to ranks here: longest first, each to the
rank with the fewest tokens so far. Padded strategies also cap the samples per rank, since a padded row
costs its width whatever its length. Pure Python: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .strategies import PaddingSettings, plan_batches


def balance_by_tokens(
    indices: Sequence[int], lengths: Sequence[int], world_size: int, max_per_rank: int | None = None
) -> list[list[int]]:
    """The samples of one step dealt to ``world_size`` ranks, each rank's list in dataset order.

    ``lengths[i]`` is sample ``i``'s token count. Longest first, every sample goes to the rank with the
    fewest tokens so far (ties to the lower rank) among those below ``max_per_rank`` samples.
    """
    if world_size < 1:
        raise ValueError(f"world_size={world_size!r} must be at least 1")
    cap = max_per_rank if max_per_rank is not None else len(indices)
    if cap * world_size < len(indices):
        raise ValueError(f"{len(indices)} samples do not fit {world_size} ranks of at most {cap} samples")
    shares: list[list[int]] = [[] for _ in range(world_size)]
    tokens = [0] * world_size
    for index in sorted(indices, key=lambda i: (-lengths[i], i)):
        open_ranks = [r for r in range(world_size) if len(shares[r]) < cap]
        rank = min(open_ranks, key=lambda r: (tokens[r], r))
        shares[rank].append(index)
        tokens[rank] += lengths[index]
    return [sorted(share) for share in shares]


def split_plan(
    plan: Sequence[Sequence[int]], lengths: Sequence[int], world_size: int, padded: bool
) -> list[list[list[int]]]:
    """Every step of a global plan split by :func:`balance_by_tokens`: ``result[step][rank]`` (sample indices).

    A step with fewer samples than ranks is dropped (every rank must run every step). ``padded`` caps a
    rank at its even share of the step's samples.
    """
    steps = []
    for batch in plan:
        if len(batch) < world_size:
            continue
        cap = math.ceil(len(batch) / world_size) if padded else None
        steps.append(balance_by_tokens(batch, lengths, world_size, cap))
    return steps


def imbalance(shares: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Largest rank's tokens over the mean rank's, minus one (0.0 = perfectly balanced)."""
    loads = [sum(lengths[i] for i in share) for share in shares]
    mean = sum(loads) / len(loads)
    return max(loads) / mean - 1.0 if mean else 0.0


def world_settings(settings: PaddingSettings, world_size: int) -> PaddingSettings:
    """The settings of one global step: ``world_size`` times the per-GPU batch size and token budget."""
    return settings.replace(
        batch_size=settings.batch_size * world_size, token_budget=settings.effective_token_budget * world_size
    )


def rank_plan(lengths: Sequence[int], settings: PaddingSettings, rank: int, world_size: int) -> list[list[int]]:
    """This rank's samples of every step: the global plan (:func:`world_settings`) balanced by tokens."""
    clipped = [min(int(n), settings.max_length) for n in lengths]
    plan = plan_batches(clipped, world_settings(settings, world_size))
    return [shares[rank] for shares in split_plan(plan, clipped, world_size, padded=not settings.entry.packed)]
