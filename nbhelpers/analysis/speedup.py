"""The speedup table and the waterfall, computed from RunRecords only (numbers; ``formatting`` shows them).

Every row's speedup divides it by its own group's baseline (one machine, one run, one workload: see
:mod:`nbhelpers.analysis.records`), measured nearest in time to it when the run measured the baseline's
configuration more than once (:mod:`nbhelpers.analysis.repeats`); measurements of one configuration that
disagree beyond their spread say so in the row. A failed configuration stays in the table with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from nbhelpers.analysis.parity import BASELINE, NOT_CHECKED
from nbhelpers.analysis.records import (
    choose_baselines,
    fastest,
    group_records,
    is_candidate,
    is_measured,
    is_thin,
    metric_value,
    parity_status,
    record_label,
    run_name_of,
    speedup,
    speedup_interval,
    timed_step_count,
    tokens_per_s,
    workload_of,
)
from nbhelpers.analysis.references import VS_WITHOUT, over, references_of
from nbhelpers.analysis.repeats import disagreeing_with, disagreements, nearest_in_time, same_computation
from nbhelpers.data.strategies import STRATEGY_FIELDS
from nbhelpers.formatting import MISSING
from nbhelpers.kernels.registry import uses_liger_switches
from nbhelpers.measure.store import RunRecord

TABLE_COLUMNS = (
    "label",
    "machine",
    "run",
    "status",
    "reason",
    "real tok/s",
    "speedup",
    "speedup interval",
    VS_WITHOUT,
    f"{VS_WITHOUT} interval",
    "timed steps",
    "thin",
    "MFU",
    "peak memory GiB",
    "kernels/step",
    "padding fraction",
    "parity",
    "baseline",
    "baseline record",
    "repeats",
    "record_id",
)
WATERFALL_STAGES = ("baseline", "kernels only", "padding only", "kernels + padding")
WATERFALL_COLUMNS = (
    "machine", "run", "workload", "stage", "label", "real tok/s", "speedup", "speedup interval", VS_WITHOUT,
    "step gain", "thin", "note", "record_id",
)  # fmt: skip


def build_table(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """One row per step record (failed ones included, with their reason), grouped by machine and run.

    ``speedup`` is the record's real tok/s over its group's baseline (see ``records.choose_baselines``), the
    measurement of the baseline's configuration nearest in time to the record (``baseline record``); ``vs without
    the workbook`` over the group's "without the workbook" record (:mod:`nbhelpers.analysis.references`; empty where
    the group has none); ``repeats`` says where measurements of the record's configuration disagree beyond their
    spread.
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    references = references_of(records, baseline_label)
    apart = disagreements(records)
    rows = []
    for key, members in group_records(records).items():
        chosen, without = baselines[key], references[key][1]
        repeats = same_computation(members, chosen) if chosen is not None else []
        for record in members:
            base = nearest_in_time(record, repeats, chosen) if chosen is not None else None
            measured = base is not None and is_measured(record)
            ratio = speedup(record, base) if measured else math.nan
            vs_without, without_interval = over(record, without)
            rows.append(
                {
                    "label": record_label(record),
                    "machine": record.machine,
                    "run": run_name_of(record),
                    "status": record.status,
                    "reason": record.reason,
                    "real tok/s": tokens_per_s(record) if is_measured(record) else math.nan,
                    "speedup": ratio,
                    "speedup interval": speedup_interval(record, base) if measured else None,
                    VS_WITHOUT: vs_without,
                    f"{VS_WITHOUT} interval": without_interval,
                    "timed steps": timed_step_count(record) if is_measured(record) else None,
                    "thin": is_thin(record) if is_measured(record) else None,
                    "MFU": metric_value(record, "mfu"),
                    "peak memory GiB": metric_value(record, "peak_memory_gib"),
                    "kernels/step": metric_value(record, "kernels_per_step"),
                    "padding fraction": metric_value(record, "padding_fraction"),
                    "parity": _parity_shown(record, repeats) if record.ok else MISSING,
                    "baseline": record_label(base) if base is not None else "",
                    "baseline record": base.record_id if base is not None else "",
                    "repeats": disagreeing_with(record, apart),
                    "record_id": record.record_id,
                }
            )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def _parity_shown(record: RunRecord, repeats: list[RunRecord]) -> str:
    """The record's parity verdict; "baseline" for an unchecked measurement of the baseline's own configuration
    (``repeats``: what every other row's parity is checked against)."""
    status = parity_status(record)
    return BASELINE if status == NOT_CHECKED and any(r is record for r in repeats) else status


def kernel_settings(record: RunRecord) -> tuple[Any, ...]:
    """What the kernels of a record are: backend, its Liger switches (only where it reads them), attention."""
    cfg = record.config
    kernels = cfg.get("kernels")
    switches = tuple(cfg.get("liger_kernels") or ()) if uses_liger_switches(str(kernels)) else ()
    return kernels, switches, cfg.get("attn_implementation")


def padding_settings(record: RunRecord) -> tuple[Any, ...]:
    return tuple(record.config.get(f) for f in STRATEGY_FIELDS)


STAGE_CHANGES = {  # stage -> (kernels changed, padding changed) against the baseline
    "kernels only": (True, False),
    "padding only": (False, True),
    "kernels + padding": (True, True),
}
STAGE_WHAT = {
    "kernels only": "changes only the kernels (kernels, Liger switches or attention) at the baseline's padding",
    "padding only": "changes only the padding with the baseline's kernels and attention",
    "kernels + padding": "changes both the kernels (or attention) and the padding",
}


