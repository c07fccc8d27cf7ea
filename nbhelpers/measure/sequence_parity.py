"""A batching-invariant parity probe: per-sequence summed losses and the gradient of their total.

The probe takes the workload's first :data:`PROBE_SAMPLES` samples (the same set for every strategy),
batches them as the configuration's strategy does (:func:`~nbhelpers.data.strategies.plan_batches` and
:func:`~nbhelpers.data.collate.collate` on that set), and runs forward + backward on each batch with a
token-sum loss, accumulating gradients. The model is called exactly as the timed step calls it, and its mean
loss is multiplied by the batch's loss tokens: the sum of per-token cross-entropy, no per-batch mean (passing
``num_items_in_batch`` instead would change the graph a whole-model compile traced, and compile it again). The
total loss and the gradient of the total then do not depend on how the sequences are grouped, so a padded, packed,
token-budget or bucketed configuration can be compared with the static baseline sequence by sequence.

When it runs: after the timed steps, on a model rebuilt with the same seed, the same kernels and the same
attention (:func:`parity_probe`, called by the worker). The timed measurement is untouched (its compile
caches, shapes seen, peak memory and first-step time are recorded before the probe starts), and no
optimizer step has touched the rebuilt weights. The cost is one more model build plus a forward and backward
over a few sequences. A compiled backend's padded batches are filled up to the timed step's ``batch_size`` rows
with rows that carry no labels (:func:`filled_rows`), so the probe reuses the graph the timed steps compiled
rather than compiling another for a smaller batch: the filler adds exact zeros to the loss and the gradients.

Where the model returns no logits (Liger's fused linear cross-entropy in training mode), only the total
and the gradients are recorded, and the probe says so.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Sequence
from typing import Any

from nbhelpers.data.collate import collate, count_tokens, to_device
from nbhelpers.data.contamination import BROKEN_MODES, sequence_ids
from nbhelpers.data.loading import IGNORE_INDEX, Example
from nbhelpers.data.strategies import PaddingSettings, plan_batches
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.backends import apply_backend
from nbhelpers.kernels.registry import kernel_backend
from nbhelpers.models.adapters import wrap_model
from nbhelpers.models.loading import ResolvedModel, resolve_model

from .config import RunConfig
from .env import resolve_device
from .parallel import apply_checkpointing
from .step import build_for, compute_dtype, config_examples

PROBE_SAMPLES = 6  # the first samples of the workload; config.extra["parity_probe_samples"] overrides (0 = off)
PROBE_VERSION = 1
CE_CHUNK = 4096  # positions per cross-entropy chunk: bounds the float copy of the logits on a long packed row
LOSS_PATH_TOLERANCE = 1e-3  # the model's loss times its loss tokens must equal the sum of per-token CE
FINGERPRINT_TENSORS = 4  # gradient norms of this many named parameters (first, last, evenly between)
NO_LOGITS_NOTE = "no logits from the model (fused linear cross-entropy): total and gradients only"
METHOD = "after timing, on a model rebuilt with the same seed, kernels and attention; no optimizer step"


def probe_size(config: RunConfig) -> int:
    """How many samples the probe takes: ``extra["parity_probe_samples"]`` or PROBE_SAMPLES, at most num_samples."""
    wanted = config.extra.get("parity_probe_samples", PROBE_SAMPLES)
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 0:
        raise ValueError(f"extra['parity_probe_samples']={wanted!r}: a whole number >= 0 (0 = no probe)")
    return min(wanted, config.num_samples)


def probe_plan(examples: Sequence[Example], settings: PaddingSettings) -> list[list[int]]:
    """The strategy's batches of these examples (indices into ``examples``), planned on this set alone."""
    return plan_batches([len(e["input_ids"]) for e in examples], settings)


def filled_rows(batch: dict[str, Any], rows: int) -> dict[str, Any]:
    """A padded batch grown to ``rows`` rows with copies of its first row whose labels are all ignored (so they
    add nothing to a token-sum loss or its gradients); a batch that has the rows already is returned as it is."""
    import torch

    missing = rows - batch["input_ids"].shape[0]
    if missing <= 0:
        return batch
    grown = {}
    for key, tensor in batch.items():
        extra = tensor[:1].expand(missing, *tensor.shape[1:])
        grown[key] = torch.cat([tensor, torch.full_like(extra, IGNORE_INDEX) if key == "labels" else extra])
    return grown


def _row_sequence_ids(batch: dict[str, Any], packed: bool) -> Any:
    """Per row and position, the index (within the batch) of the sequence it belongs to."""
    import torch

    if packed:
        return sequence_ids(batch["position_ids"]).reshape(batch["input_ids"].shape)
    rows, width = batch["input_ids"].shape
    return torch.arange(rows, device=batch["input_ids"].device).unsqueeze(1).expand(rows, width)


