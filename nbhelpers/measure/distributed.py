"""Several GPUs: launch one configuration under torchrun, run it on every rank, merge the ranks' records.

The runner starts ``python -m torch.distributed.run --standalone --nproc_per_node=GPUS -m
nbhelpers.measure.worker ...`` in its own process group with the configuration's timeout (as it isolates a
single-GPU run). Each rank measures its share of every global step (:func:`nbhelpers.measure.step.measure`);
rank 0 gathers the ranks' records and writes one merged record. A rank that fails writes its own failed
record beside the result, so the runner can say which rank failed and why.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import RunConfig
from .env import resolve_device
from .memory_cap import memory_cap
from .metrics import step_time_stats
from .parallel import barrier, current_rank
from .spread import spread_metrics
from .store import RunRecord


def needs_launch(config: RunConfig) -> bool:
    """A sharded configuration runs under torchrun (one process per GPU), even on one GPU."""
    return config.sharding != "none"


def gpu_shortfall(config: RunConfig, cuda_devices: int | None = None) -> str:
    """Why ``config.gpus`` processes cannot each get a CUDA device here ('' when they can, or on the CPU)."""
    if config.gpus <= 1 or resolve_device(config.device) != "cuda":
        return ""
    if cuda_devices is None:
        import torch

        cuda_devices = torch.cuda.device_count()
    if cuda_devices >= config.gpus:
        return ""
    return (
        f"gpus={config.gpus}: this machine has {cuda_devices} CUDA device(s); run it where {config.gpus} are "
        "visible (CUDA_VISIBLE_DEVICES), or lower gpus"
    )


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity where the platform says, else the machine's count)."""
    import os

    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_processes_note(processes: int, cpus: int | None, gloo: bool = True) -> str:
    """What the per-GPU figures of a run whose ranks were CPU processes are: per process, sharing the cores
    (``cpus``: how many, when known; ``gloo``: the processes formed a gloo group, as sharded runs do)."""
    share = f"{cpus} CPU core(s)" if cpus else "the CPU cores"
    if cpus and processes > cpus:
        share += " (more processes than cores: they take turns)"
    return (
        f"{processes} CPU process(es){' (gloo)' if gloo else ''}, no GPU: the per-GPU figures are per process, on "
        f"{share}; the numbers mean something on GPUs only"
    )


def launch_command(config: RunConfig, config_path: str, result_path: str, notebook: str = "") -> list[str]:
    """The torchrun command line that runs the worker on ``config.gpus`` local processes."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={config.gpus}",
        "--max_restarts=0", "-m", "nbhelpers.measure.worker", config_path, result_path, notebook,
    ]  # fmt: skip


def rank_file(result_path: str) -> str:
    """Where this rank writes its failed record, beside the merged result."""
    return f"{result_path}.rank{current_rank().rank}"


def rank_failure(result_path: str | Path) -> str:
    """Why the ranks that failed did (from their own records), '' when none wrote one."""
    reasons = []
    result = Path(result_path)
    for path in sorted(result.parent.glob(result.name + ".rank*")):
        record = RunRecord.from_dict(json.loads(path.read_text()))
        reasons.append(f"rank {path.name.rsplit('.rank', 1)[1]}: {record.reason}")
    return "; ".join(reasons)


def communication_per_step_us(record: RunRecord) -> float | None:
    """Time per step in the trace's communication category (NCCL/gloo collectives); None without a trace."""
    trace = record.artifacts.get("trace")
    if not trace or not Path(trace).exists():
        return None
    from nbhelpers.profiling.analyze import category_summary
    from nbhelpers.profiling.classify import COMMUNICATION
    from nbhelpers.profiling.parse import load_trace

    summary = category_summary(load_trace(trace))
    rows = summary[summary["category"] == COMMUNICATION]
    return float(rows["time_per_step_us"].sum()) if len(rows) else 0.0


def run_rank(config: RunConfig, result_path: str, notebook: str = "") -> int:
    """One rank under torchrun: measure, gather to rank 0, which writes the merged record (raises on failure;
    the worker writes the rank's failed record to :func:`rank_file`)."""
    from .step import measure

    rank = current_rank()
    with memory_cap(config.gpu_memory_gib, resolve_device(config.device), rank.local_rank) as cap:
        record = measure(config, notebook=notebook, progress=rank.rank == 0)
    record.metrics.update(cap)
    record.metrics["communication_per_step_us"] = communication_per_step_us(record)
    records = gather_records(record)
    if rank.rank == 0:
        staging = Path(result_path + ".tmp")
        staging.write_text(json.dumps(merge_rank_records(records).to_dict(), default=str))
        staging.replace(result_path)
    barrier(rank)
    _leave()
    return 0


