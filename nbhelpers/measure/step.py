"""The measured training step: build, warm up, time with device syncs, count tokens, compute MFU.

`measure(config)` runs in the current process (the runner calls it inside a subprocess) and returns
a RunRecord; it raises on failure and the caller turns the exception into a failed record.
"""

from __future__ import annotations

import contextlib
import math
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from nbhelpers.data.balance import rank_plan
from nbhelpers.data.collate import TokenCounts, collate, count_tokens, sequence_lengths, to_device
from nbhelpers.data.formats import DataError
from nbhelpers.data.loading import Example, load_examples
from nbhelpers.data.strategies import plan_batches
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.attention import half_precision_sdpa_guard, prepare_attention
from nbhelpers.kernels.backends import apply_backend
from nbhelpers.kernels.hybrid_paths import layer_paths
from nbhelpers.kernels.registry import family_kernel_refusal, uses_liger_switches
from nbhelpers.models.adapters import parameter_counts, trainable_parameters, weights_dtype, wrap_model
from nbhelpers.models.checkpointing import offload_prefetches, offloaded_bytes
from nbhelpers.models.families import BOUNDARIES_PACKING, POSITION_IDS_PACKING, model_shape
from nbhelpers.models.float8_cast import cast_mode
from nbhelpers.models.frozen_base import BF16_BASE, FrozenBaseUnavailable, frozen_base_refusal, frozen_stored_bytes
from nbhelpers.models.loading import ResolvedModel, build_resolved, check_positions, count_parameters, resolve_model
from nbhelpers.models.lora_epilogue import fused_layers
from nbhelpers.models.precision import MASTER_WEIGHTS

from .config import SHAPE_WARMUP, RunConfig
from .env import environment, peak_flops, resolve_device, sync_device
from .host_syncs import count_host_syncs
from .master_weights import make_optimizer
from .memory_plan import MemoryCapExceeded, cap_plan_refusal
from .metrics import mfu, model_flops, step_time_stats
from .parallel import Rank, full_value, global_loss_tokens, init_process_group, loss_scale, prepare_model
from .phases import PhaseClock
from .progress import report_progress
from .spread import spread_metrics
from .store import RunRecord, run_dir


def compute_dtype(config: RunConfig, device: str) -> str:
    """fp32 on CPU by default (bf16 autocast measured ~20x slower there); bf16 autocast on CUDA."""
    if config.dtype != "auto":
        return config.dtype
    return "fp32" if device == "cpu" else "bf16-autocast"


def packing_mode(config: RunConfig, resolved: ResolvedModel | None = None) -> str:
    """How this configuration's rows keep packed sequences apart (a key of ``PACKING_MODES``), '' when unpacked:
    the collator hands a packed row ``position_ids`` that restart at every sequence, and the sequence
    boundaries too where the model's family needs them (``BOUNDARIES_PACKING``). ``resolved``: the configuration's
    model, resolved once per measurement (default: resolved here)."""
    if not config.padding_settings.entry.packed:
        return ""
    boundaries = (resolved or resolve_model(config.model)).boundaries
    return BOUNDARIES_PACKING if boundaries else POSITION_IDS_PACKING


def config_examples(
    config: RunConfig, tokenizer: Any, num_samples: int | None = None, min_rows: int | None = None
) -> list[Example]:
    """The configuration's tokenized samples (its dataset, fields, format and max length): ``num_samples``
    (default: the configuration's), at least ``min_rows`` of them (default: one batch)."""
    return load_examples(
        config.dataset, tokenizer, config.num_samples if num_samples is None else num_samples, config.max_length,
        config.prompt_field, config.response_field, config.use_chat_template,
        data_format=config.data_format, prompt_template=config.prompt_template,
        min_rows=config.batch_size if min_rows is None else min_rows,
    )  # fmt: skip