def sequence_loss_sums(logits: Any, labels: Any, ids: Any, count: int) -> tuple[list[float], list[int]]:
    """Summed next-token cross-entropy and loss-token count of each of ``count`` sequences of a batch.

    The prediction at position t is for label t+1 and belongs to the sequence of position t+1 (``ids``
    as :func:`_row_sequence_ids`); cross-entropy runs in float, CE_CHUNK positions at a time.
    """
    import torch

    sums = torch.zeros(count, dtype=torch.float64, device=labels.device)
    tokens = torch.zeros(count, dtype=torch.long, device=labels.device)
    with torch.no_grad():
        for row in range(labels.shape[0]):
            for start in range(0, labels.shape[1] - 1, CE_CHUNK):
                stop = min(start + CE_CHUNK, labels.shape[1] - 1)
                target = labels[row, start + 1 : stop + 1]
                valid = target != IGNORE_INDEX
                if not bool(valid.any()):
                    continue
                ce = torch.nn.functional.cross_entropy(
                    logits[row, start:stop].float(), target, reduction="none", ignore_index=IGNORE_INDEX
                )
                owner = ids[row, start + 1 : stop + 1][valid]
                sums.index_add_(0, owner, ce[valid].double())
                tokens.index_add_(0, owner, torch.ones_like(owner))
    return sums.tolist(), tokens.tolist()


def _broken(batch: dict[str, Any], broken: str) -> dict[str, Any]:
    """A packed batch with its sequence boundaries broken on purpose (see contamination.BROKEN_MODES)."""
    import torch

    if broken not in BROKEN_MODES:
        raise ValueError(f"broken={broken!r}: one of '', " + ", ".join(repr(m) for m in BROKEN_MODES))
    if "position_ids" not in batch:
        return batch  # padded rows have no boundary inside a row to break
    inputs = dict(batch)
    if broken == "mask_ignored":
        inputs["attention_mask"] = torch.ones_like(batch["input_ids"])
    elif broken == "continuous_positions":
        inputs["position_ids"] = torch.arange(batch["input_ids"].shape[-1], device=batch["input_ids"].device)[None]
    else:  # cache_on
        inputs["use_cache"] = True
    return inputs


def _fingerprint_names(model: Any) -> list[str]:
    """A few parameters spread over the model (first, last and evenly between), by name."""
    names = [name for name, p in model.named_parameters() if p.requires_grad]
    if len(names) <= FINGERPRINT_TENSORS:
        return names
    step = (len(names) - 1) / (FINGERPRINT_TENSORS - 1)
    return [names[round(i * step)] for i in range(FINGERPRINT_TENSORS)]


def _accumulate(
    model: Any,
    examples: Sequence[Example],
    plan: list[list[int]],
    settings: PaddingSettings,
    pad_token_id: int,
    dtype: str,
    device: str,
    broken: str,
    boundaries: bool = False,
    fill_rows: int = 0,
) -> tuple[float, list[float] | None, list[int] | None]:
    """Forward + backward of every batch of the plan (gradients add up): total loss, per-sequence sums, tokens."""
    import torch

    sums: list[float] = [math.nan] * len(examples)
    counts: list[int] = [0] * len(examples)
    total, has_logits = 0.0, True
    for indices in plan:
        batch = collate([examples[i] for i in indices], settings, pad_token_id, boundaries)
        if fill_rows and not settings.entry.packed:
            batch = filled_rows(batch, fill_rows)
        tokens = count_tokens(batch).loss
        if tokens == 0:  # nothing to predict: no loss and no gradient (a mean over no tokens is not a number)
            for index in indices:
                sums[index], counts[index] = 0.0, 0
            continue
        batch = to_device(batch, device)
        inputs = _broken(batch, broken) if broken else batch
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=dtype == "bf16-autocast"):
            output = model(**inputs)  # as the timed step calls it: its graph, its mean loss
        token_sum = output.loss * tokens
        token_sum.backward()
        loss = float(token_sum.detach())
        total += loss
        if output.logits is None:
            has_logits = False
            continue
        ids = _row_sequence_ids(batch, settings.entry.packed)
        batch_sums, batch_counts = sequence_loss_sums(output.logits.detach(), batch["labels"], ids, len(indices))
        del output
        summed = math.fsum(batch_sums)
        if math.isfinite(loss) and abs(summed - loss) > LOSS_PATH_TOLERANCE * max(abs(summed), 1.0):
            raise RuntimeError(
                f"the model's loss times the batch's {tokens} loss tokens ({loss:.6g}) is not the sum of its "
                f"per-token cross-entropy ({summed:.6g}): its loss is not a mean over the loss tokens, so the "
                "probe cannot take a token-sum loss"
            )
        for position, index in enumerate(indices):
            sums[index], counts[index] = batch_sums[position], batch_counts[position]
    return total, (sums if has_logits else None), (counts if has_logits else None)


