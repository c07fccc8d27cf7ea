"""What does nbhelpers.monitor cost a training step? The same steps without it, with it, and with profiler windows.

Usage: python benchmarks/monitor_overhead.py [--model qwen3-tiny] [--batch-size 4] [--max-length 256]
       [--padding dynamic] [--steps 20] [--rounds 3] [--profile-every 10] [--log-every 10] [--out FILE]

One process, one model, fixed batches of consecutive samples of the default dataset collated by the padding
strategy, AdamW (fused on a GPU, under bf16 autocast there). Each round runs three arms of --steps steps in turn,
each arm going first in one round of three, so the drift of a shared machine falls on every arm alike: "plain"
(no monitor), "monitor" (counting, timing, an interval record every --log-every steps, no profiler) and
"windows" (the same with a profiler window every --profile-every steps). Every step is timed outside the
monitor, a device sync before each clock read. Printed: each arm's median step time and its overhead over plain
(between windows, for "windows": its unprofiled steps; issue 16's target is <= 2% on an H200), and each window's
own cost as the monitor records it (window_cost_s: the window's steps plus writing and reading its trace, minus
as many unprofiled median steps). Records go to runs/monitor-overhead/; --out also writes the numbers as JSON.
CPU numbers say the script works, not what a GPU costs.
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--steps", type=int, default=20, help="steps per arm and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile-every", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=None)
    return parser.parse_args()


def main() -> None:
    args = parse()
    import torch

    from nbhelpers.data.collate import collate, to_device
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.measure.env import resolve_device
    from nbhelpers.models.loading import build_model
    from nbhelpers.monitor import Monitor

    device = resolve_device(args.device)
    tokenizer = load_tokenizer(args.model)
    size = args.batch_size
    examples = load_examples("default", tokenizer, size * args.steps, args.max_length)
    settings = PaddingSettings(args.padding, size, args.max_length)
    batches = [
        to_device(collate(examples[i : i + size], settings, tokenizer.pad_token_id), device)
        for i in range(0, len(examples) - size + 1, size)
    ]
    model = build_model(args.model, args.attention, seed=0, device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def train_step(batch: dict[str, Any]) -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def timed(run: Any) -> float:
        sync()
        start = time.perf_counter()
        run()
        sync()
        return time.perf_counter() - start

    for batch in batches[: args.warmup]:
        train_step(batch)
    every = {"plain": None, "monitor": 0, "windows": args.profile_every}  # None: no monitor at all
    times: dict[str, list[float]] = {arm: [] for arm in every}
    costs: list[dict[str, Any]] = []
    window_length = 2  # the monitor's default: one warm-up and one traced step
    for round_index in range(args.rounds):
        arms = list(every)
        for arm in arms[round_index % 3 :] + arms[: round_index % 3]:  # each arm takes its turn first
            if every[arm] is None:
                times[arm] += [timed(lambda b=b: train_step(b)) for b in batches]
                continue
            monitor = Monitor(
                RUN_NAME, model=model, log_every=args.log_every, profile_every=every[arm], source="benchmark"
            )
            for number, batch in enumerate(batches, start=1):

                def monitored(batch: dict[str, Any] = batch, monitor: Monitor = monitor) -> None:
                    with monitor.step(batch):
                        train_step(batch)

                elapsed = timed(monitored)
                if not every[arm] or (number % every[arm]) >= window_length:  # keep the steps between windows
                    times[arm].append(elapsed)
            monitor.close()
            costs += [r.metrics for r in monitor.records if r.metrics.get("window_time_s") is not None]
    plain = statistics.median(times["plain"])
    result: dict[str, Any] = {"device": device, "model": args.model, "batch_size": size, "padding": args.padding,
                              "max_length": args.max_length, "steps_per_arm": args.steps, "rounds": args.rounds,
                              "profile_every": args.profile_every, "log_every": args.log_every, "arms": {}}  # fmt: skip
    print(f"{device}, {args.model}, batch {size} x {args.max_length} ({args.padding}), {args.rounds} rounds")
    for arm, values in times.items():
        median = statistics.median(values)
        overhead = median / plain - 1
        result["arms"][arm] = {"steps": len(values), "median_s": median, "overhead_vs_plain": overhead}
        print(f"  {arm:8s} {len(values):4d} steps  median {median * 1e3:9.2f} ms  overhead {overhead:+7.2%}")
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
