"""What each kernel entry bought: at the padding of a workload's fastest record, every kernel setting measured there.

The waterfall (:func:`nbhelpers.analysis.speedup.waterfall_steps`) says how much the kernels and the padding gave
together; this table splits the kernels' part by entry. For each machine, run and workload it takes the fastest
record's padding settings and lists the fastest record of each kernel setting (backend, its Liger switches,
attention) measured at that padding, slowest first: its speedup over the workload's baseline (the measurement of
the baseline's configuration nearest in time), its gain over the baseline's kernels at the same padding and
attention (another attention where that was not measured, with a note), and, for a composite entry
(``liger+regional_compile``), its gain over the fastest of its parts measured there with the same attention.
Nothing is multiplied or assumed: a gain whose reference was not measured is empty, with a note.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from nbhelpers.analysis.records import (
    choose_baselines,
    fastest,
    group_records,
    is_candidate,
    kernels_label,
    parity_status,
    speedup,
    speedup_interval,
    tokens_per_s,
)
from nbhelpers.analysis.repeats import nearest_in_time, same_computation
from nbhelpers.analysis.speedup import kernel_settings, padding_settings
from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.kernels.registry import find_backend
from nbhelpers.measure.store import RunRecord

ENTRIES_TEXT = (
    "At the padding of each workload's fastest configuration, the fastest record of every kernel setting measured "
    "there, slowest first: its speedup over the baseline, its gain over the baseline's kernels at the same padding "
    "and attention, and for a composite entry (a+b) its gain over the faster of its parts measured there with the "
    "same attention. "
    "An empty gain means its reference was not measured (the note says which)."
)
ENTRY_COLUMNS = (
    "machine", "run", "workload", "padding", "entry", "attention", "real tok/s", "speedup", "speedup interval",
    "over baseline kernels", "over its parts", "parity", "note", "record_id",
)  # fmt: skip


def _parts_of(record: RunRecord) -> tuple[str, ...]:
    """The table entries a composite backend is made of; () for an elementary one or a name the table lacks."""
    backend = find_backend(str(record.config.get("kernels")))
    return backend.parts if backend is not None and backend.composite else ()


def padding_label(record: RunRecord) -> str:
    """The record's padding strategy with the settings it reads (``token budget, 16,384 tokens a step``)."""
    return PaddingSettings.from_config(record.config).describe()


def _gain(record: RunRecord, reference: RunRecord | None) -> float:
    return tokens_per_s(record) / tokens_per_s(reference) if reference is not None else math.nan


def entry_gains(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """One row per kernel setting measured at the padding of each workload's fastest record (see the module)."""
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    rows = []
    for key, members in group_records(records).items():
        base = baselines[key]
        best = fastest([r for r in members if is_candidate(r)])
        if base is None or best is None:
            continue
        repeats = same_computation(members, base)
        at_padding = [r for r in members if is_candidate(r) and padding_settings(r) == padding_settings(best)]
        by_setting: dict[tuple[Any, ...], list[RunRecord]] = {}
        for record in at_padding:
            by_setting.setdefault(kernel_settings(record), []).append(record)
        entries = [fastest(group) for group in by_setting.values()]
        baseline_kernels = [r for r in at_padding if r.config.get("kernels") == base.config.get("kernels")]
        for record in sorted(entries, key=tokens_per_s):
            own = nearest_in_time(record, repeats, base)
            parts = _parts_of(record)
            attention = record.config.get("attn_implementation")
            same_attention = [r for r in at_padding if r.config.get("attn_implementation") == attention]
            best_part = fastest([r for r in same_attention if r.config.get("kernels") in parts])
            reference = fastest([r for r in baseline_kernels if r.config.get("attn_implementation") == attention])
            reference = reference or fastest(baseline_kernels)
            notes = []
            if reference is None:
                notes.append("the baseline's kernels were not measured at this padding")
            elif reference.config.get("attn_implementation") != attention:
                notes.append(f"over the baseline's kernels with {reference.config.get('attn_implementation')} "
                             f"(not measured with {attention} at this padding)")  # fmt: skip
            if parts and best_part is None:
                notes.append(f"none of its parts ({', '.join(parts)}) was measured at this padding and attention")
            rows.append({
                "machine": key[0], "run": key[1], "workload": key[2], "padding": padding_label(best),
                "entry": kernels_label(record), "attention": attention,
                "real tok/s": tokens_per_s(record), "speedup": speedup(record, own),
                "speedup interval": speedup_interval(record, own),
                "over baseline kernels": _gain(record, reference),
                "over its parts": _gain(record, best_part) if parts else math.nan,
                "parity": parity_status(record), "note": "; ".join(notes), "record_id": record.record_id,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=list(ENTRY_COLUMNS))


__all__ = ["ENTRIES_TEXT", "ENTRY_COLUMNS", "entry_gains", "padding_label"]