def prepare_batches(
    config: RunConfig, tokenizer: Any, device: str, rank: Rank | None = None, resolved: ResolvedModel | None = None
) -> list[dict[str, Any]]:
    """The step batches on the device, in plan order: the whole plan when timing an epoch, else as many as
    the first step, warm-up and timed steps take (they cycle when the plan is shorter). With several ranks,
    this rank's share of each global step (balanced by tokens). ``resolved``: the configuration's model, whose
    family says whether packed rows carry their sequence boundaries (default: resolved here)."""
    examples = config_examples(config, tokenizer)
    settings = config.padding_settings
    lengths = [len(e["input_ids"]) for e in examples]
    rank = rank or Rank()
    if rank.world_size > 1:
        plan = rank_plan(lengths, settings, rank.rank, rank.world_size)
    else:
        plan = plan_batches(lengths, settings)
    needed = len(plan) if config.timing == "epoch" else min(1 + config.warmup + config.steps, len(plan))
    boundaries = (resolved or resolve_model(config.model)).boundaries  # a hybrid's: cu_seqlens and seq_idx
    collated = [collate([examples[i] for i in plan[step]], settings, tokenizer.pad_token_id, boundaries)
                for step in range(needed)]  # fmt: skip
    check_loss_tokens(config, [plan[step] for step in range(needed)], [count_tokens(b).loss for b in collated])
    return [to_device(tensors, device) for tensors in collated]


def check_loss_tokens(config: RunConfig, rows: Sequence[Sequence[int]], loss_tokens: Sequence[int]) -> None:
    """DataError, before any weights load, when a batch the measurement steps on keeps no loss token.

    Its loss would be a mean over no tokens (NaN), and that NaN's gradient poisons the weights for every later
    step, so the configuration fails with the cause named rather than with "non-finite loss" after the first
    step. Skipping such a batch would time other samples than a strategy whose batches differ, so it is refused
    whether one batch lacks loss tokens or all do. An example without loss tokens that shares its batch with one
    that has some is trained on (the loader warns of it). ``rows``: the example indices of each batch (0-based);
    ``loss_tokens``: each batch's loss tokens."""
    empty = [n for n, count in enumerate(loss_tokens) if count == 0]
    if not empty:
        return
    first = empty[0]
    which = "the first step's batch" if first == 0 else f"batch {first + 1}"
    shown = ", ".join(str(i + 1) for i in rows[first][:8]) + (", ..." if len(rows[first]) > 8 else "")
    raise DataError(
        f"dataset={config.dataset!r}: {which} (rows {shown}) has no loss tokens after truncation to "
        f"max_length={config.max_length} ({len(empty)} of {len(loss_tokens)} batches have none): its loss would be "
        "NaN, a mean over no tokens; raise max_length (MAX_LENGTH, --max-length) so the responses fit, or use "
        "data with shorter prompts"
    )


def batch_shape(batch: dict[str, Any]) -> tuple[Any, ...]:
    """What a compiled kernel, an autotuner or a cuDNN plan may key on: the row shape, and for packed rows with
    their boundaries the number of sequences."""
    boundaries = batch.get("cu_seq_lens_q")
    return (tuple(batch["input_ids"].shape), None if boundaries is None else int(boundaries.numel()))


def step_schedule(
    config: RunConfig, num_batches: int, shapes: Sequence[Any] | None = None
) -> tuple[list[int], list[int]]:
    """Batch indices of the untimed steps after the first one, and of the first timed pass.

    "steps": ``warmup`` batches, then one more untimed step for each batch shape (``shapes``: one per batch) of
    the timed steps that the first step and the warm-up did not see, so no timed step pays a first call of its
    shape; then ``steps`` batches (indices cycle over the plan). "epoch": the rest of one pass over every batch
    (each shape seen once), then one whole pass timed (repeated by :func:`timed_passes`), so every strategy is
    timed on the same samples whatever its plan's order and number of steps.
    """
    if config.timing == "epoch":
        return list(range(1, num_batches)), list(range(num_batches))
    untimed = list(range(1, 1 + config.warmup))
    timed = list(range(1 + config.warmup, 1 + config.warmup + config.steps))
    if shapes is not None:
        seen = {shapes[0]} | {shapes[i % num_batches] for i in untimed}
        for i in timed:
            if (shape := shapes[i % num_batches]) not in seen:
                untimed.append(i)
                seen.add(shape)
    return untimed, timed


