"""TRL's ``SFTTrainer`` measured as a peer of the workbook's step: same samples, same timing, same counts.

The same tokenized samples (``input_ids`` and ``labels``, prompt tokens -100) and the same random weights as
:func:`nbhelpers.measure.step.measure`, at the workload's timing: with ``timing="epoch"``, ``trainer.train()`` runs
one untimed epoch, then timed epochs up to the floor of timed steps; with ``timing="steps"``, the workbook's first
step and ``warmup`` steps untimed, then ``steps`` timed (TRL stops at ``max_steps``), each step timed with device
syncs. Real tokens are counted on each batch TRL's collator makes
(:func:`~nbhelpers.data.collate.count_tokens`), so tok/s means the same as in the workbook's records. The flags
come from the configuration's engine (:mod:`nbhelpers.measure.engines`); the harness adds only what a
measurement needs (its epochs or steps, no checkpoints, no reports, per-step loss, the workload's dtype and device),
and a profiled row (epoch timing) one more epoch, after the timed ones, for its trace.

Throughput is timed as the workbook times its own loop: the sum of the timed epoch's synced steps (callback
``on_step_begin`` to ``on_step_end``: forward, backward, clipping, optimizer). What TRL spends between steps
(its data loader and collator, logging, callbacks) is kept beside it: ``time_outside_steps_s``, and
``real_tokens_per_s_epoch_wall`` over the timed epochs' wall clock (epoch timing) or ``real_tokens_per_s_wall``
from the first timed step's start to the last one's end (step timing).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.collate import count_tokens, sequence_lengths
from nbhelpers.data.loading import IGNORE_INDEX
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.attention import prepare_attention
from nbhelpers.kernels.registry import model_setup_parts
from nbhelpers.machine import package_versions
from nbhelpers.models.adapters import parameter_counts, peft_config, skip_input_casts, weights_dtype
from nbhelpers.models.checkpointing import CHECKPOINTINGS, offload_checkpoints
from nbhelpers.models.families import model_shape
from nbhelpers.models.frozen_base import apply_frozen_base
from nbhelpers.models.loading import ResolvedModel, build_resolved, count_parameters, resolve_model
from nbhelpers.models.lora_epilogue import fuse_lora_epilogues

from .config import RunConfig
from .engines import engine_of
from .env import environment, resolve_device, sync_device
from .metrics import model_flops, step_time_stats
from .profiled import profiled_epoch, trace_metrics
from .spread import spread_metrics
from .step import check_finite_losses, compute_dtype, config_examples, throughput_metrics
from .store import RunRecord, run_dir
from .trainer_args import model_init_settings

TRL_VERSIONS = ("trl", "transformers", "peft", "accelerate", "datasets", "liger-kernel")  # a TRL record's packages


class CountingCollator:
    """Wraps TRL's collator: keeps each batch's token counts, sequence lengths and shape, in order."""

    def __init__(self, collator: Any) -> None:
        self.collator = collator
        self.batches: list[tuple[Any, list[int], list[int]]] = []

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(examples)
        self.batches.append((count_tokens(batch), sequence_lengths(batch), list(batch["input_ids"].shape)))
        return batch


def epoch_timer(device: str) -> Any:
    """A TrainerCallback that times every epoch and step with device syncs and keeps every logged loss."""
    from transformers import TrainerCallback

    class EpochTimer(TrainerCallback):
        def __init__(self) -> None:
            self.epochs: list[float] = []
            self.steps: list[list[float]] = []
            self.spans: list[tuple[float, float]] = []  # each step's start and end (perf_counter)
            self.losses: list[float] = []
            self._epoch = self._step = 0.0

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync_device(device)
            self._epoch = time.perf_counter()
            self.steps.append([])

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync_device(device)
            self._step = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync_device(device)
            end = time.perf_counter()
            self.steps[-1].append(end - self._step)
            self.spans.append((self._step, end))

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            sync_device(device)
            self.epochs.append(time.perf_counter() - self._epoch)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    return EpochTimer()


def trainer_steps_per_epoch(trainer: Any) -> int:
    """Optimizer steps in one epoch of the trainer's own batches (its collator, padding-free or packed rows)."""
    batches = len(trainer.get_train_dataloader())
    return max(1, math.ceil(batches / max(1, int(trainer.args.gradient_accumulation_steps))))


def timed_epochs(config: RunConfig, steps_per_epoch: int, most: int = 20) -> int:
    """Timed epochs after the untimed one: enough for ``config.min_timed_steps`` steps (the workbook's floor,
    as its own epoch timing repeats passes), at most ``most``."""
    return max(1, min(most, math.ceil(config.min_timed_steps / max(1, steps_per_epoch))))