def gradient_norm(model: Any) -> float:
    """The norm of all the model's gradients, summed in fp32: bf16 parameters' gradients would give a bf16 norm,
    whose 8 mantissa bits hide relative differences below 0.4%, too coarse to compare two kernels by."""
    import torch

    norms = [torch.linalg.vector_norm(p.grad, dtype=torch.float32) for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def run_probe(
    model: Any,
    examples: Sequence[Example],
    settings: PaddingSettings,
    pad_token_id: int,
    dtype: str = "fp32",
    device: str = "cpu",
    broken: str = "",
    boundaries: bool = False,
    fill_rows: int = 0,
) -> dict[str, Any]:
    """Forward + backward of ``examples`` batched as ``settings`` does, with a token-sum loss.

    Returns the per-sequence summed losses and loss-token counts (None without logits), the total loss,
    the gradient norm of the total and a few named parameters' gradient norms. Gradients are reset
    before and after (also when it raises); nothing else of the model changes. ``broken`` mixes packed
    sequences on purpose; ``boundaries`` hands packed rows their cu_seqlens (a hybrid's family needs them);
    ``fill_rows`` grows each padded batch to that many rows (:func:`filled_rows`; 0: as planned).
    """
    plan = probe_plan(examples, settings)
    model.zero_grad(set_to_none=True)
    try:
        total, sums, counts = _accumulate(
            model, examples, plan, settings, pad_token_id, dtype, device, broken, boundaries, fill_rows
        )
        grad_norm = gradient_norm(model)
        named = dict(model.named_parameters())
        fingerprint = {
            name.replace("_orig_mod.", ""): float(named[name].grad.float().norm())
            for name in _fingerprint_names(model)
            if named[name].grad is not None
        }
    finally:
        model.zero_grad(set_to_none=True)
    return {
        "batches": plan,
        "sequence_loss_sums": sums,
        "sequence_loss_tokens": counts,
        "total_loss": total,
        "grad_norm": grad_norm,
        "param_grad_norms": fingerprint,
        "note": "" if sums is not None else NO_LOGITS_NOTE,
        "broken": broken,
        "filled_to_rows": 0 if settings.entry.packed else fill_rows,
    }


def _free_device_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


def probe_fill_rows(config: RunConfig) -> int:
    """Rows the probe fills a padded batch to: the timed step's ``batch_size`` for a backend that compiles with
    torch.compile (so the probe meets the shape it compiled), 0 for any other."""
    return config.padding_settings.batch_size if "inductor" in kernel_backend(config.kernels).caches else 0


def parity_probe(config: RunConfig, resolved: ResolvedModel | None = None) -> dict[str, Any] | None:
    """The probe of one configuration, as stored in ``metrics["parity_probe"]`` (None when switched off).

    Builds the model again with the configuration's seed, kernels and attention (see the module's
    docstring for why after timing), in train mode as the timed step runs it. Raises on failure.
    ``resolved``: the model the timed step resolved (default: resolved here).
    """
    import torch

    size = probe_size(config)
    if size == 0:
        return None
    start = time.perf_counter()
    device = resolve_device(config.device)
    dtype = compute_dtype(config, device)
    _free_device_memory(device)
    resolved = resolved or resolve_model(config.model)
    tokenizer = load_tokenizer(resolved.source)
    examples = config_examples(config, tokenizer, num_samples=size, min_rows=0)
    model = build_for(config, resolved, device, dtype)
    # checkpointed as the timed step was (the 27B reference path's probe runs out of memory without it)
    apply_checkpointing(model, config.activation_checkpointing, config.checkpoint_every)
    apply_backend(model, config.kernels, config.liger_kernels, device)
    model = wrap_model(model, config.adapter_settings)  # the same adapted model as the timed step's
    torch.manual_seed(config.seed)
    result = run_probe(
        model, examples, config.padding_settings, tokenizer.pad_token_id, dtype, device, "", resolved.boundaries,
        probe_fill_rows(config),
    )  # fmt: skip
    del model
    _free_device_memory(device)
    return {
        "version": PROBE_VERSION,
        "samples": list(range(len(examples))),
        **result,
        "compute_dtype": dtype,
        "method": METHOD,
        "probe_s": time.perf_counter() - start,
    }
