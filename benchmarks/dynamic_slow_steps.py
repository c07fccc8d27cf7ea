"""Why do some pad-to-longest steps take seconds on the GPU? Time every step of two passes over one plan.

Usage: python benchmarks/dynamic_slow_steps.py --padding dynamic [--profile] [--no-cudnn-sdpa] --out DIR

One process, the suite's workload (Qwen3-1.7B shape, batch 8, max length 2048, 96 samples, bf16 autocast,
fused AdamW). Pass 1 runs batches 0-10 of the plan in order, pass 2 runs them again: a step that is slow
only in pass 1 pays for something done once per new shape. Per step it keeps wall time, the caching
allocator's counters and, with ``--profile``, the kernels and CUDA runtime calls inside that step's window
of a torch.profiler trace of pass 1's batches 3-7 (the suite's timed steps). Writes DIR/<name>.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

PROFILED = range(3, 8)


def allocator() -> dict[str, int]:
    import torch

    s = torch.cuda.memory_stats() if torch.cuda.is_available() else {}
    return {
        "device_allocs": int(s.get("num_device_alloc", 0)),
        "device_frees": int(s.get("num_device_free", 0)),
        "alloc_retries": int(s.get("num_alloc_retries", 0)),
        "reserved_gib": round(s.get("reserved_bytes.all.current", 0) / 2**30, 2),
    }


def window_summary(events: list[dict[str, Any]], start: float, end: float) -> dict[str, Any]:
    """Kernels and CUDA runtime calls that start inside [start, end) (trace microseconds)."""
    kernels: dict[str, list[float]] = defaultdict(list)
    runtime: dict[str, list[float]] = defaultdict(list)
    ops: Counter[str] = Counter()
    for e in events:
        ts, dur = e.get("ts"), e.get("dur")
        if e.get("ph") != "X" or ts is None or dur is None or not start <= ts < end:
            continue
        cat = e.get("cat", "")
        if cat == "kernel":
            kernels[e["name"]].append(dur)
        elif cat in ("cuda_runtime", "cuda_driver"):
            runtime[e["name"]].append(dur)
        elif cat == "cpu_op" and dur > 50_000:
            ops[e["name"]] += dur

    def top(table: dict[str, list[float]], n: int) -> list[dict[str, Any]]:
        rows = sorted(table.items(), key=lambda kv: -sum(kv[1]))[:n]
        return [{"name": k[:140], "count": len(v), "total_ms": round(sum(v) / 1e3, 2)} for k, v in rows]

    return {
        "wall_ms": round((end - start) / 1e3, 1),
        "kernels": sum(len(v) for v in kernels.values()),
        "kernel_ms": round(sum(sum(v) for v in kernels.values()) / 1e3, 1),
        "top_kernels": top(kernels, 8),
        "top_runtime_calls": top(runtime, 8),
        "cpu_ops_over_50ms": [{"name": k, "total_ms": round(v / 1e3, 1)} for k, v in ops.most_common(8)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--padding", default="dynamic")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-cudnn-sdpa", action="store_true")
    parser.add_argument("--model", default="qwen3-1.7b", help="a smaller preset for a CPU smoke run")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch

    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.measure.config import RunConfig
    from nbhelpers.measure.step import make_step, prepare_batches
    from nbhelpers.models.loading import build_model, model_source

    if args.no_cudnn_sdpa:
        torch.backends.cuda.enable_cudnn_sdp(False)
    config = RunConfig(
        run_name="slow-steps", model=args.model, batch_size=args.batch_size, max_length=args.max_length,
        num_samples=96, steps=8,
        warmup=2, padding=args.padding, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    tokenizer = load_tokenizer(model_source(config.model))
    batches = prepare_batches(config, tokenizer, device)
    model = build_model(config.model, "sdpa", 0, None, device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")
    step = make_step(model, optimizer, "bf16-autocast" if device == "cuda" else "fp32", device)

    name = f"{args.padding}{'-profiled' if args.profile else ''}{'-no-cudnn-sdpa' if args.no_cudnn_sdpa else ''}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"{name}.trace.json.gz"
    profiler = None
    if args.profile:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        profiler = torch.profiler.profile(activities=activities)
    rows = []
    for pass_number in (1, 2):
        for i, batch in enumerate(batches):
            if profiler is not None and pass_number == 1 and i == PROFILED.start:
                profiler.start()
            before = allocator()
            sync()
            start = time.perf_counter()
            with torch.profiler.record_function(f"pass{pass_number}_step{i}"):
                step(batch)
                sync()
            seconds = time.perf_counter() - start
            after = allocator()
            rows.append(
                {
                    "pass": pass_number, "batch": i, "shape": list(batch["input_ids"].shape), "seconds": seconds,
                    "new_device_allocs": after["device_allocs"] - before["device_allocs"],
                    "new_device_frees": after["device_frees"] - before["device_frees"],
                    "alloc_retries": after["alloc_retries"], "reserved_gib": after["reserved_gib"],
                }
            )  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
            if profiler is not None and pass_number == 1 and i == PROFILED.stop - 1:
                profiler.stop()
                profiler.export_chrome_trace(str(trace_path.with_suffix("")))
    result: dict[str, Any] = {
        "name": name, "padding": args.padding, "cudnn_sdpa": not args.no_cudnn_sdpa, "steps": rows,
        "torch": torch.__version__, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "sdpa_backends": {
            "cudnn": torch.backends.cuda.cudnn_sdp_enabled(), "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
        },
    }  # fmt: skip
    if profiler is not None:
        raw = trace_path.with_suffix("")
        events = json.loads(raw.read_text())["traceEvents"]
        windows = {
            e["name"]: (e["ts"], e["ts"] + e["dur"])
            for e in events
            if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("pass1_step")
        }
        result["profiled_steps"] = {k: window_summary(events, *v) for k, v in sorted(windows.items())}
        with open(raw, "rb") as src, gzip.open(trace_path, "wb", compresslevel=6) as dst:
            dst.write(src.read())
        raw.unlink()
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