def unseen_shapes(shapes: Sequence[Any], untimed: Sequence[int], timed: Sequence[int]) -> set[Any]:
    """The shapes of timed batches that neither the first step nor an untimed one saw (empty: warm-up covered
    every shape)."""
    n = len(shapes)
    return {shapes[i % n] for i in timed} - {shapes[i % n] for i in [0, *untimed]}


def timed_passes(
    step: Callable[[dict[str, Any]], tuple[Any, Any]],
    batch_at: Callable[[int], dict[str, Any]],
    first_pass: Sequence[int],
    device: str,
    config: RunConfig,
    progress: str = "",
) -> tuple[list[float], list[Any], list[int]]:
    """The timed steps: ``first_pass``, and with epoch timing more passes over the same batches until
    ``config.min_timed_steps`` steps are timed or one more pass would take the timed seconds past
    ``config.timing_cap_s``. The seconds and loss of each step, and its batch index."""
    times, losses = timed_steps(step, batch_at, first_pass, device, progress, "timed pass 1")
    indices = list(first_pass)
    passes = 1
    while config.timing == "epoch" and len(times) < config.min_timed_steps:
        if sum(times) * (passes + 1) / passes > config.timing_cap_s:
            break
        more_times, more_losses = timed_steps(step, batch_at, first_pass, device, progress, f"timed pass {passes + 1}")
        times += more_times
        losses += more_losses
        indices += first_pass
        passes += 1
    return times, losses, indices


