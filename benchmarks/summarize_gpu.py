"""Summarize the H200 suite records (benchmarks/gpu/call*.jsonl) into benchmarks/gpu/h200_summary.json.

Each row keeps the record's own numbers and adds a `validity` note where a run is known to be
unusable, with the reason (see benchmarks/gpu/NOTES.md):
- packed and token-budget rows measured before the KV-cache fix (calls 2-4) attended across sequence
  boundaries (their first-step gradient norm differs from the padded run of the same samples by ~30%);
- bucketed rows timed over a few steps timed other samples than the rest (a length-grouped plan reorders
  the batches); rows timed over a whole epoch (calls 7-9) all hold the same samples and compare;
- out-of-memory failures at the start of call 2 and in call 5 ran beside a process left over from the
  previous call's killed configuration (runner defect, since fixed), so they say nothing about memory;
- parity references (calls 10-14) time only a first step, without warm-up: their loss and gradient norm
  are the check for the rest of their group, their speed is not a result;
- call 10's torch_varlen failure came from fp32 query/key reaching FlashAttention (fixed: cast to the
  autocast dtype, as SDPA does); call 11 measured it again.
Run: python benchmarks/summarize_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path

from nbhelpers.data.strategies import STRATEGIES

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
LEAKING_PACKED_CALLS = ("call2", "call3", "call4")
LEFTOVER_PROCESS_OOM = {
    ("call2", "eager, static, sdpa"),
    ("call2", "eager, dynamic, sdpa"),
    ("call2", "eager, multiple, sdpa"),
    ("call5", "baseline: eager, static pad 2048, sdpa"),
}
FIXED_FAILURES = {
    ("call10", "eager, packed, torch_varlen"): "invalid: fp32 query/key reached FlashAttention (fixed: cast to the "
    "autocast dtype); re-measured in call 11",
}


def validity(call: str, record: dict) -> str:
    config = record["config"]
    if (call, config["label"]) in LEFTOVER_PROCESS_OOM:
        return "invalid: ran beside a leftover process from the previous call (runner defect, fixed); re-measured"
    if (call, config["label"]) in FIXED_FAILURES:
        return FIXED_FAILURES[(call, config["label"])]
    if config["label"].startswith("parity reference"):
        return "invalid as a speed: a parity reference (first step only, no warm-up); its loss and gradient norm count"
    ok, epoch = record["status"] == "ok", config.get("timing", "steps") == "epoch"
    strategy = STRATEGIES[config["padding"]]
    if strategy.packed and ok and call in LEAKING_PACKED_CALLS:
        return "invalid for speed claims: attention crossed sequence boundaries (KV-cache defect, fixed)"
    if strategy.length_grouped and ok and not epoch:
        return "not comparable: its timed steps held other samples than the other strategies' (length-grouped plan)"
    if not epoch and config["steps"] != 5 and ok:
        return "valid, but timed a different window (8 steps) than the 5-step runs: compare with care"
    return "valid"


def main() -> None:
    rows = []
    for path in sorted(FOLDER.glob("call*.jsonl")):
        call = path.name.split("_")[0]
        for line in path.read_text().splitlines():
            record = json.loads(line)
            config, metrics = record["config"], record["metrics"]
            rows.append({
                "call": call, "record_id": record["record_id"], "label": config["label"],
                "group": config.get("group", ""),
                "status": record["status"], "reason": record["reason"], "validity": validity(call, record),
                "machine": record["environment"].get("device_name", ""),
                "versions": {k: record["environment"].get(k) for k in VERSION_KEYS},
                "kind": record.get("kind", "step"),
                "config": {k: config.get(k) for k in CONFIG_KEYS},
                "metrics": {k: metrics[k] for k in KEYS if k in metrics},
            })  # fmt: skip
    out = FOLDER / "h200_summary.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}: {len(rows)} rows")


if __name__ == "__main__":
    main()
