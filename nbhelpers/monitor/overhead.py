"""What the monitor costs a training step: the same steps without it, with it, and with profiler windows.

One process, one model, fixed batches of consecutive samples collated by a padding strategy, AdamW (fused on a GPU,
under bf16 autocast there). Three arms: "plain" (no monitor), "monitor" (counting, timing, an interval record every
``log_every`` steps, no profiler) and "windows" (the same with a profiler window every ``profile_every`` steps).
Each round runs one block of ``block`` steps per arm, the arms' order rotating from round to round, and a block is
timed as a training job runs: a device sync and a clock read at its start and end only (a sync per step would hide
what the monitor's own timing costs a real job). Per arm: the median over rounds of its block's time over the plain
block's of the same round (the drift of a shared machine cancels within a round); for "windows", its blocks without
a profiled step (step numbers run half a block ahead, so a window lies inside one block), the mean over all its
blocks with the windows in them, and each window's own cost as the monitor records it. CPU numbers say the
measurement works, not what a GPU costs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from nbhelpers.validation import ConfigError

from .core import Monitor

RUN_NAME = "monitor-overhead"
WINDOW_LENGTH = 2  # the monitor's default window: one warm-up and one traced step


@dataclass(frozen=True)
class OverheadSettings:
    """The workload and the rounds of one overhead measurement."""

    model: str = "qwen3-tiny"
    batch_size: int = 4
    max_length: int = 256
    padding: str = "dynamic"
    attention: str = "sdpa"
    block: int = 10  # steps per arm and round
    rounds: int = 12
    warmup: int = 3
    profile_every: int = 40
    log_every: int = 15  # not a divisor of block: flushes fall mid-block
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.block < WINDOW_LENGTH:
            raise ConfigError("block", self.block, f"at least {WINDOW_LENGTH}, the length of a profiler window")
        if self.profile_every % self.block:
            raise ConfigError("profile_every", self.profile_every, f"a multiple of block={self.block}, so that each "
                              "profiler window lies inside one block")  # fmt: skip


def _training(settings: OverheadSettings) -> tuple[str, Any, list[dict[str, Any]], Callable[[dict[str, Any]], None]]:
    """The device, the model, the fixed batches and one training step on them."""
    import torch

    from nbhelpers.data.collate import collate, to_device
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.kernels.attention import prepare_attention
    from nbhelpers.measure.env import resolve_device
    from nbhelpers.models.loading import build_model

    device = resolve_device(settings.device)
    tokenizer = load_tokenizer(settings.model)
    size = settings.batch_size
    examples = load_examples("default", tokenizer, size * settings.block, settings.max_length)
    padding = PaddingSettings(settings.padding, size, settings.max_length)
    batches = [
        to_device(collate(examples[i : i + size], padding, tokenizer.pad_token_id), device)
        for i in range(0, len(examples) - size + 1, size)
    ]
    prepare_attention(settings.attention)
    model = build_model(settings.model, settings.attention, seed=0, device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device == "cuda")

    def train_step(batch: dict[str, Any]) -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return device, model, batches, train_step


def measure_overhead(settings: OverheadSettings) -> dict[str, Any]:
    """Every arm's blocks and the monitor's windows (see the module's docstring), as one JSON-ready dict."""
    from nbhelpers.measure.env import sync_device

    device, model, batches, train_step = _training(settings)

    def block_time(step: Callable[[dict[str, Any]], None]) -> float:
        sync_device(device)
        start = time.perf_counter()
        for batch in batches:
            step(batch)
        sync_device(device)
        return time.perf_counter() - start

    for batch in batches[: settings.warmup]:
        train_step(batch)
    every = {"plain": None, "monitor": 0, "windows": settings.profile_every}  # None: no monitor at all
    monitors = {
        arm: Monitor(RUN_NAME, model=model, log_every=settings.log_every, profile_every=n, source="benchmark")
        for arm, n in every.items() if n is not None
    }  # fmt: skip
    shift = len(batches) // 2  # step numbers run ahead by half a block: a window opens mid-block, never across two

    def next_number(monitor: Monitor) -> int:
        return monitor.steps_done + 1 if monitor.steps_done else shift + 1

    def monitored(monitor: Monitor) -> Callable[[dict[str, Any]], None]:
        def step(batch: dict[str, Any]) -> None:
            monitor.begin_step(next_number(monitor))
            monitor.add_batch(batch)
            train_step(batch)
            monitor.end_step()

        return step

    def has_window(arm: str, first: int) -> bool:
        n = every[arm]
        return bool(n) and any(s >= n and s % n < WINDOW_LENGTH for s in range(first, first + len(batches)))

    blocks: dict[str, list[float]] = {arm: [] for arm in every}
    clean: dict[str, list[bool]] = {arm: [] for arm in every}  # False: a block with a profiled step
    arms = list(every)
    for round_index in range(settings.rounds):
        for arm in arms[round_index % 3 :] + arms[: round_index % 3]:  # each arm takes its turn first
            if arm not in monitors:
                blocks[arm].append(block_time(train_step))
                clean[arm].append(True)
                continue
            first = next_number(monitors[arm])
            blocks[arm].append(block_time(monitored(monitors[arm])))
            clean[arm].append(not has_window(arm, first))
    windows: list[dict[str, Any]] = []
    for monitor in monitors.values():
        monitor.close()
        windows += [r.metrics for r in monitor.records if r.metrics.get("window_time_s") is not None]
    result: dict[str, Any] = {**asdict(settings), "device": device, "block_steps": len(batches), "arms": {}}
    for arm, times in blocks.items():
        windowed = arm == "windows"
        result["arms"][arm] = arm_summary(times, blocks["plain"], clean[arm], len(batches), with_windows=windowed)
    if windows:
        result["windows"] = windows_summary(windows)
    return result


def arm_summary(times: list[float], plain: list[float], clean: list[bool], steps: int, with_windows: bool) -> dict:
    """One arm's blocks against the plain arm's of the same rounds."""
    rounds = list(zip(times, plain, clean))
    between = [t / p - 1 for t, p, ok in rounds if ok]  # blocks without a profiled step
    overall = [t / p - 1 for t, p, _ in rounds]  # every block, windows included
    step_s = statistics.median(t for t, _, ok in rounds if ok) / steps if between else math.nan
    return {"blocks": len(rounds), "clean_blocks": len(between), "median_step_s": step_s,
            "overhead_vs_plain": statistics.median(between) if between else None,
            "overhead_range": (min(between), max(between)) if between else None,
            "overhead_with_windows": statistics.mean(overall) if with_windows else None,
            "block_times_s": times, "clean": clean}  # fmt: skip


def windows_summary(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """The profiler windows' medians as the monitor recorded them."""
    cost = [w["window_cost_s"] for w in windows if w.get("window_cost_s") is not None]
    return {
        "count": len(windows),
        "median_window_time_s": statistics.median(w["window_time_s"] for w in windows),
        "median_window_cost_s": statistics.median(cost) if cost else None,
        "median_export_s": statistics.median(w["window_export_s"] for w in windows),
        "launches_per_step": statistics.median(w["launches_per_step"] for w in windows),
    }


def overhead_lines(result: dict[str, Any]) -> list[str]:
    """The measurement in a few printed lines."""
    lines = [f"{result['device']}, {result['model']}, batch {result['batch_size']} x {result['max_length']} "
             f"({result['padding']}), {result['rounds']} rounds of {result['block_steps']}-step blocks"]  # fmt: skip
    for arm, entry in result["arms"].items():
        if not entry["clean_blocks"]:
            lines.append(f"  {arm:8s} no block without a profiled step: raise profile_every above twice block")
            continue
        low, high = entry["overhead_range"]
        text = (f"  {arm:8s} {entry['clean_blocks']:3d} blocks  {entry['median_step_s'] * 1e3:9.2f} ms/step  "
                f"overhead {entry['overhead_vs_plain']:+7.2%} (rounds {low:+.2%} .. {high:+.2%})")  # fmt: skip
        if entry["overhead_with_windows"] is not None:
            text += f"; with its windows, over all {entry['blocks']} blocks: {entry['overhead_with_windows']:+.2%}"
        lines.append(text)
    if w := result.get("windows"):
        cost = "n/a" if w["median_window_cost_s"] is None else f"{w['median_window_cost_s'] * 1e3:.1f} ms"
        export_ms = w["median_export_s"] * 1e3
        lines.append(f"  windows: {w['count']}, each {w['median_window_time_s'] * 1e3:.1f} ms for {WINDOW_LENGTH} "
                     f"steps (cost over unprofiled steps {cost}, of which trace export {export_ms:.1f} ms), "
                     f"{w['launches_per_step']:.0f} launches per step")  # fmt: skip
    return lines
