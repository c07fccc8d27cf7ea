"""A configuration that compiles kernels on its first step is recommended only where the data say it is faster.

torch.compile, Liger's and fla's Triton kernels pay a compile on every job's first step (seconds to minutes: see
notebook 02's startup section), which no throughput figure counts. When the fastest record's backend compiles at
start (it fills a compiled-kernel cache, per the backend table) and its interval of real tok/s reaches the interval
of a record whose backend compiles nothing, the measurements cannot tell the two apart: the one that starts at once
is recommended instead, and the recommendation says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from nbhelpers.formatting import fmt_rate
from nbhelpers.kernels.registry import BASELINE_BACKEND, find_backend
from nbhelpers.measure.store import RunRecord

from .records import fastest, rate_interval_of, rates_overlap, record_label, tokens_per_s


def compiles_at_start(record: RunRecord) -> bool:
    """Whether the record's kernel backend compiles on its first step (it fills a compiled-kernel cache)."""
    backend = find_backend(str(record.config.get("kernels", BASELINE_BACKEND)))
    return backend is not None and bool(backend.caches)


def span_text(record: RunRecord) -> str:
    low, high = rate_interval_of(record) or (tokens_per_s(record), tokens_per_s(record))
    return f"{fmt_rate(tokens_per_s(record))} [{fmt_rate(low)}-{fmt_rate(high)}] real tok/s"


def without_needless_compile(best: RunRecord, candidates: Sequence[RunRecord]) -> tuple[RunRecord, str]:
    """``best``, or the fastest of ``candidates`` that compiles nothing at start where ``best`` compiles and the two
    intervals overlap; with a sentence saying what was set aside and why ('' when ``best`` stands)."""
    if not compiles_at_start(best):
        return best, ""
    chosen = fastest([r for r in candidates if not compiles_at_start(r) and rates_overlap(r, best)])
    if chosen is None:
        return best, ""
    first = best.metrics.get("first_step_s")
    cost = f", its first step {first:.1f} s" if isinstance(first, (int, float)) else ""
    return chosen, (
        f"{record_label(best)} measured {span_text(best)}, not measurably faster than {record_label(chosen)} "
        f"({span_text(chosen)}), and it compiles kernels at the start of every job{cost}: {record_label(chosen)} "
        "is recommended instead"
    )


__all__ = ["compiles_at_start", "span_text", "without_needless_compile"]
