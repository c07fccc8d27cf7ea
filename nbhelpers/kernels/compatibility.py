"""Which kernel backends combine, and which model families take them, worked out from what each one declares.

An elementary backend declares the parts of the training step it takes over (``replaces``, keys of
:data:`~nbhelpers.kernels.spec.STEP_PARTS`), the parts its partners may take over (``partners``, None for any) and
the model capabilities it needs (``needs``); a model family declares the capabilities it has. From those alone:

- whether backends can be composed (:func:`combination_refusal`) and in which order their parts apply
  (:func:`apply_order`);
- which combinations the table offers (:func:`offer_refusal`, :func:`offered_combinations`) and where each sits in
  it (:func:`table_order`);
- what a family lacks for a backend (:func:`missing_capabilities`).

Light at import, like the table: no torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from .spec import STEP_PARTS, KernelBackend


def stage(backend: KernelBackend) -> int:
    """Where a backend's parts apply in a composite: the first step part it takes over (ValueError for a part that
    is not one of STEP_PARTS)."""
    unknown = [part for part in backend.replaces if part not in STEP_PARTS]
    if unknown:
        raise ValueError(f"backend {backend.name!r} takes over {unknown}: step parts are {', '.join(STEP_PARTS)}")
    return min((STEP_PARTS.index(part) for part in backend.replaces), default=len(STEP_PARTS))


def apply_order(parts: Iterable[KernelBackend]) -> tuple[KernelBackend, ...]:
    """The parts in the order a composite applies them (by step part; a tie keeps the given order)."""
    return tuple(sorted(parts, key=stage))


def _partner_refusal(part: KernelBackend, others: Sequence[KernelBackend]) -> str:
    """'' when every other part takes over only what ``part`` allows its partners, else why not."""
    if part.partners is None:
        return ""
    for other in others:
        outside = [p for p in other.replaces if p not in part.partners]
        if outside:
            return (f"{part.name!r} composes only with backends that take over {', '.join(part.partners)}; "
                    f"{other.name!r} takes over {', '.join(outside)}")  # fmt: skip
    return ""


def combination_refusal(parts: Sequence[KernelBackend]) -> str:
    """'' when these elementary backends can be composed, else why not: one is a composite or the baseline (it takes
    over nothing), two take over the same step part, or one allows no partner that takes over what another does."""
    for part in parts:
        if part.composite:
            return f"{part.name!r} is a composite"
        if not part.replaces:
            return f"{part.name!r} takes over no part of the step (the baseline): it composes with nothing"
    for first, second in combinations(parts, 2):
        shared = [p for p in first.replaces if p in second.replaces]
        if shared:
            return f"{first.name!r} and {second.name!r} both take over {', '.join(shared)}"
    for part in parts:
        if why := _partner_refusal(part, [p for p in parts if p is not part]):
            return why
    return ""


@dataclass(frozen=True)
class OfferRules:
    """What decides, beyond :func:`combination_refusal`, whether the table offers a combination."""

    families: Sequence[Any]  # the model families (each with ``capabilities``): some family must run it
    liger_switches: tuple[str, ...]  # every Liger switch: a part that reads them must keep one to itself
    max_parts: int  # the most parts a composite has
    not_offered: Mapping[frozenset[str], str] = field(default_factory=dict)  # part names -> why the table lacks it


def needs_of(parts: Iterable[KernelBackend]) -> tuple[str, ...]:
    """The model capabilities a combination needs: every part's, each once."""
    return tuple(dict.fromkeys(need for part in parts for need in part.needs))


def missing_capabilities(backend: KernelBackend, family: Any) -> tuple[str, ...]:
    """The capabilities a backend needs that a model family lacks (() when the family has them all)."""
    return tuple(need for need in backend.needs if need not in family.capabilities)


def idle_liger_part(parts: Sequence[KernelBackend], switches: Sequence[str]) -> str:
    """The name of a part that reads Liger switches and would keep none of ``switches`` to itself, every one taken
    by its partners (replaced, as the loss beside Cut Cross-Entropy, or compiled, as RoPE, RMSNorm and SwiGLU under
    regional compile); '' when there is none."""
    for part in parts:
        others = [other for other in parts if other is not part]
        taken = {s for other in others for s in (*other.replaces_switches, *other.compiled_switches)}
        if part.uses_liger_switches and all(s in taken for s in switches):
            return part.name
    return ""


def offer_refusal(parts: Sequence[KernelBackend], rules: OfferRules) -> str:
    """'' when the table offers this combination of elementary backends, else why not."""
    if why := combination_refusal(parts):
        return why
    if len(parts) > rules.max_parts:
        return f"more than {rules.max_parts} parts"
    needs = needs_of(parts)
    if not any(all(need in family.capabilities for need in needs) for family in rules.families):
        return f"no model family has {', '.join(needs)}"
    if idle := idle_liger_part(parts, rules.liger_switches):
        return f"{idle!r} would run none of its switches: its partners take them all"
    return rules.not_offered.get(frozenset(p.name for p in parts), "")


def offered_combinations(elementary: Sequence[KernelBackend], rules: OfferRules) -> list[tuple[KernelBackend, ...]]:
    """Every combination of two or more elementary backends the table offers, each in its parts' apply order."""
    return [
        apply_order(parts)
        for size in range(2, rules.max_parts + 1)
        for parts in combinations(elementary, size)
        if not offer_refusal(parts, rules)
    ]


def table_order(elementary: Sequence[str], composites: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
    """Elementary backends (by name) in their given order, each followed by the composites (their parts' names)
    whose last part in that order it is: fewer parts first, then by where their parts stand in that order."""
    position = {name: i for i, name in enumerate(elementary)}

    def key(parts: Sequence[str]) -> tuple[int, int, tuple[int, ...]]:
        places = tuple(sorted(position[name] for name in parts))
        return places[-1], len(places), places

    return sorted([(name,) for name in elementary] + [tuple(parts) for parts in composites], key=key)