def make_step(
    model: Any, optimizer: Any, dtype: str, device: str, rank: Rank | None = None
) -> Callable[[dict[str, Any]], tuple[float, float]]:
    """One optimizer step on a batch; returns (loss, gradient norm) as tensors-in-flight-free floats.

    With several ranks the loss a rank returns is its own token mean, and its backward is scaled so the
    averaged gradient is the whole step's token mean (:func:`nbhelpers.measure.parallel.loss_scale`)."""
    import torch

    rank = rank or Rank()
    world = rank.world_size

    def autocast() -> Any:
        if dtype == "bf16-autocast":
            return torch.autocast(device_type=device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(batch: dict[str, Any]) -> tuple[Any, Any]:
        with autocast(), half_precision_sdpa_guard(device, dtype):
            loss = model(**batch).loss
        if world > 1:
            local = count_tokens(batch).loss
            (loss * loss_scale(local, global_loss_tokens(local, rank, device), world)).backward()
        else:
            loss.backward()
        grad_norm = full_value(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf")))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach(), grad_norm.detach()

    return step


def timed_steps(
    step: Callable[[dict[str, Any]], tuple[Any, Any]],
    batch_at: Callable[[int], dict[str, Any]],
    indices: Sequence[int],
    device: str,
    progress: str = "",
    phase: str = "timed",
) -> tuple[list[float], list[Any]]:
    """Each batch's step between two device syncs: the seconds of each and its loss (a tensor in flight).
    ``progress``: a bar's description (none when empty); ``phase``: what each step reports to the process that
    started this one (:func:`nbhelpers.measure.progress.report_progress`)."""
    iterator: Any = indices
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(indices, desc=progress, file=sys.stderr)
    times, losses = [], []
    for n, i in enumerate(iterator):
        b = batch_at(i)
        sync_device(device)
        start = time.perf_counter()
        loss, _ = step(b)
        sync_device(device)
        times.append(time.perf_counter() - start)
        losses.append(loss)
        report_progress(phase, n + 1, len(indices))
    return times, losses


def build_for(config: RunConfig, resolved: ResolvedModel, device: str, dtype: str) -> Any:
    """The configuration's model in training mode: its attention implementation registered with transformers
    where it needs that, random weights for a preset (bf16 weights for dtype "bf16", and for an adapter's frozen
    base on CUDA), refused at once when its family cannot run the configuration's kernels or packing. An adapter
    wraps it later, after the kernel backend (``models.adapters.wrap_model``)."""
    switches = liger_switches_of(config)
    packing = packing_mode(config, resolved)
    family_kernels = family_kernel_refusal(resolved.family, config.kernels) if resolved.family else ""
    if refusal := family_kernels or resolved.refusal(kernels=config.kernels, packing=packing, liger_kernels=switches):
        raise ValueError(f"model={config.model!r}: {refusal}")  # before minutes of building
    prepare_attention(config.attn_implementation)
    adapter = config.adapter_settings
    dtypes = weights_dtype(adapter, dtype, device)
    model = build_resolved(resolved, config.attn_implementation, config.seed, dtypes, device, adapter)
    model.train()
    return model


def adapter_input_cast(config: RunConfig) -> str:
    """What the record says of PEFT's cast of each adapted layer's input: "peft" (cast to the fp32 adapters),
    "skipped" (left in bf16 for autocast), "" without an adapter."""
    adapter = config.adapter_settings
    return "" if not adapter.active else "peft" if adapter.cast_inputs else "skipped"


def liger_switches_of(config: RunConfig) -> tuple[str, ...]:
    """The Liger switches the configuration turns on: its ``liger_kernels`` when its backend runs Liger."""
    return tuple(config.liger_kernels) if uses_liger_switches(config.kernels) else ()


def peak_memory_gib(device: str) -> tuple[float, str]:
    """Peak memory of this process: CUDA allocator peak, or peak resident set size on CPU."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**30, "torch.cuda.max_memory_allocated"
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 2**20, "peak RSS of the process (ru_maxrss)"


def throughput_metrics(
    counts: Sequence[TokenCounts], total_time: float, flops: Sequence[float], device: str, dtype: str
) -> dict[str, Any]:
    """Per-step token counts, real tokens and positions per second, MFU and peak memory of a timed pass."""
    real = sum(c.real for c in counts)
    positions = sum(c.positions for c in counts)
    peak = peak_flops(device, dtype)
    memory, memory_source = peak_memory_gib(device)
    return {
        "positions_per_step": positions / len(counts),
        "real_tokens_per_step": real / len(counts),
        "loss_tokens_per_step": sum(c.loss for c in counts) / len(counts),
        "padding_fraction": 1 - real / positions,
        "real_tokens_per_s": real / total_time,
        "positions_per_s": positions / total_time,
        "model_flops_per_step": sum(flops) / len(flops),
        "mfu": mfu(sum(flops), total_time, peak.flops_per_s),
        "peak_flops": peak.flops_per_s,
        "peak_flops_source": peak.source,
        "peak_memory_gib": memory,
        "peak_memory_source": memory_source,
    }


def allocator_stats(device: str) -> dict[str, int]:
    """CUDA caching-allocator counters: retries (cache flushes under memory pressure) and raw cudaMallocs."""
    if device != "cuda":
        return {}
    import torch

    stats = torch.cuda.memory_stats()
    return {
        "cuda_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "cuda_device_allocs": int(stats.get("num_device_alloc", 0)),
        "cuda_device_frees": int(stats.get("num_device_free", 0)),
    }


class NonFiniteLoss(ArithmeticError):
    """A step's loss (or gradient norm) was NaN or infinite: the configuration computes garbage, so it failed."""


def check_finite_losses(values: list[tuple[str, float]]) -> None:
    """NonFiniteLoss naming the steps whose value is NaN or infinite (the reason of the failed record)."""
    bad = [f"{name} {value}" for name, value in values if not math.isfinite(value)]
    if bad:
        more = f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
        raise NonFiniteLoss(f"non-finite loss: {', '.join(bad[:4])}{more}")


def offload_and_cast_metrics(model: Any, config: RunConfig, device: str, steps_run: int) -> dict[str, Any]:
    """What offloaded checkpoints moved to the host a step (and how many copies back started early), and how a
    float8 base cast its GEMMs' operands on a GPU (``NBHELPERS_FLOAT8_CAST``); nothing for a step that does
    neither."""
    metrics: dict[str, Any] = {}
    if moved := offloaded_bytes(model):
        metrics["checkpoint_offload_gib_per_step"] = moved / 2**30 / steps_run
        metrics["checkpoint_prefetches_per_step"] = offload_prefetches(model) / steps_run
    if device == "cuda" and config.frozen_base != BF16_BASE:
        from nbhelpers.models.float8_linear import float8_layers

        if float8_layers(model):
            metrics["float8_cast"] = cast_mode()
    return metrics


def measure(
    config: RunConfig, notebook: str = "", progress: bool = False, resolved: ResolvedModel | None = None
) -> RunRecord:
    """Run warmup + timed steps of one configuration and return its record (raises on failure). ``resolved``: its
    model, resolved once for the whole measurement (default: resolved here)."""
    import torch

    phases = PhaseClock()  # where the measurement's wall time goes (metrics["phase_s"])
    device = resolve_device(config.device)
    if why := frozen_base_refusal(config.frozen_base, device):  # before any data or weights: the record says why
        raise FrozenBaseUnavailable(why)
    dtype = compute_dtype(config, device)
    rank = init_process_group(device, config.timeout_s) if config.sharding != "none" else Rank()
    torch.manual_seed(config.seed)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = True
    resolved = resolved or resolve_model(config.model)  # once: source, config, family and packing of the model
    check_positions(resolved.config, config.max_length)  # before any data or weights load
    if config.gpu_memory_gib and (why := cap_plan_refusal(config, resolved.shape())):  # planned over its cap
        raise MemoryCapExceeded(why)
    tokenizer = load_tokenizer(resolved.source)
    batches = prepare_batches(config, tokenizer, device, rank, resolved)
    phases.lap("data")
    report_progress("building the model", 0, 0)
    build_start = time.perf_counter()
    model = build_for(config, resolved, device, dtype)
    sync_device(device)
    model_build_s = time.perf_counter() - build_start
    shape = model_shape(model.config)
    num_parameters = count_parameters(model)
    parallel = prepare_model(model, config, dtype)
    report = apply_backend(model, config.kernels, config.liger_kernels, device)
    model = wrap_model(model, config.adapter_settings)  # after the kernels: they run inside the adapted model
    parameters = parameter_counts(model)
    master = dtype == MASTER_WEIGHTS  # bf16 weights stepped through fp32 master copies
    optimizer = make_optimizer(trainable_parameters(model), master, config.learning_rate, device)
    step = make_step(model, optimizer, dtype, device, rank)
    phases.lap("build")

    def batch(i: int) -> dict[str, Any]:
        return batches[i % len(batches)]

    sync_device(device)
    report_progress("first step (compiles, autotunes)", 0, 1)
    start = time.perf_counter()
    first_loss, first_grad_norm = step(batch(0))
    sync_device(device)
    first_step_s = time.perf_counter() - start
    phases.lap("first_step")
    # One rank alone may add warm-up steps for its shapes; several must step together (a collective each step).
    shapes = [batch_shape(b) for b in batches]
    warms_shapes = rank.world_size == 1 and config.extra.get(SHAPE_WARMUP, True)
    untimed, first_pass = step_schedule(config, len(batches), shapes if warms_shapes else None)
    untimed_times, untimed_losses = timed_steps(step, batch, untimed, device, phase="untimed")
    phases.lap("untimed")
    label = f"timing {config.name}" if progress else ""
    times, timed_losses, timed = timed_passes(step, batch, first_pass, device, config, label)
    phases.lap("timed")
    losses = [float(first_loss)] + [float(v) for v in timed_losses]
    counts = [count_tokens(batch(i)) for i in timed]
    flop_terms = (parameters.frozen_matmul, parameters.adapter_matmul)  # LoRA: no weight gradients of a frozen base
    flops = [model_flops(shape, sequence_lengths(batch(i)), *flop_terms) for i in timed]
    timed_shapes = [list(batch(i)["input_ids"].shape) for i in timed]
    check_finite_losses(
        [("first step", float(first_loss)), ("first step gradient norm", float(first_grad_norm))]
        + [(f"untimed step {n + 1}", float(v)) for n, v in enumerate(untimed_losses)]
        + [(f"timed step {n + 1}", v) for n, v in enumerate(losses[1:])]
    )
    allocator = allocator_stats(device)
    metrics: dict[str, Any] = {
        **offload_and_cast_metrics(model, config, device, 1 + len(untimed) + len(timed)),
        **step_time_stats(times),
        "step_times_s": times,
        "timed_batch_shapes": timed_shapes,
        "untimed_step_times_s": untimed_times,
        "timed_passes": len(timed) // len(first_pass),
        "timed_shapes_unwarmed": len(unseen_shapes(shapes, untimed, timed)),
        **spread_metrics([c.real for c in counts], times),
        "first_step_s": first_step_s,
        **throughput_metrics(counts, sum(times), flops, device, dtype),
        "loss_first": float(first_loss),
        "grad_norm_first": float(first_grad_norm),
        "losses": losses,
        "compute_dtype": dtype,
        "num_parameters": num_parameters,
        **parameters.metrics(),
        "frozen_base": config.frozen_base,
        "frozen_base_bytes": frozen_stored_bytes(model),  # the frozen parameters as stored (quantization state in)
        "model_build_s": model_build_s,
        "lora_input_cast": adapter_input_cast(config),
        "lora_fused_epilogues": fused_layers(model),  # LoRA linears adding their product in the GEMM
        "lora_function_layers": fused_layers(model, one_function=True),  # ... of them as one autograd function
        "flop_parameters": shape.flop_parameters,
        "patch_report": report,
        "layer_paths": layer_paths(model),  # a hybrid's per-layer implementations, read off the live model
        "timed_batches": len(counts),
        "real_tokens_per_s_median_step": statistics.median(c.real / t for c, t in zip(counts, times)),
        **allocator,
        "world_size": rank.world_size,
        "rank": rank.rank,
        "parallel": parallel,
        "loss_tokens_first": count_tokens(batch(0)).loss,
        "timed_real_tokens": [c.real for c in counts],
        "timed_loss_tokens": [c.loss for c in counts],
        "timed_flops": flops,
    }
    artifacts: dict[str, str] = {}
    if config.profile:
        from .profiled import capture_and_summarize

        first_timed = timed[0]
        profiled = flops[: config.profile_steps]
        profiled_flops = sum(profiled) / len(profiled)
        trace_path, summary = capture_and_summarize(
            lambda i: step(batch(i)), config, run_dir(config.run_name), device, profiled_flops, metrics["peak_flops"],
            first_active_batch=first_timed,
        )  # fmt: skip
        artifacts["trace"] = str(trace_path)
        metrics.update(summary | count_host_syncs(lambda: step(batch(first_timed)), device))  # one more step
        phases.lap("profile")
    where = environment(device)
    phases.lap("environment")
    metrics["phase_s"] = phases.laps
    return RunRecord(
        config=config.to_dict() | {"label": config.name},
        kind="step",
        notebook=notebook,
        metrics=metrics,
        environment=where,
        artifacts=artifacts,
    )