@dataclass(frozen=True)
class PeerSchedule:
    """Which optimizer steps of a peer's ``trainer.train()`` are timed: ``untimed`` steps, then ``timed`` ones;
    ``epochs``: the whole epochs they fill under epoch timing (TRL's ``num_train_epochs``), 0 under step timing
    (TRL stops at ``max_steps``, mid-epoch where it falls there)."""

    untimed: int
    timed: int
    epochs: int

    @property
    def max_steps(self) -> int:
        """The steps ``trainer.train()`` runs before any profiled epoch."""
        return self.untimed + self.timed


def peer_schedule(config: RunConfig, steps_per_epoch: int) -> PeerSchedule:
    """The workload's timing in a peer trainer's own steps: "epoch": one untimed epoch, then timed epochs up to the
    floor of timed steps; "steps": the workbook's first step and ``warmup`` steps untimed, then ``steps`` timed."""
    if config.timing == "steps":
        return PeerSchedule(untimed=1 + config.warmup, timed=config.steps, epochs=0)
    timed = timed_epochs(config, steps_per_epoch)
    return PeerSchedule(untimed=steps_per_epoch, timed=timed * steps_per_epoch, epochs=1 + timed)


def sft_config(
    config: RunConfig, device: str, output_dir: str, epochs: int = 2, **extra: Any
) -> tuple[Any, dict[str, Any]]:
    """The engine's SFTConfig plus the harness settings (``epochs`` in all, the first untimed; ``extra`` on top,
    e.g. ``max_steps``); returns it and the engine's own flags (recorded)."""
    from trl import SFTConfig

    flags, _ = engine_of(config.to_dict()).sft_flags(config.to_dict(), device)  # type: ignore[misc]
    flags = {k: v for k, v in flags.items() if k not in ("output_dir", "model_init_kwargs", "use_cpu")}
    for key in ("bf16", "seed"):  # the workload's dtype and seed, whatever the flags say
        flags.pop(key, None)
    return SFTConfig(**(harness_settings(config, device, output_dir, epochs) | flags | extra)), flags


def harness_settings(config: RunConfig, device: str, output_dir: str, epochs: int = 2) -> dict[str, Any]:
    """The SFTConfig settings a measurement needs whatever the engine: ``epochs`` in all (the first untimed), no
    checkpoints or reports, a loss every step, the workload's seed, dtype and device."""
    dtype = compute_dtype(config, device)
    return {
        "output_dir": output_dir, "num_train_epochs": epochs, "save_strategy": "no", "report_to": "none",
        "logging_strategy": "steps", "logging_steps": 1, "disable_tqdm": True, "seed": config.seed,
        "bf16": dtype in ("bf16", "bf16-autocast"), "use_cpu": device == "cpu",
    }  # fmt: skip


@dataclass
class BuiltTrainer:
    """TRL's SFTTrainer on a configuration's samples, as the export sets it up, and what a measurement reads."""

    trainer: Any
    model: Any
    attention: str
    engine: Any
    device: str
    dtype: str
    flags: dict[str, Any]  # the engine's own SFTConfig flags (recorded)


def sft_rows(config: RunConfig, resolved: ResolvedModel | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """The tokenizer and the workload's samples as TRL takes them (``input_ids``; ``labels`` with prompt -100).
    ``resolved``: the configuration's model, resolved once per measurement (default: resolved here)."""
    tokenizer = load_tokenizer((resolved or resolve_model(config.model)).source)
    examples = config_examples(config, tokenizer)
    return tokenizer, [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples]


def build_sft_trainer(
    config: RunConfig,
    output_dir: str,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    epochs: int = 2,
    resolved: ResolvedModel | None = None,
    **harness: Any,
) -> BuiltTrainer:
    """The configuration's SFTTrainer on ``rows`` (its engine's flags, the workload's seed, dtype and device; the
    export's own set-up of kernels a trainer has no flag for), writing only into ``output_dir``; ``harness`` adds
    SFTConfig settings (``max_steps``, ``logging_steps``). ``resolved``: the configuration's model, resolved once
    per measurement (default: resolved here)."""
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import SFTTrainer

    device = resolve_device(config.device)
    dtype = compute_dtype(config, device)
    torch.manual_seed(config.seed)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = True
    attention = model_init_settings(config.to_dict(), device)["attn_implementation"]
    engine = engine_of(config.to_dict())
    if engine.name != "trl":
        attention = "sdpa"  # TRL's own settings: transformers' default attention
    adapter = config.adapter_settings  # LoRA: a frozen base (bf16 on CUDA), PEFT's config handed to SFTTrainer
    prepare_attention(attention)
    resolved = resolved or resolve_model(config.model)
    model = build_resolved(resolved, attention, config.seed, weights_dtype(adapter, dtype, device), device, adapter)
    model = apply_frozen_base(model, adapter.frozen_base)  # NF4 as a 4-bit load in bf16 gives it, for SFTTrainer
    model.config.use_cache = False  # a training model: with a cache, packed rows attend across sequences
    if engine.name == "trl":  # the export's own set-up of kernels a trainer has no flag for (fla), as exported
        for part in model_setup_parts(config.kernels):
            part.apply(model, tuple(config.liger_kernels), device)
    args, flags = sft_config(config, device, output_dir, epochs, **harness)
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
        peft_config=peft_config(adapter),
    )  # fmt: skip
    if engine.name == "trl" and adapter.active and not adapter.cast_inputs:  # as the export does
        skip_input_casts(trainer.model)
    if engine.name == "trl" and adapter.fuse_epilogue:  # as the export does
        fuse_lora_epilogues(trainer.model, adapter.one_function)
    if engine.name == "trl" and CHECKPOINTINGS[config.activation_checkpointing].offloads:  # as the export does
        offload_checkpoints(trainer.model)
    trainer.remove_callback(PrinterCallback)  # the logs are kept in the records, not printed
    return BuiltTrainer(trainer, model, attention, engine, device, dtype, flags)


