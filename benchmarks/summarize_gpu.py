"""Summarize the shipped H200 records the notebooks show into benchmarks/gpu/h200_summary.json.

Each row keeps the record's own numbers, names its file (``source``, relative to benchmarks/gpu) and adds its
``validity`` note from ``benchmarks/gpu/validity.json`` (record_id -> source, label, validity), whose sources are
the files read, through the workbook's one reader of shipped records (``nbhelpers.analysis.gpu_results``). Why a
record is not valid is written there as data, once, beside the records; benchmarks/gpu/NOTES.md ("What was
measured but is not valid") tells the story: attention that crossed sequence boundaries before the KV-cache fix,
bucketed windows that timed other samples, out-of-memory failures beside a leftover process, parity references
that time only a first step, a torn-down torch_varlen attempt before its dtype fix.
Run: python benchmarks/summarize_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path

from nbhelpers.analysis.gpu_results import VALIDITY_FILE, load_validity, record_files
from nbhelpers.measure.jsonl import read_lines
from nbhelpers.measure.store import RunRecord

FOLDER = Path(__file__).resolve().parent / "gpu"
KEYS = (
    "real_tokens_per_s", "real_tokens_per_s_median_step", "step_time_median_s", "step_time_iqr_s",
    "step_time_min_s", "step_time_max_s", "first_step_s", "positions_per_step", "real_tokens_per_step",
    "loss_tokens_per_step", "padding_fraction", "peak_memory_gib", "mfu", "peak_flops_source",
    "kernels_per_step", "trace_nominal_utilization", "trace_sm_efficiency_estimate", "trace_mfu",
    "trace_short_share_of_launches", "trace_short_share_of_time", "trace_idle_share", "loss_first",
    "grad_norm_first", "cuda_alloc_retries", "cuda_device_allocs", "step_times_s", "patch_report",
    "timed_batches", "parity", "cache", "trace_top_categories",
)  # fmt: skip
VERSION_KEYS = ("torch", "transformers", "liger-kernel", "triton", "cuda")
CONFIG_KEYS = ("model", "dataset", "batch_size", "max_length", "padding", "attn_implementation", "kernels",
               "token_budget", "steps", "warmup", "dtype", "num_samples", "timing")  # fmt: skip


def main() -> None:
    validity = load_validity(FOLDER)
    rows = []
    for path in record_files(FOLDER):
        source = path.relative_to(FOLDER).as_posix()
        for record in read_lines(path, RunRecord.from_dict, what="record"):
            if record.record_id not in validity:
                raise SystemExit(f"{source}: record {record.record_id} ({record.label}) has no entry in "
                                 f"{VALIDITY_FILE}: add one (valid, or invalid: why)")  # fmt: skip
            config, metrics = record.config, record.metrics
            rows.append({
                "source": source, "record_id": record.record_id, "label": config["label"],
                "group": config.get("group", ""),
                "status": record.status, "reason": record.reason, "validity": validity[record.record_id],
                "machine": record.environment.get("device_name", ""),
                "versions": {k: record.environment.get(k) for k in VERSION_KEYS},
                "kind": record.kind,
                "config": {k: config.get(k) for k in CONFIG_KEYS},
                "metrics": {k: metrics[k] for k in KEYS if k in metrics},
            })  # fmt: skip
    out = FOLDER / "h200_summary.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
