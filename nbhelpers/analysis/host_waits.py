"""Where a profiled step made the host wait for the GPU, read from its record (``measure/host_syncs.py``).

Each synchronizing call empties the GPU's queue, and the GPU idles while the host launches what follows: a trace's
idle time has these calls among its causes. Notebook 01 shows them under the utilization figures.
"""

from __future__ import annotations

from nbhelpers.formatting import fmt_count
from nbhelpers.measure.store import RunRecord


def describe(record: RunRecord | None) -> str:
    """Markdown: how many times the profiled step made the host wait and the lines that made it wait most (a table),
    or why that was not counted."""
    if record is None:
        return "Not counted: the step has no record (its failure is shown above)."
    metrics = record.metrics
    if "host_syncs_per_step" not in metrics:
        if record.environment.get("device_type") != "cuda":
            return ("Not counted on a CPU: the host runs the step itself, there is no queue of GPU work to wait "
                    "for. On a GPU a profiled row counts them.")  # fmt: skip
        return "Not counted: the row was not profiled, or was measured before the count existed."
    total = int(metrics["host_syncs_per_step"])
    if total == 0:
        return "The profiled step never made the host wait for the GPU before its end."
    rows = "".join(f"| `{s['site']}` | {fmt_count(s['syncs'])} |\n" for s in metrics.get("host_sync_sites") or [])
    return (f"The profiled step made the host wait for the GPU **{fmt_count(total)} times**; the lines that made "
            f"it wait most:\n\n| line | waits |\n| --- | --- |\n{rows}")  # fmt: skip
