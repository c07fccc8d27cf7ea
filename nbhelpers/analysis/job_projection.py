"""Your job, in hours and money: a whole training job's wall time, GPU-hours and cost, projected from records.

Each row (the baseline, the recommendation of :func:`~nbhelpers.analysis.recommend.recommend`, and "without the
workbook" of :mod:`.references`) gives a measured real tok/s with its interval; the job's tokens come from the
dataset its records name (every row truncated to ``max_length``, as training does) or from JOB_TOKENS. Nothing is
measured here: tokens are divided by measured rates, and :func:`assumptions` says what that takes for granted.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.loading import token_lengths
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.formatting import (
    fmt_count,
    fmt_hours,
    fmt_interval,
    fmt_money,
    fmt_num,
    fmt_rate,
    fmt_speedup,
    is_missing,
)
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord
from nbhelpers.models.loading import model_source
from nbhelpers.validation import ConfigError

from .recommend import recommend
from .records import (
    CrossMachineError,
    choose_baselines,
    gpu_count,
    group_key,
    group_records,
    is_measured,
    is_workbook,
    rate_interval_of,
    record_label,
    speedup_interval,
    step_records,
    tokens_per_s,
)
from .references import WITHOUT_WORKBOOK, missing_note, references_of
from .repeats import nearest_baseline

BASELINE, RECOMMENDATION = "baseline", "recommendation"
Z95 = 1.96  # normal approximation of a 95% interval of a mean
PARAMETERS = {"rows": "JOB_ROWS", "tokens": "JOB_TOKENS", "epochs": "JOB_EPOCHS", "gpus": "JOB_GPUS",
              "price": "GPU_HOUR_PRICE"}  # fmt: skip
COLUMNS = (
    "role", "configuration", "tokens per epoch", "tokens interval", "tokens from", "epochs", "real tok/s",
    "real tok/s interval", "measured GPUs", "samples measured", "job GPUs", "hours", "hours interval", "GPU-hours",
    "GPU-hours interval", "cost", "cost interval", "vs baseline", "vs baseline interval", "hours saved", "note",
    "record_id",
)  # fmt: skip
NO_PRICE = "no price given"


def _check(name: str, value: Any, allowed: str, kind: type, ok: Callable[[Any], bool]) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) or not ok(value):
        raise ConfigError(name, value, allowed)


@dataclass(frozen=True)
class JobSpec:
    """One training job: its size (rows or tokens per epoch), epochs, GPUs and price per GPU-hour."""

    rows: int = 0  # JOB_ROWS: rows per epoch (0 = the dataset's full size)
    tokens: int = 0  # JOB_TOKENS: tokens per epoch as given (0 = derived from rows)
    epochs: float = 1.0  # JOB_EPOCHS: passes over the data
    gpus: int = 1  # JOB_GPUS: GPUs of the job
    price: float = 0.0  # GPU_HOUR_PRICE: money per GPU-hour (0 = no price)

    def __post_init__(self) -> None:
        _check("JOB_ROWS", self.rows, "an integer >= 0 (0 = the dataset's full size)", numbers.Integral,
               lambda v: v >= 0)  # fmt: skip
        _check("JOB_TOKENS", self.tokens, "an integer >= 0 (0 = derived from the rows)", numbers.Integral,
               lambda v: v >= 0)  # fmt: skip
        if self.tokens and self.rows:
            raise ConfigError("JOB_TOKENS", self.tokens, f"0 when JOB_ROWS is set (JOB_ROWS={self.rows}): give the "
                              "job's size as rows or as tokens, not both")  # fmt: skip
        _check("JOB_EPOCHS", self.epochs, "a finite number > 0", numbers.Real, lambda v: v > 0)
        _check("JOB_GPUS", self.gpus, "an integer >= 1", numbers.Integral, lambda v: v >= 1)
        _check("GPU_HOUR_PRICE", self.price, "a finite number >= 0 (price per GPU-hour; 0 = no price)",
               numbers.Real, lambda v: v >= 0)  # fmt: skip

    @classmethod
    def from_parameters(cls, parameters: Mapping[str, Any]) -> JobSpec:
        """From a notebook's parameters or ``globals()`` (JOB_ROWS, JOB_TOKENS, JOB_EPOCHS, JOB_GPUS,
        GPU_HOUR_PRICE); absent ones keep their defaults."""
        return cls(**{field: parameters[name] for field, name in PARAMETERS.items() if name in parameters})


@dataclass(frozen=True)
class JobTokens:
    """Tokens per epoch with a 95% interval (low == high when exact) and how they were counted."""

    tokens: float
    low: float
    high: float
    how: str


def job_tokens(lengths: Sequence[int], max_length: int, spec: JobSpec) -> JobTokens:
    """Tokens per epoch from the dataset's untruncated row lengths, each cut to ``max_length``: the exact sum for the
    full dataset, JOB_ROWS x the mean row with 1.96 x sd / sqrt(rows) around the mean otherwise, or JOB_TOKENS."""
    if spec.tokens:
        return JobTokens(spec.tokens, spec.tokens, spec.tokens, f"JOB_TOKENS={spec.tokens:,}, as given")
    kept = [min(int(n), max_length) for n in lengths]
    if not kept:
        raise ValueError("the dataset has no rows to count the job's tokens from")
    cut = f"each row truncated to max_length={max_length:,} as training does"
    if spec.rows in (0, len(kept)):
        total = float(sum(kept))
        return JobTokens(total, total, total, f"every one of the dataset's {len(kept):,} rows, {cut}")
    mean = statistics.fmean(kept)
    half = Z95 * statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else 0.0
    how = (f"JOB_ROWS={spec.rows:,} x the mean of the dataset's {len(kept):,} rows ({mean:,.1f} tokens, 95% "
           f"interval {mean - half:,.1f}-{mean + half:,.1f}), {cut}")  # fmt: skip
    return JobTokens(spec.rows * mean, spec.rows * max(0.0, mean - half), spec.rows * (mean + half), how)


def job_hours(
    tokens: JobTokens, rate: float, interval: tuple[float, float] | None, measured_gpus: int, spec: JobSpec
) -> dict[str, Any]:
    """Wall hours, GPU-hours and cost of the job at ``rate`` (total real tok/s on ``measured_gpus``), per-GPU rate
    scaled linearly to JOB_GPUS; intervals pair low tokens with the high rate and high tokens with the low rate."""
    scale = spec.gpus / measured_gpus
    hours = tokens.tokens * spec.epochs / (rate * scale) / 3600
    span = None
    if interval is not None:
        slow = interval[0] * scale
        high = tokens.high * spec.epochs / slow / 3600 if slow > 0 else math.inf
        span = (tokens.low * spec.epochs / (interval[1] * scale) / 3600, high)
    gpu_span = None if span is None else (span[0] * spec.gpus, span[1] * spec.gpus)
    priced = spec.price > 0
    return {
        "hours": hours, "hours interval": span, "GPU-hours": hours * spec.gpus, "GPU-hours interval": gpu_span,
        "cost": hours * spec.gpus * spec.price if priced else None,
        "cost interval": (gpu_span[0] * spec.price, gpu_span[1] * spec.price) if priced and gpu_span else None,
    }  # fmt: skip


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def dataset_lengths(config: Mapping[str, Any]) -> list[int]:
    """Untruncated token length of every row of the dataset a record's config names, with its model's tokenizer
    (cached on disk by :func:`~nbhelpers.data.loading.token_lengths`)."""
    get = {**_DEFAULTS, **config}.get
    tokenizer = load_tokenizer(model_source(str(get("model"))))
    return token_lengths(str(get("dataset")), tokenizer, str(get("prompt_field")), str(get("response_field")),
                         bool(get("use_chat_template")), data_format=str(get("data_format")),
                         prompt_template=str(get("prompt_template")))  # fmt: skip


# What dataset_lengths reads: records that agree on these share one count.
LENGTH_FIELDS = ("model", "dataset", "prompt_field", "response_field", "use_chat_template", "data_format",
                 "prompt_template")  # fmt: skip


def _row(role: str, record: RunRecord, spec: JobSpec, lengths: Sequence[int]) -> dict[str, Any]:
    max_length = int(record.config.get("max_length", _DEFAULTS["max_length"]))
    tokens = job_tokens(lengths, max_length, spec)
    rate, interval, measured = float(tokens_per_s(record)), rate_interval_of(record), gpu_count(record)
    notes = [] if interval else ["no interval of its tok/s recorded: no interval of its hours"]
    if measured != spec.gpus:
        notes.append(f"measured on {measured} GPU(s), scaled linearly to JOB_GPUS={spec.gpus}")
    span = None if tokens.low == tokens.high else (tokens.low, tokens.high)
    return {
        "role": role, "configuration": record_label(record), "tokens per epoch": tokens.tokens,
        "tokens interval": span, "tokens from": tokens.how, "epochs": spec.epochs, "real tok/s": rate,
        "real tok/s interval": interval, "measured GPUs": measured, "job GPUs": spec.gpus,
        "samples measured": record.config.get("num_samples"), **job_hours(tokens, rate, interval, measured, spec),
        "note": "; ".join(notes), "record_id": record.record_id,
    }  # fmt: skip


def project_job(rows: Mapping[str, RunRecord | str], spec: JobSpec, lengths: Sequence[int] | None = None) -> Any:
    """One row per role: a record's projected job, or (no record, or its dataset unreadable) empty numbers and the
    sentence why in ``note``.
    ``lengths``: the dataset's untruncated row lengths (tests, a known dataset), or None: each record's
    :func:`dataset_lengths`. ``vs baseline``: the baseline's hours over the row's; ``hours saved``: their gap."""
    import pandas as pd

    out, counted = [], {}  # the dataset's lengths, read once for the rows that name the same data and tokenizer
    for role, record in rows.items():
        if isinstance(record, RunRecord) and not is_measured(record):
            record = f"{record_label(record)} has no measured throughput ({record.reason or record.status})"
        if isinstance(record, str):
            out.append({"role": role, "note": record})
            continue
        try:
            key = tuple(str(record.config.get(name, _DEFAULTS[name])) for name in LENGTH_FIELDS)
            if lengths is None and key not in counted:
                counted[key] = dataset_lengths(record.config)
            out.append(_row(role, record, spec, lengths if lengths is not None else counted[key]))
        except (OSError, ValueError) as error:  # the dataset moved, no tokenizer offline, no rows
            out.append({"role": role, "configuration": record_label(record), "note": f"tokens not counted: {error}"})
    base = next((row for row in out if row["role"] == BASELINE and "hours" in row), None)
    for row in (r for r in out if base is not None and "hours" in r):
        same = row["record_id"] != base["record_id"] and all(
            row[k] == base[k] for k in ("tokens per epoch", "measured GPUs")
        )
        row["vs baseline"], row["hours saved"] = base["hours"] / row["hours"], base["hours"] - row["hours"]
        row["vs baseline interval"] = speedup_interval(rows[row["role"]], rows[BASELINE]) if same else None
    return pd.DataFrame(out, columns=list(COLUMNS))


def job_rows(
    records: Iterable[RunRecord], baseline_label: str | None = None, machine: str | None = None
) -> dict[str, RunRecord | str]:
    """The baseline, the recommendation and "without the workbook" as the report finds them (the recommendation's
    baseline is its group's, nearest in time); a row that is missing gets the sentence why."""
    records = [r for r in records if machine is None or r.machine == machine]
    why = ""
    try:
        rec = recommend(records, machine=machine, baseline_label=baseline_label)
    except CrossMachineError:  # records of several machines: the message says to pass machine=
        raise
    except ValueError as error:
        rec, why = None, f"No recommendation: {error}."
    baselines = choose_baselines(records, baseline_label)
    if rec is not None:
        best = next(r for r in records if r.record_id == rec.record_id)
        key = group_key(best)
    else:
        key = next((k for k, b in baselines.items() if b is not None), None)
    if key is None:
        steps = step_records(records)
        failed = next((r for r in steps if not r.ok and is_workbook(r)), None)
        about = (
            f"{record_label(failed)} failed: {failed.reason or 'no reason recorded'}" if failed else "no step record"
        )
        return {BASELINE: f"No measured baseline: {about}.", RECOMMENDATION: why,
                WITHOUT_WORKBOOK: missing_note(steps)}  # fmt: skip
    _, without, note = references_of(records, baseline_label)[key]
    base = baselines[key]
    if rec is not None:
        base = nearest_baseline(best, base, group_records(records)[key])
    return {BASELINE: base, RECOMMENDATION: best if rec is not None else why, WITHOUT_WORKBOOK: without or note}


def project_sweep_point(
    records: Iterable[RunRecord], spec: JobSpec, baseline_label: str | None = None, lengths: Sequence[int] | None = None
) -> Any:
    """:func:`project_job` of one run's (one sweep point's) records: their baseline, recommendation and
    "without the workbook"."""
    return project_job(job_rows(records, baseline_label), spec, lengths)


def assumptions(spec: JobSpec, frame: Any) -> list[str]:
    """Sentences that say what the projection takes for granted."""
    present = frame[frame["record_id"].notna()]
    samples = sorted({int(s) for s in present["samples measured"].dropna()})
    measured = sorted({int(g) for g in present["measured GPUs"]})
    said = ", ".join(f"{s:,}" for s in samples) or "a few"
    out = [f"Each row's real tok/s, measured on {said} samples of this dataset, holds for the whole job (rows of "
           "other lengths or another mix change it)."]  # fmt: skip
    if len(present):
        out.append(f"Tokens per epoch: {present['tokens from'].iloc[0]}.")
    out.append(f"Epochs multiply tokens: JOB_EPOCHS={spec.epochs:g} passes over the same rows at the same rate.")
    if any(g != spec.gpus for g in measured):
        out.append(f"JOB_GPUS={spec.gpus} where the records ran on {' or '.join(map(str, measured))} GPU(s): linear "
                   "scaling of per-GPU throughput is assumed (every GPU as fast as measured); sharded training "
                   "usually scales below that, so the hours are a lower bound (notebook 05 measures it).")  # fmt: skip
    out.append("Not counted: evaluation, checkpoint saving, data loading and tokenization at start-up, model "
               "loading, and compile or autotune start-up (the first step).")  # fmt: skip
    if spec.price:
        out.append(f"Cost: GPU_HOUR_PRICE={fmt_money(spec.price)} per GPU-hour as given, for each of the job's "
                   f"{spec.gpus} GPU(s) over its whole wall time.")  # fmt: skip
    else:
        out.append("GPU_HOUR_PRICE=0: no price given, so no cost is projected.")
    out.append("Intervals: the 95% interval of each measured tok/s against the token count's (low tokens over the "
               "high rate, high tokens over the low rate).")  # fmt: skip
    return out


def _span(value: Any, span: Any, fmt: Callable[[Any], str], sep: str = "-") -> str:
    if is_missing(value):
        return fmt(value)
    return fmt(value) + (f" ({fmt(span[0])}{sep}{fmt(span[1])})" if isinstance(span, tuple) else "")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _savings(present: Any) -> list[str]:
    """The sentence on the recommendation's hours (and cost) against the baseline's, or none."""
    by_role = {row["role"]: row for _, row in present.iterrows()}
    rec, base = by_role.get(RECOMMENDATION), by_role.get(BASELINE)
    if rec is None or base is None:
        return []
    span = fmt_interval(rec["vs baseline interval"])
    ratio = fmt_speedup(rec["vs baseline"]) + (f" ({span})" if span else "")
    money = "" if is_missing(rec["cost"]) else f", {fmt_money(base['cost'] - rec['cost'])}"
    return ["", f"The recommendation takes {fmt_hours(rec['hours'])} where the baseline takes "
            f"{fmt_hours(base['hours'])}: {ratio} fewer hours, {fmt_hours(rec['hours saved'])}{money} saved "
            "per job."]  # fmt: skip


def projection_markdown(frame: Any, assumptions: Sequence[str]) -> str:
    """The projection as Markdown: a table of the rows there are, then why any row is missing, what the recommendation
    saves over the baseline, and the assumptions."""
    present, missing = frame[frame["record_id"].notna()], frame[frame["record_id"].isna()]
    whys = [f"- {row['role']}: {row['note']}" for _, row in missing.iterrows()]
    if present.empty:
        return "\n".join(["**No job projection:** no row has a measured throughput.", "", *whys])
    first = present.iloc[0]
    lines = [f"**Your job:** {_span(first['tokens per epoch'], first['tokens interval'], fmt_count)} tokens per "
             f"epoch x {first['epochs']:g} epoch(s) on {int(first['job GPUs'])} GPU(s).", "",
             "| row | configuration | real tok/s (95%) | wall time | GPU-hours | cost | note |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for _, row in present.iterrows():
        cost = NO_PRICE if is_missing(row["cost"]) else _span(row["cost"], row["cost interval"], fmt_money)
        lines.append(
            f"| {row['role']} | {_cell(row['configuration'])} | "
            f"{_span(row['real tok/s'], row['real tok/s interval'], fmt_rate)} | "
            f"{_span(row['hours'], row['hours interval'], fmt_hours, ' – ')} | "
            f"{_span(row['GPU-hours'], row['GPU-hours interval'], lambda v: fmt_num(v, 2))} | {cost} | "
            f"{_cell(row['note'])} |"
        )
    lines += _savings(present)
    if whys:
        lines += ["", "Missing rows:", *whys]
    return "\n".join([*lines, "", "Assumptions:", *(f"- {a}" for a in assumptions)])


__all__ = [
    "BASELINE", "COLUMNS", "NO_PRICE", "PARAMETERS", "RECOMMENDATION", "JobSpec", "JobTokens",
    "assumptions", "dataset_lengths", "job_hours", "job_rows", "job_tokens", "project_job", "project_sweep_point",
    "projection_markdown",
]  # fmt: skip