def measure_trl(
    config: RunConfig, notebook: str = "", progress: bool = False, resolved: ResolvedModel | None = None
) -> RunRecord:
    """Run TRL's SFTTrainer on the configuration's samples at its timing (:func:`peer_schedule`) and return its
    record. ``resolved``: its model, resolved once (default: resolved here)."""
    resolved = resolved or resolve_model(config.model)
    with tempfile.TemporaryDirectory(prefix="nbhelpers-trl-") as output_dir:  # TRL writes nothing we keep
        tokenizer, rows = sft_rows(config, resolved)
        built = build_sft_trainer(config, output_dir, tokenizer, rows, resolved=resolved)
        return timed_record(config, built, rows, notebook, TRL_VERSIONS)


@dataclass
class TimedSteps:
    """A peer run's timed steps as its callbacks and collator saw them: the timed batches (counts, lengths, shape),
    each timed step's seconds, the batches of a profiled epoch after them, how many of the run's steps are
    measured (untimed and timed: their losses are kept), the timed passes, and the wall clock around the steps."""

    batches: list[tuple[Any, list[int], list[int]]]
    seconds: list[float]
    profiled: list[tuple[Any, list[int], list[int]]]
    measured_steps: int
    passes: int
    wall: dict[str, float]


def timed_steps_of(
    schedule: PeerSchedule, timer: Any, batches: list[tuple[Any, list[int], list[int]]], accumulation: int,
    profiled_epochs: int,
) -> TimedSteps:
    """Slice what ``timer`` (:func:`epoch_timer`) and the counting collator saw by ``schedule``; raises where the
    trainer ran other steps or batches than the schedule asked (a record of other work is no record)."""
    if schedule.epochs:
        total = schedule.epochs + profiled_epochs
        if len(timer.epochs) != total or len(batches) % total:
            raise RuntimeError(f"expected {total} epochs of equal batches; got {len(timer.epochs)} epoch(s)")
        first, epochs = len(batches) // total, schedule.epochs
        seconds = [t for epoch in timer.steps[1:epochs] for t in epoch]
        timed = batches[first : first * epochs]
        wall = sum(timer.epochs[1:epochs])
        walls = {"first_epoch_s": timer.epochs[0], "timed_epoch_s": wall, "time_outside_steps_s": wall - sum(seconds),
                 "real_tokens_per_s_epoch_wall": sum(c.real for c, _, _ in timed) / wall}  # fmt: skip
        measured = sum(map(len, timer.steps[:epochs]))
        return TimedSteps(timed, seconds, batches[first * epochs :], measured, epochs - 1, walls)
    start, stop = schedule.untimed, schedule.max_steps
    if len(timer.spans) != stop or len(batches) < stop * accumulation:
        raise RuntimeError(f"expected {stop} steps of {accumulation} batch(es); TRL ran {len(timer.spans)} step(s) "
                           f"on {len(batches)} batch(es)")  # fmt: skip
    spans = timer.spans[start:stop]
    seconds = [end - begin for begin, end in spans]
    timed = batches[start * accumulation : stop * accumulation]  # a batch the loader fetched ahead is left out
    wall = spans[-1][1] - spans[0][0]
    walls = {"first_steps_s": spans[0][0] - timer.spans[0][0], "timed_wall_s": wall,
             "time_outside_steps_s": wall - sum(seconds),
             "real_tokens_per_s_wall": sum(c.real for c, _, _ in timed) / wall}  # fmt: skip
    return TimedSteps(timed, seconds, [], stop, 1, walls)


