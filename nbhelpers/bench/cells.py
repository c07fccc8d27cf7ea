"""The cells of a generated results table: each number read from a stored record, formatted one way everywhere.

A record is named by its file (relative to ``benchmarks/gpu``) and its id; :class:`Shelf` reads each file once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.analysis.convergence import convergence_of
from nbhelpers.data.strategies import STRATEGIES
from nbhelpers.measure.store import RunRecord, RunStore

Ref = tuple[str, str]  # (records file relative to the shelf, record id)


@dataclass
class Shelf:
    """The records under one folder, looked up by (file, record id)."""

    root: Path
    _files: dict[str, dict[str, RunRecord]] = field(default_factory=dict)

    def records(self, file: str) -> dict[str, RunRecord]:
        if file not in self._files:
            path = self.root / file
            if not path.is_file():
                raise FileNotFoundError(f"{path}: a table names this records file, which is absent")
            self._files[file] = {r.record_id: r for r in RunStore(path).load()}
        return self._files[file]

    def __call__(self, ref: Ref) -> RunRecord:
        file, record_id = ref
        found = self.records(file).get(record_id)
        if found is None:
            raise KeyError(f"{self.root / file} holds no record {record_id}")
        return found


def metric(record: RunRecord, name: str) -> Any:
    """A metric the table needs; KeyError naming the record when it is absent."""
    value = record.metrics.get(name)
    if value is None:
        raise KeyError(f"record {record.record_id} ({record.label}) has no {name}")
    return value


def tok_s(record: RunRecord) -> str:
    return f"{metric(record, 'real_tokens_per_s'):,.0f}"


def interval(record: RunRecord) -> tuple[float, float]:
    low, high = metric(record, "real_tokens_per_s_interval")
    return float(low), float(high)


def tok_s_interval(record: RunRecord, emphasis: bool = False) -> str:
    """``39,184 (38,807-39,587)``: the rate (in bold with ``emphasis``) and its interval."""
    low, high = interval(record)
    return f"{bold(tok_s(record)) if emphasis else tok_s(record)} ({low:,.0f}-{high:,.0f})"


def ratio(record: RunRecord, baseline: RunRecord, digits: int = 2) -> str:
    """``7.85x``: real tok/s over the baseline's."""
    return f"{metric(record, 'real_tokens_per_s') / metric(baseline, 'real_tokens_per_s'):.{digits}f}x"


def ratio_interval(record: RunRecord, baseline: RunRecord, digits: int = 2) -> str:
    """``(6.93-9.09x)``: the two rates' intervals divided end by end."""
    (low, high), (base_low, base_high) = interval(record), interval(baseline)
    return f"({low / base_high:.{digits}f}-{high / base_low:.{digits}f}x)"


def share(record: RunRecord, name: str, digits: int = 1) -> str:
    """A fraction metric as a percentage."""
    return f"{100 * metric(record, name):.{digits}f}%"


def gib(record: RunRecord) -> str:
    return f"{metric(record, 'peak_memory_gib'):.1f}"


def launches(record: RunRecord, baseline: RunRecord | None = None) -> str:
    """Kernel launches a profiled step, with the fraction of the baseline's (``26,023 (1/7.3)``); "not profiled"."""
    value = record.metrics.get("kernels_per_step")
    if value is None:
        return "not profiled"
    text = f"{value:,.0f}"
    if baseline is not None:
        text += f" (1/{metric(baseline, 'kernels_per_step') / value:.1f})"
    return text


def timed_steps(record: RunRecord) -> str:
    """How many steps the rate rests on, ``: thin`` where the record says so."""
    steps = record.metrics.get("timed_steps") or len(metric(record, "step_times_s"))
    return f"{steps}: thin" if record.metrics.get("thin") else str(steps)


def seconds(record: RunRecord, name: str = "first_step_s", digits: int = 1) -> str:
    return f"{metric(record, name):.{digits}f} s"


def parity(record: RunRecord, reference: bool = False) -> str:
    """The parity verdict: "reference" for the baseline, "pass"/"fail", "other first batch" where it was not judged
    because the strategy's first step holds other samples, else "not checked" (judged, no verdict) or "not judged"."""
    verdict = record.metrics.get("parity") or {}
    status = verdict.get("status")
    if reference or status == "baseline":
        return "reference"
    if status in ("pass", "fail"):
        return str(status)
    strategy = STRATEGIES.get(str(record.config.get("padding")))
    other_batch = strategy is not None and not strategy.same_first_batch
    if status is None:
        return "other first batch" if other_batch else "not judged"
    note = str(verdict.get("note"))  # "different padding": the first batches differ; "... failed": no comparison
    if other_batch and "different padding" in note and "failed" not in note:
        return "other first batch"
    return "not checked"


def sci(value: float) -> str:
    """``1.3e-3``: one decimal, the exponent without padding."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def failure(record: RunRecord) -> str:
    """A failed record's reason, up to its first colon (``out of memory``)."""
    if record.ok:
        raise ValueError(f"record {record.record_id} ({record.label}) did not fail")
    return record.reason.split(":")[0].strip()


def curves(recommended: RunRecord, baseline: RunRecord) -> str:
    """The convergence verdict of two curves: ``pass (largest 1.3e-3, tolerance 0.02)``."""
    result = convergence_of([recommended, baseline])
    if result is None:
        raise ValueError(f"records {recommended.record_id} and {baseline.record_id} are no convergence pair")
    verdict = "pass" if result.passed else "fail"
    return f"{verdict} (largest {sci(max(result.step_rel_diff))}, tolerance {result.step_rtol:g})"


def category_ms(record: RunRecord, category: str) -> str:
    """A traced step's kernel time in one category (``trace_top_categories``), in ms; "-" where it has none."""
    times = {row["category"]: row["time_per_step_us"] for row in metric(record, "trace_top_categories") or ()}
    return f"{times[category] / 1e3:,.0f}" if category in times else "-"


def bold(text: str) -> str:
    return f"**{text}**"


def budget(record: RunRecord) -> str:
    """The record's tokens a step at a token budget (``token_budget``, else batch x max length)."""
    cfg = record.config
    return f"{cfg.get('token_budget') or cfg['batch_size'] * cfg['max_length']:,}"
