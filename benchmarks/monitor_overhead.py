"""What does nbhelpers.monitor cost a training step? The same steps without it, with it, and with profiler windows.

Usage: python benchmarks/monitor_overhead.py [--model qwen3-tiny] [--batch-size 4] [--max-length 256]
       [--padding dynamic] [--block 10] [--rounds 12] [--profile-every 40] [--log-every 15] [--out FILE]

One process, one model, fixed batches of consecutive samples of the default dataset collated by the padding
strategy, AdamW (fused on a GPU, under bf16 autocast there). Three arms: "plain" (no monitor), "monitor"
(counting, timing, an interval record every --log-every steps, no profiler) and "windows" (the same with a
profiler window every --profile-every steps). Each round runs one block of --block steps per arm, the arms'
order rotating from round to round, and a block is timed as a training job runs: a device sync and a clock read
at its start and end only, none between its steps (a sync per step would hide what the monitor's own timing
costs a real job). Printed: per arm, the median over rounds of its block's time over the plain block's of the
same round (the drift of a shared machine cancels within a round); for "windows", its blocks without a profiled
step (between windows; issue 16's target is <= 2% on an H200; step numbers run half a block ahead so that a
window lies inside one block), the mean over all its blocks with the windows' cost in them, and each window's
own cost as the monitor records it (window_cost_s: the window's steps plus writing and reading its trace, minus as many
unprofiled median steps). Records go to runs/monitor-overhead/; --out also writes the numbers as JSON.
CPU numbers say the script works, not what a GPU costs.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

RUN_NAME = "monitor-overhead"


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen3-tiny")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--padding", default="dynamic")
    parser.add_argument("--attention", default="sdpa")
    parser.add_argument("--block", type=int, default=10, help="steps per arm and round")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-every", type=int, default=40)
    parser.add_argument("--log-every", type=int, default=15, help="not a divisor of --block: flushes fall mid-block")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.block < 2:
        parser.error(f"--block={args.block}: must be at least 2, the length of a profiler window")
    if args.profile_every % args.block:
        parser.error(f"--profile-every={args.profile_every} must be a multiple of --block={args.block}, so that "
                     "each profiler window lies inside one block")  # fmt: skip
    return args


def main() -> None:
    args = parse()
    import torch

    from nbhelpers.data.collate import collate, to_device
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.kernels.attention import prepare_attention
    from nbhelpers.measure.env import resolve_device, sync_device
    from nbhelpers.models.loading import build_model
    from nbhelpers.monitor import Monitor

    device = resolve_device(args.device)
    tokenizer = load_tokenizer(args.model)
    size = args.batch_size
    examples = load_examples("default", tokenizer, size * args.block, args.max_length)
    settings = PaddingSettings(args.padding, size, args.max_length)
    batches = [
        to_device(collate(examples[i : i + size], settings, tokenizer.pad_token_id), device)
        for i in range(0, len(examples) - size + 1, size)
    ]
    prepare_attention(args.attention)
    model = build_model(args.model, args.attention, seed=0, device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")

    def train_step(batch: dict[str, Any]) -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def block_time(step: Any) -> float:
        """One block of steps, timed as a job runs: a sync at its start and end, none between its steps."""
        sync_device(device)
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        sync_device(device)
        return time.perf_counter() - start

    for batch in batches[: args.warmup]:
        train_step(batch)
    every = {"plain": None, "monitor": 0, "windows": args.profile_every}  # None: no monitor at all
    monitors = {
        arm: Monitor(RUN_NAME, model=model, log_every=args.log_every, profile_every=n, source="benchmark")
        for arm, n in every.items() if n is not None
    }  # fmt: skip
    window_length = 2  # the monitor's default: one warm-up and one traced step

    shift = len(batches) // 2  # step numbers run ahead by half a block: a window opens mid-block, never across two

    def next_number(monitor: Monitor) -> int:
        return monitor.steps_done + 1 if monitor.steps_done else shift + 1

    def monitored(monitor: Monitor) -> Any:
        def step(batch: dict[str, Any]) -> None:
            monitor.begin_step(next_number(monitor))
            monitor.add_batch(batch)
            train_step(batch)
            monitor.end_step()

        return step

    def has_window(arm: str, first: int) -> bool:
        n = every[arm]
        return bool(n) and any(s >= n and s % n < window_length for s in range(first, first + len(batches)))

    blocks: dict[str, list[float]] = {arm: [] for arm in every}
    clean: dict[str, list[bool]] = {arm: [] for arm in every}  # False: a block with a profiled step
    for round_index in range(args.rounds):
        arms = list(every)
        for arm in arms[round_index % 3 :] + arms[: round_index % 3]:  # each arm takes its turn first
            if arm not in monitors:
                blocks[arm].append(block_time(train_step))
                clean[arm].append(True)
                continue
            monitor = monitors[arm]
            first = next_number(monitor)
            blocks[arm].append(block_time(monitored(monitor)))
            clean[arm].append(not has_window(arm, first))
    costs: list[dict[str, Any]] = []
    for monitor in monitors.values():
        monitor.close()
        costs += [r.metrics for r in monitor.records if r.metrics.get("window_time_s") is not None]
    result: dict[str, Any] = {"device": device, "model": args.model, "batch_size": size, "padding": args.padding,
                              "max_length": args.max_length, "block_steps": len(batches), "rounds": args.rounds,
                              "profile_every": args.profile_every, "log_every": args.log_every, "arms": {}}  # fmt: skip
    print(f"{device}, {args.model}, batch {size} x {args.max_length} ({args.padding}), {args.rounds} rounds "
          f"of {len(batches)}-step blocks")  # fmt: skip
    for arm, times in blocks.items():
        rounds = list(zip(times, blocks["plain"], clean[arm]))
        between = [t / p - 1 for t, p, ok in rounds if ok]  # blocks without a profiled step
        overall = [t / p - 1 for t, p, _ in rounds]  # every block, windows included
        step_ms = statistics.median(t for t, _, ok in rounds if ok) / len(batches) * 1e3 if between else math.nan
        entry = {"blocks": len(rounds), "clean_blocks": len(between), "median_step_s": step_ms / 1e3,
                 "overhead_vs_plain": statistics.median(between) if between else None,
                 "overhead_range": (min(between), max(between)) if between else None,
                 "overhead_with_windows": statistics.mean(overall) if arm == "windows" else None,
                 "block_times_s": times, "clean": clean[arm]}  # fmt: skip
        result["arms"][arm] = entry
        if not between:
            print(f"  {arm:8s} no block without a profiled step: raise --profile-every above twice --block")
            continue
        overhead = entry["overhead_vs_plain"]
        text = (f"  {arm:8s} {len(between):3d} blocks  {step_ms:9.2f} ms/step  overhead {overhead:+7.2%} "
                f"(rounds {min(between):+.2%} .. {max(between):+.2%})")  # fmt: skip
        if arm == "windows":
            text += f"; with its windows, over all {len(rounds)} blocks: {entry['overhead_with_windows']:+.2%}"
        print(text)
    if costs:
        window_cost = [c["window_cost_s"] for c in costs if c.get("window_cost_s") is not None]
        result["windows"] = {
            "count": len(costs),
            "median_window_time_s": statistics.median(c["window_time_s"] for c in costs),
            "median_window_cost_s": statistics.median(window_cost) if window_cost else None,
            "median_export_s": statistics.median(c["window_export_s"] for c in costs),
            "launches_per_step": statistics.median(c["launches_per_step"] for c in costs),
        }
        w = result["windows"]
        cost = "n/a" if w["median_window_cost_s"] is None else f"{w['median_window_cost_s'] * 1e3:.1f} ms"
        print(f"  windows: {w['count']}, each {w['median_window_time_s'] * 1e3:.1f} ms for {window_length} steps "
              f"(cost over unprofiled steps {cost}, of which trace export {w['median_export_s'] * 1e3:.1f} ms), "
              f"{w['launches_per_step']:.0f} launches per step")  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