def timed_record(
    config: RunConfig, built: BuiltTrainer, rows: list[dict[str, Any]], notebook: str, versions: tuple[str, ...]
) -> RunRecord:
    """Train ``built`` at the workload's timing (:func:`peer_schedule`) and return its record, with the versions of
    ``versions`` (the packages its loop ran on); with ``config.profile`` (epoch timing), one more epoch after the
    timed ones whose first step is traced (:func:`~nbhelpers.measure.profiled.profiled_epoch`: the span of a step
    runs from one ``on_step_end`` to the next, so it holds the trainer's data loading and callbacks too). Call it
    inside the folder the trainer writes into."""
    trainer, model, args, flags = built.trainer, built.model, built.trainer.args, built.flags
    steps_per_epoch = trainer_steps_per_epoch(trainer)
    schedule = peer_schedule(config, steps_per_epoch)
    profiled_epochs = 1 if config.profile else 0  # one more epoch after the timed ones (epoch timing only)
    if schedule.epochs:
        args.num_train_epochs = schedule.epochs + profiled_epochs  # read by train()
    else:
        args.max_steps = schedule.max_steps
    device, dtype, attention, engine = built.device, built.dtype, built.attention, built.engine
    shape = model_shape(model.config)
    parameters = parameter_counts(trainer.model)
    counter = CountingCollator(trainer.data_collator)
    trainer.data_collator = counter
    timer = epoch_timer(device)
    trainer.add_callback(timer)
    profiler = (
        profiled_epoch(config, run_dir(config.run_name), device, schedule.epochs + 1, steps_per_epoch)
        if config.profile
        else None
    )
    if profiler is not None:
        trainer.add_callback(profiler)
    try:
        trainer.train()
    finally:  # a failed step leaves no profiler open in this process
        if profiler is not None and profiler.window is not None:
            profiler.window.stop()
    accumulation = int(args.gradient_accumulation_steps)
    steps = timed_steps_of(schedule, timer, counter.batches, accumulation, profiled_epochs)
    timed, profiled, step_seconds = steps.batches, steps.profiled, steps.seconds
    if len(step_seconds) * accumulation != len(timed):
        raise RuntimeError(
            f"timed {len(step_seconds)} steps of {accumulation} micro-batch(es) but TRL's collator made "
            f"{len(timed)} batches"
        )
    flop_terms = (parameters.frozen_matmul, parameters.adapter_matmul)
    flops = [model_flops(shape, lengths, *flop_terms) for _, lengths, _ in timed]
    losses = timer.losses[: steps.measured_steps]  # the profiled epoch's steps are not measured
    check_finite_losses([(f"step {n + 1}", v) for n, v in enumerate(losses)])
    dropped = sum(1 for r in rows if all(t == IGNORE_INDEX for t in r["labels"]))
    metrics: dict[str, Any] = {
        **step_time_stats(step_seconds),
        "step_times_s": step_seconds,
        "timed_passes": steps.passes,
        "timed_batch_shapes": [shape_ for _, _, shape_ in timed],
        **steps.wall,
        **throughput_metrics([c for c, _, _ in timed], sum(step_seconds), flops, device, dtype),
        "losses": losses,
        "loss_first": losses[0] if losses else float("nan"),
        "compute_dtype": dtype,
        "num_parameters": count_parameters(model),
        **parameters.metrics(),
        "timed_batches": len(timed),
        "timed_real_tokens": [c.real for c, _, _ in timed],
        **spread_metrics(
            [sum(c.real for c, _, _ in timed[i : i + accumulation]) for i in range(0, len(timed), accumulation)],
            step_seconds,
        ),
        "sft_config": flags,
        "attn_implementation_used": attention,
        "samples_without_loss_tokens": dropped,  # TRL drops them; the workbook trains on them (no loss)
        "engine": engine.name,
        "peer_versions": package_versions(versions),
    }
    artifacts: dict[str, str] = {}
    if profiler is not None:
        if profiler.trace is None:
            raise RuntimeError(f"the profiled epoch ({len(profiled)} batch(es)) wrote no trace")
        active = profiled[profiler.warmup * accumulation :][: config.profile_steps * accumulation]
        per_step = (
            sum(model_flops(shape, lengths, *flop_terms) for _, lengths, _ in active) * accumulation / len(active)
        )
        metrics.update(trace_metrics(profiler.trace, per_step, metrics["peak_flops"]))
        artifacts["trace"] = str(profiler.trace)
    return RunRecord(
        config=config.to_dict() | {"label": config.name},
        kind="step",
        notebook=notebook,
        metrics=metrics,
        environment=environment(device),
        artifacts=artifacts,
    )
