"""What one rank does differently: its process group, activation checkpointing, FSDP2 sharding, loss scaling.

The measured step (:mod:`nbhelpers.measure.step`) calls these; with one process and no sharding each is a
no-op, so a single-GPU configuration runs exactly as before. The launch and the merge of the ranks' records
live in :mod:`nbhelpers.measure.distributed`.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

from nbhelpers.models.checkpointing import CHECKPOINTINGS, offload_checkpoints, recomputed_layers


@dataclass(frozen=True)
class Rank:
    """This process's place in the world (rank 0 of 1 outside torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        """Started by torchrun (a process group exists or will), even with one process."""
        return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def current_rank() -> Rank:
    """The rank, world size and local rank torchrun set in the environment (0, 1, 0 without it)."""
    return Rank(
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
    )


def init_process_group(device: str, timeout_s: int) -> Rank:
    """Join torchrun's process group: NCCL on CUDA (this rank's GPU made current), gloo on a CPU."""
    import torch
    import torch.distributed as dist

    rank = current_rank()
    if device == "cuda":
        torch.cuda.set_device(rank.local_rank)
    if not dist.is_initialized():
        backend = "nccl" if device == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return rank


def check_world(gpus: int, rank: Rank) -> None:
    """The configuration's GPU count must be the world torchrun started."""
    if rank.world_size != gpus:
        raise RuntimeError(f"gpus={gpus} but torchrun started {rank.world_size} processes")


# -- activation checkpointing ----------------------------------------------------------------------------


def decoder_layers(model: Any) -> Any:
    """The ModuleList of decoder layers of a Hugging Face causal LM (``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no model.layers: cannot checkpoint or shard its decoder layers")
    return layers


def apply_checkpointing(model: Any, mode: str, every: int = 2) -> list[int]:
    """Turn on non-reentrant activation checkpointing in the chosen decoder layers; returns their indices.

    Uses transformers' own switch (``activation_checkpointing_enable``), which checkpoints a layer's
    ``forward`` inside FSDP2's hooks, then turns it off again in the layers not chosen. A mode that offloads
    (``"offload"``) also keeps each chosen layer's input in host memory until its recompute
    (:func:`nbhelpers.models.checkpointing.offload_checkpoints`).
    """
    layers = decoder_layers(model)
    chosen = recomputed_layers(len(layers), mode, every)
    if not chosen:
        return []
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x; older: gradient_...
    if enable is not None:
        enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for index, layer in enumerate(layers):
        layer.gradient_checkpointing = index in chosen
    if CHECKPOINTINGS[mode].offloads:
        offload_checkpoints(model)
    return chosen


# -- FSDP2 -----------------------------------------------------------------------------------------------


def shard_model(model: Any, compute_dtype: str) -> dict[str, Any]:
    """FSDP2: ``fully_shard`` on every decoder layer, then on the whole model (embedding, norm, lm head).

    Parameters are gathered in bf16 when the step computes in bf16 (fp32 on an fp32 step) and gradients
    are reduced in fp32. The lm head stays in the root group, so Liger's fused linear cross-entropy, which
    reads ``lm_head.weight`` inside the model's forward, sees the gathered weight, not a shard.
    """
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    param_dtype = torch.bfloat16 if compute_dtype in ("bf16", "bf16-autocast") else None
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    layers = decoder_layers(model)
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return {
        "sharded_layers": len(layers),
        "param_dtype": "bf16" if param_dtype is not None else "fp32",
        "reduce_dtype": "fp32",
    }


def prepare_model(model: Any, config: Any, compute_dtype: str) -> dict[str, Any]:
    """Checkpointing, then sharding, as the configuration asks; what was done, for the record."""
    done: dict[str, Any] = {}
    chosen = apply_checkpointing(model, config.activation_checkpointing, config.checkpoint_every)
    if chosen:
        done["checkpointed_layers"] = chosen
    if CHECKPOINTINGS[config.activation_checkpointing].offloads:
        done["checkpoints_offloaded"] = True  # the checkpointed layers' inputs in pinned host memory
    if config.sharding == "fsdp2":
        done.update(shard_model(model, compute_dtype))
    return done


# -- the step ----------------------------------------------------------------------------------------------


def global_loss_tokens(local_loss_tokens: int, rank: Rank, device: str) -> int:
    """Loss tokens of this step summed over every rank (an all-reduce; the local count with one process)."""
    if rank.world_size == 1:
        return local_loss_tokens
    import torch
    import torch.distributed as dist

    total = torch.tensor([local_loss_tokens], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return int(total.item())


def loss_scale(local_loss_tokens: int, global_tokens: int, world_size: int) -> float:
    """Factor on a rank's mean loss so FSDP's gradient average equals the gradient of the global token mean.

    FSDP averages gradients over ranks; a rank's loss is a mean over its own loss tokens. Scaling it by
    ``world_size * local / global`` weights every token equally, as one process with the whole step would.
    """
    if global_tokens <= 0:
        return 1.0
    return world_size * local_loss_tokens / global_tokens


def full_value(value: Any) -> Any:
    """A plain tensor from a DTensor (the gradient norm under FSDP2), anything else unchanged."""
    full_tensor = getattr(value, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else value


def barrier(rank: Rank) -> None:
    """Wait for every rank (nothing with one process)."""
    if rank.world_size > 1:
        import torch.distributed as dist

        dist.barrier()