def gather_records(record: RunRecord) -> list[RunRecord]:
    """Every rank's record on rank 0 (an empty list elsewhere); the record itself with one process."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [record]
    gathered: list[Any] = [None] * dist.get_world_size() if dist.get_rank() == 0 else []
    dist.gather_object(record.to_dict(), gathered if dist.get_rank() == 0 else None, dst=0)
    return [RunRecord.from_dict(r) for r in gathered]


def _leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    total = sum(weights)
    return sum(v * w for v, w in zip(values, weights)) / total if total else statistics.fmean(values)


def merge_rank_records(records: Sequence[RunRecord]) -> RunRecord:
    """One record for the whole world from the ranks' records (rank order).

    A step of the world lasts as long as its slowest rank; throughput is every rank's real tokens over
    that time (total, and per GPU); losses are token-weighted means over the ranks (the loss of the whole
    global step); MFU is every rank's useful FLOPs over the time and the world's peak; peak memory is
    kept per GPU and its maximum. ``rank_device`` says what the ranks ran on; ranks that were CPU processes
    (gloo) get ``per_gpu_note`` (:func:`cpu_processes_note`): their per-GPU figures are per process.
    """
    if not records:
        raise ValueError("no rank records to merge")
    records = sorted(records, key=lambda r: r.metrics.get("rank", 0))
    first, world = records[0], len(records)
    ms = [r.metrics for r in records]
    steps = len(ms[0]["step_times_s"])
    if any(len(m["step_times_s"]) != steps for m in ms):
        raise ValueError("the ranks timed different numbers of steps")
    times = [max(m["step_times_s"][i] for m in ms) for i in range(steps)]
    total_time = sum(times)
    step_tokens = [sum(m["timed_real_tokens"][i] for m in ms) for i in range(steps)]  # the world's, per step
    real = sum(step_tokens)
    positions = sum(m["positions_per_step"] * m["timed_batches"] for m in ms)
    flops = sum(sum(m["timed_flops"]) for m in ms)
    peak_flops = float(ms[0]["peak_flops"])
    first_loss = _weighted_mean([m["loss_first"] for m in ms], [m["loss_tokens_first"] for m in ms])
    losses = [first_loss] + [
        _weighted_mean([m["losses"][i + 1] for m in ms], [m["timed_loss_tokens"][i] for m in ms]) for i in range(steps)
    ]
    memories = [float(m["peak_memory_gib"]) for m in ms]
    comm = [m.get("communication_per_step_us") for m in ms]
    per_rank = [
        {key: m.get(key) for key in ("rank", "real_tokens_per_s", "peak_memory_gib", "step_time_median_s", "mfu",
                                     "loss_first", "real_tokens_per_step", "communication_per_step_us")}
        for m in ms
    ]  # fmt: skip
    metrics = dict(ms[0]) | step_time_stats(times) | {
        "step_times_s": times,
        "first_step_s": max(m["first_step_s"] for m in ms),
        "positions_per_step": positions / steps,
        "real_tokens_per_step": real / steps,
        "loss_tokens_per_step": sum(sum(m["timed_loss_tokens"]) for m in ms) / steps,
        "padding_fraction": 1 - real / positions if positions else 0.0,
        "real_tokens_per_s": real / total_time,
        "real_tokens_per_s_per_gpu": real / total_time / world,
        "positions_per_s": positions / total_time,
        "real_tokens_per_s_median_step": statistics.median(
            tokens / t for tokens, t in zip(step_tokens, times)
        ),
        "model_flops_per_step": flops / steps,
        "mfu": flops / total_time / (peak_flops * world),
        "peak_memory_gib": max(memories),
        "peak_memory_gib_per_gpu": memories,
        "loss_first": first_loss,
        "losses": losses,
        "loss_tokens_first": sum(m["loss_tokens_first"] for m in ms),
        "timed_real_tokens": step_tokens,
        "timed_loss_tokens": [sum(m["timed_loss_tokens"][i] for m in ms) for i in range(steps)],
        "timed_flops": [sum(m["timed_flops"][i] for m in ms) for i in range(steps)],
        # the interval, the floor and what they rest on: the world's steps, not rank 0's
        **spread_metrics(step_tokens, times),
        "world_size": world,
        "rank": "merged",
        "per_rank": per_rank,
        "communication_per_step_us": max(comm) if all(c is not None for c in comm) else None,
        "communication_share": _communication_share(comm, times),
    }
    if first.environment.get("device_type") == "cpu":  # torchrun's processes ran on the CPU (device auto or cpu)
        cpus = available_cpus()
        metrics |= {"rank_device": "cpu", "cpu_cores": cpus, "per_gpu_note": cpu_processes_note(world, cpus)}
    else:
        metrics["rank_device"] = str(first.environment.get("device_type") or "")
    artifacts = {f"{name}_rank{r}": path for r, rec in enumerate(records) for name, path in rec.artifacts.items()}
    artifacts |= {name: path for name, path in first.artifacts.items()}
    return RunRecord(
        config=first.config, kind=first.kind, notebook=first.notebook, metrics=metrics,
        environment=first.environment | {"world_size": world}, artifacts=artifacts,
    )  # fmt: skip


def _communication_share(comm: Sequence[float | None], times: Sequence[float]) -> float | None:
    """Communication time per step (slowest rank) over the median step time; None without traces."""
    if not comm or any(c is None for c in comm):
        return None
    median = statistics.median(times)
    return max(c for c in comm if c is not None) / 1e6 / median if median else None
