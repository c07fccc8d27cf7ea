"""The two references every speedup is shown against, from RunRecords only.

The **reference path** is each group's baseline (:func:`~nbhelpers.analysis.records.choose_baselines`: eager
kernels, static padding; for a hybrid, transformers' PyTorch fallback). **Without the workbook** is what a user
gets by installing the packages and keeping TRL's defaults: the :data:`WITHOUT_WORKBOOK_ENGINE` entry of the
engines table (:mod:`nbhelpers.measure.engines`): TRL's ``SFTTrainer`` with only the batch size and
``max_length`` set, so its default padding (to the longest row) and gradient checkpointing, transformers' default
attention, no Liger, and the model's kernels as transformers binds them at import (fla's for a hybrid where fla is
installed, its PyTorch fallback otherwise). Its record is measured like any configuration (runner and store) in
the same run, on the same samples; where a group has none, its speedups over it are missing and the note says why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import ENGINES, peer_base_note, peer_lora_epilogue
from nbhelpers.measure.store import RunRecord

from .records import (
    choose_baselines,
    group_records,
    is_measured,
    record_label,
    speedup,
    speedup_interval,
    tokens_per_s,
)

WITHOUT_WORKBOOK_ENGINE = "trl_defaults"  # the engines-table entry that is "without the workbook"
REFERENCE_PATH = "reference path"
WITHOUT_WORKBOOK = "without the workbook"
VS_REFERENCE, VS_WITHOUT = f"vs {REFERENCE_PATH}", f"vs {WITHOUT_WORKBOOK}"
WITHOUT_WORKBOOK_WHAT = (
    f"{ENGINES[WITHOUT_WORKBOOK_ENGINE].description}; transformers' default attention, no Liger, and the model's "
    "kernels as transformers binds them at import (fla's for a hybrid where fla is installed)"
)
NOT_MEASURED = (
    f"'{WITHOUT_WORKBOOK}' not measured in this run and workload: notebook 01 measures it beside the baseline "
    f"(or PEER_ROWS={WITHOUT_WORKBOOK_ENGINE} in notebook 04)"
)
COLUMNS = (
    "machine", "run", "workload", "label", "engine", "real tok/s", VS_REFERENCE, f"{VS_REFERENCE} interval",
    VS_WITHOUT, f"{VS_WITHOUT} interval", "note", "record_id",
)  # fmt: skip


def without_workbook_config(base: RunConfig) -> RunConfig:
    """``base``'s workload as a user runs it without the workbook (the engine's own flags; no profile)."""
    engine = ENGINES[WITHOUT_WORKBOOK_ENGINE]
    frozen, note = peer_base_note(engine.name, base.frozen_base)  # the base its user loads (TRL: NF4, no upcast)
    label = f"{engine.label}, {base.batch_label_on(engine.name)}{note}"
    return base.replace(engine=engine.name, label=label, profile=False, frozen_base=frozen,
                        lora_epilogue=peer_lora_epilogue(engine.name, base.lora_epilogue))


def is_without_workbook(record: RunRecord) -> bool:
    return str(record.config.get("engine", "")) == WITHOUT_WORKBOOK_ENGINE


def without_workbook_of(members: Sequence[RunRecord]) -> RunRecord | None:
    """The group's last measured "without the workbook" record, or None."""
    return next((r for r in reversed(members) if is_without_workbook(r) and is_measured(r)), None)


def missing_note(members: Sequence[RunRecord]) -> str:
    """Why a group has no measured "without the workbook" record: its failure, or that it was not measured."""
    failed = [r for r in members if is_without_workbook(r) and not r.ok]
    if failed:
        reason = failed[-1].reason.strip().splitlines()[0] if failed[-1].reason.strip() else "no reason recorded"
        return f"'{WITHOUT_WORKBOOK}' failed: {reason}"
    return NOT_MEASURED


def over(record: RunRecord, reference: RunRecord | None) -> tuple[float, tuple[float, float] | None]:
    """``record``'s speedup over ``reference`` and its interval; (NaN, None) when either has no throughput."""
    if reference is None or not (is_measured(record) and is_measured(reference)):
        return math.nan, None
    return speedup(record, reference), speedup_interval(record, reference)


def references_of(
    records: Iterable[RunRecord], baseline_label: str | None = None
) -> dict[tuple[str, str, str], tuple[RunRecord | None, RunRecord | None, str]]:
    """Per (machine, run, workload) group: (reference path, without the workbook, note on the second)."""
    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    result = {}
    for key, members in group_records(records).items():
        without = without_workbook_of(members)
        result[key] = (baselines[key], without, "" if without is not None else missing_note(members))
    return result


def both_references(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """One row per measured step record: its real tok/s over the reference path and over "without the workbook"
    (each with its interval), grouped by machine, run and workload; a missing reference leaves its columns empty and
    ``note`` says why."""
    import pandas as pd

    records = list(records)
    references = references_of(records, baseline_label)
    rows = []
    for key, members in group_records(records).items():
        base, without, note = references[key]
        for record in (r for r in members if is_measured(r)):
            vs_base, base_interval = over(record, base)
            vs_without, without_interval = over(record, without)
            rows.append({
                "machine": key[0], "run": key[1], "workload": key[2], "label": record_label(record),
                "engine": str(record.config.get("engine", "workbook")), "real tok/s": tokens_per_s(record),
                VS_REFERENCE: vs_base, f"{VS_REFERENCE} interval": base_interval,
                VS_WITHOUT: vs_without, f"{VS_WITHOUT} interval": without_interval,
                "note": note if without is None else "", "record_id": record.record_id,
            })  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def references_text(records: Iterable[RunRecord], baseline_label: str | None = None, mark: str = "**") -> str:
    """One markdown line per group: what its two references are and how fast each ran (``mark`` around each
    reference's label; "" for plain text)."""
    lines = []
    for (machine, run, workload), (base, without, note) in references_of(records, baseline_label).items():
        first = "none"
        if base is not None:
            first = f"{mark}{record_label(base)}{mark} ({tokens_per_s(base):,.0f} real tok/s)"
        if without is None:
            second = note
        else:
            ratio = f", {over(without, base)[0]:.2f}x the {REFERENCE_PATH}" if base is not None else ""
            second = f"{mark}{record_label(without)}{mark} ({tokens_per_s(without):,.0f} real tok/s{ratio})"
        lines.append(f"- {machine}, run {run} ({workload}): {REFERENCE_PATH} {first}; {WITHOUT_WORKBOOK} {second}.")
    return "\n".join(lines) or "No step records."


__all__ = [
    "COLUMNS", "NOT_MEASURED", "REFERENCE_PATH", "VS_REFERENCE", "VS_WITHOUT", "WITHOUT_WORKBOOK",
    "WITHOUT_WORKBOOK_ENGINE", "WITHOUT_WORKBOOK_WHAT", "both_references", "is_without_workbook", "missing_note",
    "over", "references_of", "references_text", "without_workbook_config", "without_workbook_of",
]  # fmt: skip