# What a stage's step gain divides by: the first of these stages that was measured. A single change is over the
# baseline; both changes are over the padding alone (what the kernels added to it), else over the kernels alone.
STAGE_GAIN_BASIS = {
    "baseline": ("baseline",),
    "kernels only": ("baseline",),
    "padding only": ("baseline",),
    "kernels + padding": ("padding only", "kernels only", "baseline"),
}


def _gain_basis(stage: str, speedups: dict[str, float]) -> float:
    """The speedup a stage's step gain divides by (:data:`STAGE_GAIN_BASIS`)."""
    return next(speedups[basis] for basis in STAGE_GAIN_BASIS[stage] if basis in speedups)


def _is_stage(record: RunRecord, base: RunRecord, stage: str) -> bool:
    kernels, padding = STAGE_CHANGES[stage]
    return (kernel_settings(record) != kernel_settings(base)) == kernels and (
        padding_settings(record) != padding_settings(base)
    ) == padding


def _why_not_measured(stage: str, base: RunRecord, members: list[RunRecord], elsewhere: list[RunRecord]) -> str:
    """Why a waterfall stage has no record: failed ones of its kind here, or records of its kind in other workloads."""
    here = [r for r in members if r is not base and _is_stage(r, base, stage)]
    if here:
        reasons = "; ".join(
            f"{record_label(r)}: " + (r.reason or r.status if not r.ok else f"parity {parity_status(r)}")
            for r in here[:3]
        )
        return f"not measured: every record that {STAGE_WHAT[stage]} failed or failed parity ({reasons})"
    other = sorted({workload_of(r) for r in elsewhere if is_candidate(r) and _is_stage(r, base, stage)})
    text = f"not measured: no record in this workload {STAGE_WHAT[stage]}"
    if stage == "kernels + padding" and (hint := _combination_hint(base, members)):
        return f"{text}; {hint}"
    if other:
        return text + "; records of this kind exist in other workloads: " + " | ".join(other)
    workloads = sorted({workload_of(r) for r in elsewhere} - {workload_of(base)})
    if workloads:
        return text + "; other workloads in this run: " + " | ".join(workloads)
    return text


def _combination_hint(base: RunRecord, members: list[RunRecord]) -> str:
    """How to measure the missing combination: the fastest kernels-only change with the fastest padding-only one
    (notebook 03 measures the padding with the kernels its KERNELS names); "" unless both were measured."""
    candidates = [r for r in members if is_candidate(r) and r is not base]
    kernels = fastest([r for r in candidates if _is_stage(r, base, "kernels only")])
    padding = fastest([r for r in candidates if _is_stage(r, base, "padding only")])
    if kernels is None or padding is None:
        return ""
    return (
        f"the fastest kernels ({record_label(kernels)}) were not measured with the fastest padding "
        f"({record_label(padding)}): set notebook 03's KERNELS to 'eager,{kernels.config.get('kernels')}' "
        "to measure both"
    )


def waterfall_steps(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """Per (machine, run, workload): baseline -> kernels only -> padding only -> kernels + padding.

    Every stage is the fastest measured record of its kind (ok, parity not "fail"); nothing is multiplied or
    assumed. "Kernels only" keeps the baseline's padding settings and changes the kernel settings (backend,
    its Liger switches, attention); "padding only" is the reverse; "kernels + padding" changes both. A stage
    with no such record is a row labelled "not measured" whose ``note`` says why (failed records of that
    kind, or the other workloads of the run that hold some). ``speedup`` is cumulative: each stage over the
    measurement of the baseline's configuration nearest to it in time; ``step gain`` is a single change's speedup
    (kernels only, padding only), and for both changes its speedup over the padding alone (what the kernels added
    to it; over the kernels alone when the padding alone was not measured); ``vs without the workbook`` divides each
    stage by the group's "without the workbook" record (empty without one). A stage whose record (or its
    baseline) was measured apart beyond the spread says so in ``note``.
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    references = references_of(records, baseline_label)
    apart = disagreements(records)
    groups = group_records(records)
    rows = []
    for key, members in groups.items():
        base = baselines[key]
        if base is None:
            continue
        elsewhere = [r for k, rs in groups.items() if k[:2] == key[:2] and k != key for r in rs]
        repeats = same_computation(members, base)
        candidates = [r for r in members if is_candidate(r) and r is not base]
        stages: dict[str, RunRecord | None] = {"baseline": base}
        for stage in STAGE_CHANGES:
            stages[stage] = fastest([r for r in candidates if _is_stage(r, base, stage)])
        speedups: dict[str, float] = {"baseline": 1.0}
        for stage, record in stages.items():
            row: dict[str, Any] = {"machine": key[0], "run": key[1], "workload": key[2], "stage": stage}
            if record is None:
                row.update(
                    {
                        "label": "not measured",
                        "real tok/s": math.nan,
                        "speedup": math.nan,
                        VS_WITHOUT: math.nan,
                        "step gain": math.nan,
                        "note": _why_not_measured(stage, base, members, elsewhere),
                        "record_id": "",
                    }
                )
            else:
                own = nearest_in_time(record, repeats, base)
                ratio = speedup(record, own)
                notes = [disagreeing_with(which, apart) for which in ((record,) if own is record else (record, own))]
                row.update(
                    {
                        "label": record_label(record),
                        "real tok/s": tokens_per_s(record),
                        "speedup": ratio,
                        "speedup interval": speedup_interval(record, own),
                        VS_WITHOUT: over(record, references[key][1])[0],
                        "step gain": ratio / _gain_basis(stage, speedups),
                        "thin": is_thin(record),
                        "note": "; ".join(dict.fromkeys(n for n in notes if n)),
                        "record_id": record.record_id,
                    }
                )
                speedups[stage] = ratio
            rows.append(row)
    return pd.DataFrame(rows, columns=list(WATERFALL_COLUMNS))
