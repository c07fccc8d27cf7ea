"""The speedup table and the waterfall, computed from RunRecords only (numbers; ``formatting`` shows them).

Every row's speedup divides it by its own group's baseline (one machine, one run, one workload: see
:mod:`nbhelpers.analysis.records`), and a failed configuration stays in the table with its reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from nbhelpers.analysis.records import (
    choose_baselines,
    fastest,
    group_records,
    is_candidate,
    is_measured,
    metric_value,
    parity_status,
    record_label,
    run_name_of,
    speedup,
    tokens_per_s,
)
from nbhelpers.formatting import MISSING
from nbhelpers.measure.store import RunRecord

KERNEL_FIELDS = ("kernels", "liger_kernels", "attn_implementation")
PADDING_FIELDS = ("padding", "pad_to_multiple_of", "num_buckets", "token_budget")
TABLE_COLUMNS = (
    "label",
    "machine",
    "run",
    "status",
    "reason",
    "real tok/s",
    "speedup",
    "MFU",
    "peak memory GiB",
    "kernels/step",
    "padding fraction",
    "parity",
    "baseline",
    "record_id",
)
WATERFALL_STAGES = ("baseline", "kernels only", "padding only", "best overall")
WATERFALL_COLUMNS = ("machine", "run", "workload", "stage", "label", "real tok/s", "speedup", "step gain", "record_id")


def build_table(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """One row per step record (failed ones included, with their reason), grouped by machine and run.

    ``speedup`` is the record's real tok/s over its group's baseline (see ``records.choose_baselines``).
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    rows = []
    for key, members in group_records(records).items():
        base = baselines[key]
        for record in members:
            ratio = speedup(record, base) if base is not None and is_measured(record) else math.nan
            rows.append(
                {
                    "label": record_label(record),
                    "machine": record.machine,
                    "run": run_name_of(record),
                    "status": record.status,
                    "reason": record.reason,
                    "real tok/s": tokens_per_s(record) if is_measured(record) else math.nan,
                    "speedup": ratio,
                    "MFU": metric_value(record, "mfu"),
                    "peak memory GiB": metric_value(record, "peak_memory_gib"),
                    "kernels/step": metric_value(record, "kernels_per_step"),
                    "padding fraction": metric_value(record, "padding_fraction"),
                    "parity": parity_status(record) if record.ok else MISSING,
                    "baseline": record_label(base) if base is not None else "",
                    "record_id": record.record_id,
                }
            )
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def _same(a: RunRecord, b: RunRecord, fields: Sequence[str]) -> bool:
    return all(a.config.get(f) == b.config.get(f) for f in fields)


def _only(record: RunRecord, base: RunRecord, changed: Sequence[str], kept: Sequence[str]) -> bool:
    """``record`` differs from ``base`` in some of ``changed`` and in none of ``kept``."""
    return _same(record, base, kept) and not _same(record, base, changed)


def waterfall_steps(records: Iterable[RunRecord], baseline_label: str | None = None) -> Any:
    """Per (machine, run): baseline -> best kernels-only -> best padding-only -> best overall.

    Every stage is a measured record (ok, parity not "fail"); nothing is multiplied or assumed.
    "Kernels only" means the padding settings equal the baseline's and the kernel settings
    (kernels, Liger switches, attention) differ; "padding only" is the reverse. A stage with no such
    record is a row with label "not measured" and no numbers. ``speedup`` is cumulative (over the
    baseline); ``step gain`` is over the previous measured stage.
    """
    import pandas as pd

    records = list(records)
    baselines = choose_baselines(records, baseline_label)
    rows = []
    for key, members in group_records(records).items():
        base = baselines[key]
        if base is None:
            continue
        candidates = [r for r in members if is_candidate(r)]
        kernels_only = [r for r in candidates if _only(r, base, changed=KERNEL_FIELDS, kept=PADDING_FIELDS)]
        padding_only = [r for r in candidates if _only(r, base, changed=PADDING_FIELDS, kept=KERNEL_FIELDS)]
        stages = {
            "baseline": base,
            "kernels only": fastest(kernels_only),
            "padding only": fastest(padding_only),
            "best overall": fastest(candidates + [base]),
        }
        previous = base
        for stage, record in stages.items():
            row: dict[str, Any] = {"machine": key[0], "run": key[1], "workload": key[2], "stage": stage}
            if record is None:
                row.update(
                    {
                        "label": "not measured",
                        "real tok/s": math.nan,
                        "speedup": math.nan,
                        "step gain": math.nan,
                        "record_id": "",
                    }
                )
            else:
                row.update(
                    {
                        "label": record_label(record),
                        "real tok/s": tokens_per_s(record),
                        "speedup": speedup(record, base),
                        "step gain": speedup(record, previous),
                        "record_id": record.record_id,
                    }
                )
                previous = record
            rows.append(row)
    return pd.DataFrame(rows, columns=list(WATERFALL_COLUMNS))
