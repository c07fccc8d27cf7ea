"""Predicted per-GPU memory of a training step: parameters, gradients, optimizer state, activations, logits.

For a model shape (:class:`nbhelpers.models.shape.ModelShape`, from ``families.model_shape``), a GPU count,
weights dtype, sharding, activation checkpointing, fused kernels and tokens per GPU, :func:`plan_memory` says how
many bytes each part takes on one GPU and whether the sum fits. The figure predicted is the CUDA
allocator's peak (``torch.cuda.max_memory_allocated``, what records keep), not the CUDA context. It plans for
the GPU a configuration names (``RunConfig.gpu_memory_gib``) when it names one (:func:`capacity_gib`), and
:func:`cap_plan_refusal` refuses a configuration whose planned peak exceeds that cap before any work.

The arithmetic, per GPU (P parameters, w bytes per stored weight, S = GPUs when sharded by FSDP2 else 1):
parameters P*w/S, gradients P*w/S, AdamW's two moments 2*P*w/S (torch keeps them in the weights' dtype);
with FSDP2 the gathered bf16 copies of the root group (embedding, final norm, lm head) and of two decoder
layers (the running one and the prefetched one) plus one layer's unsharded fp32 gradient; without sharding,
fp32 weights under bf16 autocast add autocast's cached bf16 copy of every matmul weight. Activations count
the tensors each decoder layer saves for backward per token (:func:`layer_activation_bytes`); a checkpointed
layer saves only its input (on the host when offloaded: :func:`host_offload_bytes`, with two back on the device at
a time, the one recomputed and the next, prefetched), and one checkpointed layer is recomputed at a time. Logits
cost tokens x vocabulary x bytes per element of the loss path (:data:`LOSS_BYTES_PER_LOGIT`). The activation counts are
an estimate of what transformers' eager modules save, with two coefficients (the RMSNorm copies and the
plain loss's bytes per logit) set against the shipped single-H200 records of the 1.7B shape: on those 37
records it is within 12% (``nbhelpers.analysis.memory_plan.planned_vs_measured``; tests/analysis/test_memory_plan.py
keeps it so). Sharded and checkpointed runs are checked the same way by notebook 05 and
``nbhelpers bench qwen3-8b/fsdp2-scaling``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from nbhelpers.kernels.fla import FUSED_GATED_NORM
from nbhelpers.kernels.registry import requested_kernels, uses_liger_switches
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.checkpointing import CHECKPOINTING_NAMES, CHECKPOINTINGS, RESTORED_INPUTS, recomputed_layers
from nbhelpers.models.frozen_base import BF16_BASE, FROZEN_BASES, frozen_base_bytes, working_copy_bytes
from nbhelpers.models.linears import OUTPUT_LAYER, targeted
from nbhelpers.models.precision import MASTER_WEIGHTS, PRECISIONS
from nbhelpers.models.shape import ModelShape
from nbhelpers.validation import ConfigError, check_choice, check_int

from .memory_cap import NO_CAP

GIB = 2**30
H200_USABLE_GIB = 139.0  # an H200 (141 GB) as torch reports it: about 139.8 GiB total, ~139 GiB allocatable
WEIGHTS = ("fp32", "bf16", MASTER_WEIGHTS)  # fp32 + autocast; bf16 weights; bf16 weights + fp32 master and moments
SHARDINGS = ("none", "fsdp2")
# Bytes per logit element at the loss's peak: bf16 logits, their fp32 copy and fp32 log-probabilities, then
# the fp32 gradient (plain); Liger's cross-entropy writes the gradient in place (liger_ce); the fused linear
# cross-entropy never holds the whole logits (its chunk is counted per token and hidden unit instead).
LOSS_BYTES_PER_LOGIT = {"plain": 12, "liger_ce": 6, "fused_linear_ce": 0}
# The share of a GPU's (or a cap's) memory a planned peak leaves free: the cap bounds what the allocator reserves,
# the plan predicts what it hands out, and the two differ by the blocks reserved and not in use at the peak. On an
# H100 (2026-12-06), planned 8B LoRA peaks 5-6% under 79 and 48 GiB caps ran out of memory with 2-6 GiB reserved
# and unused (without expandable segments); planned peaks 7-11% under the cap ran.
FIT_HEADROOM = 0.06


@dataclass(frozen=True)
class MemorySettings:
    """What the per-GPU memory of a step depends on besides the model's shape."""

    gpus: int = 1
    weights: str = "bf16"  # one of WEIGHTS
    sharding: str = "none"  # one of SHARDINGS
    checkpointing: str = "none"  # one of CHECKPOINTING_NAMES
    checkpoint_every: int = 2  # k of "every_k"
    tokens_per_gpu: int = 4096  # positions per GPU per step (padding included)
    fused_norm_mlp: bool = False  # Liger's RMSNorm and SwiGLU, which save less for backward
    loss: str = "plain"  # a key of LOSS_BYTES_PER_LOGIT
    capacity_gib: float = H200_USABLE_GIB  # memory one GPU can allocate
    adapter: str = "none"  # a key of models.adapters.ADAPTERS; "lora": a frozen base (weights only) + fp32 adapters
    lora_rank: int = 16
    lora_targets: str = "all-linear"
    autocast: bool = True  # with an adapter: bf16 autocast over its fp32 weights (False: a pure bf16 step)
    cast_inputs: bool = True  # PEFT casts each adapted layer's input to fp32 (False: left to autocast, in bf16)
    fused_gated_norm: bool = False  # a hybrid's Gated DeltaNet output norm fused (fla's), not transformers' PyTorch
    frozen_base: str = BF16_BASE  # with an adapter: a key of models.frozen_base.FROZEN_BASES (bytes from the table)

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, 1, 4096)
        check_choice("weights", self.weights, WEIGHTS)
        check_choice("sharding", self.sharding, SHARDINGS)
        if self.gpus > 1 and self.sharding == "none":
            raise ConfigError("sharding", self.sharding, f"'fsdp2' when gpus > 1 (gpus={self.gpus})")
        check_choice("checkpointing", self.checkpointing, CHECKPOINTING_NAMES)
        check_int("checkpoint_every", self.checkpoint_every, 1, 1024)
        check_int("tokens_per_gpu", self.tokens_per_gpu, 1, 1 << 24)
        if not isinstance(self.fused_norm_mlp, bool):
            raise ConfigError("fused_norm_mlp", self.fused_norm_mlp, "True or False")
        check_choice("loss", self.loss, tuple(LOSS_BYTES_PER_LOGIT))
        capacity = self.capacity_gib
        if isinstance(capacity, bool) or not isinstance(capacity, (int, float)) or not 0 < capacity < math.inf:
            raise ConfigError("capacity_gib", capacity, "a positive, finite number of GiB (infinity fits anything)")
        self.adapter_settings  # noqa: B018 - validates adapter, lora_rank and lora_targets
        if not isinstance(self.autocast, bool):
            raise ConfigError("autocast", self.autocast, "True or False")
        for flag in ("cast_inputs", "fused_gated_norm"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(flag, getattr(self, flag), "True or False")

    @property
    def adapter_settings(self) -> AdapterSettings:
        return AdapterSettings(self.adapter, self.lora_rank, targets=self.lora_targets, frozen_base=self.frozen_base)


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted bytes per GPU by part, their sum and whether it fits the capacity."""

    parameters: int
    gradients: int
    optimizer: int
    gathered: int  # FSDP2's unsharded working copies, or autocast's bf16 weight cache
    activations: int
    logits: int
    capacity_gib: float

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.gathered + self.activations + self.logits

    @property
    def total_gib(self) -> float:
        return self.total / GIB

    @property
    def usable_gib(self) -> float:
        """The most a planned peak may take: the capacity less :data:`FIT_HEADROOM`."""
        return self.capacity_gib * (1 - FIT_HEADROOM)

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib

    def gib(self) -> dict[str, float]:
        """Every part in GiB, with the total."""
        parts = {k: v / GIB for k, v in asdict(self).items() if k != "capacity_gib"}
        return parts | {"total": self.total_gib}


def layer_activation_bytes(
    shape: ModelShape, weights: str, fused_norm_mlp: bool, mixer: str = "attention", fused_gated_norm: bool = False
) -> int:
    """Bytes one decoder layer saves for backward per token (bf16 compute; residual in the weights' dtype).

    Counted on transformers' eager Qwen3 layer: each RMSNorm keeps an fp32 copy of its input and its
    output; the attention block keeps its bf16 input, q/k before their norms (fp32 copies), q/k
    after RoPE, v, and the attention output (Qwen3.5's gated attention also its sigmoid gate and the
    ungated output); the SwiGLU MLP keeps its input, gate, up, activation and product. Liger's RMSNorm keeps
    only its input and Liger's SwiGLU recomputes the activation. ``mixer="linear_attention"``: a Gated DeltaNet
    layer instead (:func:`delta_net_bytes`).
    """
    residual = 4 if weights == "fp32" else 2
    h, q, kv, inner = (
        shape.hidden_size,
        shape.num_heads * shape.head_dim,
        shape.num_kv_heads * shape.head_dim,
        (shape.intermediate_size),
    )
    if fused_norm_mlp:
        norms, qk_norms = 2 * residual * h, 2 * (q + kv)
        mlp = 2 * h + 6 * inner
    else:
        norms, qk_norms = 2 * (4 * h + residual * h), 8 * (q + kv)
        mlp = 2 * h + 8 * inner
    if mixer == "linear_attention":
        return norms + delta_net_bytes(shape, fused_gated_norm) + mlp
    attention = qk_norms + 2 * h + 2 * (q + kv) + 2 * kv + 2 * q
    gate = 4 * q if shape.attention_output_gate else 0  # the sigmoid gate and the attention output it scales
    return norms + attention + gate + mlp


def delta_net_bytes(shape: ModelShape, fused_gated_norm: bool) -> int:
    """Bytes a Gated DeltaNet mixer saves per token (bf16), on fla's path: its input, the convolution's input,
    v, q and k after their L2 norm (repeated to the value heads), the chunk's bf16 A (64 per value head), the
    fp32 decay and beta, the gated RMSNorm's tensors and the output projection's input. transformers' gated
    RMSNorm (PyTorch) keeps fp32 copies of its input and gate, the silu of the gate and its bf16 weighted input
    (14 bytes a value element); a fused one (fla's) its bf16 input and gate (4)."""
    h = shape.hidden_size
    value = shape.linear_num_value_heads * shape.linear_value_head_dim
    conv = 2 * shape.linear_num_key_heads * shape.linear_key_head_dim + value
    heads = shape.linear_num_value_heads
    qk = 2 * 2 * heads * shape.linear_key_head_dim
    norm = (4 if fused_gated_norm else 14) * value
    return 2 * h + 2 * conv + 2 * value + qk + 2 * heads * 64 + 8 * heads + norm + 2 * value


def adapter_activation_bytes(
    shape: ModelShape, adapter: AdapterSettings, autocast: bool, cast_inputs: bool = True
) -> int:
    """What an adapter changes in the bytes a decoder layer saves for backward per token (a mean over the layers).

    PEFT casts a targeted linear's input to the fp32 adapter's dtype; under bf16 autocast the matmul casts it
    back and saves that bf16 copy (2 bytes per input element; without autocast the fp32 copy, 4), and B saves
    A's rank-wide output. With the cast left to autocast (``cast_inputs`` False), A's matmul saves the bf16 input
    itself: the adapters of linears that read one input (q, k and v; gate and up) share that one tensor.
    A frozen base saves no input that only its weight gradient needs: the mixer's and the MLP's input and the
    down projection's (bf16 in :func:`layer_activation_bytes`) are taken off.
    """
    if not adapter.entry.frozen_base:
        return 0
    size = 2 if autocast else 4
    chosen = [m for m in targeted(shape, adapter.target_modules) if m.path != OUTPUT_LAYER]
    if autocast and not cast_inputs:
        inputs = {m.input_name: m.in_features * m.count for m in chosen}  # one saved bf16 input per name
        copies = size * (sum(inputs.values()) + sum(adapter.rank * m.count for m in chosen))
    else:
        copies = sum(size * (m.in_features + adapter.rank) * m.count for m in chosen)
    frozen_inputs = 2 * (2 * shape.hidden_size + shape.intermediate_size) * shape.num_layers
    return (copies - frozen_inputs) // shape.num_layers


def upcast_rest(settings: MemorySettings) -> bool:
    """A frozen base whose unquantized rest is upcast to fp32 (QLoRA's k-bit preparation) under a bf16 step."""
    s = settings
    frozen = s.adapter_settings.entry.frozen_base
    return bool(frozen and FROZEN_BASES[s.frozen_base].rest_fp32 and s.weights != "fp32")


def residual_stream(settings: MemorySettings) -> str:
    """The residual stream's dtype, as :func:`layer_activation_bytes` reads it: fp32 after an upcast rest (the
    embedding's output is fp32), else the weights'."""
    return "fp32" if upcast_rest(settings) else settings.weights


def host_offload_bytes(shape: ModelShape, settings: MemorySettings) -> int:
    """Pinned host memory a step's offloaded checkpoints hold at the end of its forward (``checkpointing="offload"``:
    each recomputed layer's input); 0 for the other modes."""
    s = settings
    if not CHECKPOINTINGS[s.checkpointing].offloads:
        return 0
    layers = len(recomputed_layers(shape.num_layers, s.checkpointing, s.checkpoint_every))
    return s.tokens_per_gpu * layers * shape.hidden_size * (4 if residual_stream(s) == "fp32" else 2)


def plan_memory(shape: ModelShape, settings: MemorySettings) -> MemoryPlan:
    """Predicted per-GPU memory of one training step (AdamW, bf16 compute) of ``shape`` under ``settings``.

    With an adapter (LoRA) the base is frozen: its weights alone (in ``weights``' dtype, or as its quantized format
    stores them: ``models.frozen_base.frozen_base_bytes``, plus the one layer's working copy its matmul makes), and
    the adapter's fp32 weights, gradients and two AdamW moments (4 bytes each per adapter parameter)."""
    s = settings
    stored = 4 if s.weights == "fp32" else 2
    shards = s.gpus if s.sharding == "fsdp2" else 1
    params = shape.total_parameters
    weights = math.ceil(params / shards) * stored
    adapter = s.adapter_settings
    frozen = adapter.entry.frozen_base
    if frozen and s.frozen_base != BF16_BASE:
        stored_as = "fp32" if s.weights == "fp32" else "bf16"
        weights = math.ceil(frozen_base_bytes(shape, s.frozen_base, stored_as) / shards)
    trained = math.ceil(adapter.entry.parameters(shape, adapter) / shards)
    if s.sharding == "fsdp2":
        lm_head = 0 if shape.tie_word_embeddings else shape.embedding_parameters
        root = shape.embedding_parameters + lm_head + shape.hidden_size
        gathered = (root + 2 * shape.layer_parameters) * 2 + (0 if frozen else shape.layer_parameters * 4)
    else:
        gathered = shape.flop_parameters * 2 if s.weights == "fp32" else 0  # autocast's bf16 weight cache
        gathered += trained * 2 if frozen and s.autocast else 0  # and of the fp32 adapter weights
    gathered += working_copy_bytes(shape, s.frozen_base) if frozen else 0  # a quantized layer's dequantized copy
    # A base whose unquantized rest is upcast to fp32 (QLoRA's k-bit preparation): the embedding's output and so the
    # residual stream are fp32, and autocast's bf16 copy of the fp32 lm head is kept for the backward pass.
    base = FROZEN_BASES[s.frozen_base]
    gathered += shape.vocab_size * shape.hidden_size * 2 if upcast_rest(s) and s.autocast else 0
    stream = residual_stream(s)
    adapter_bytes = adapter_activation_bytes(shape, adapter, s.autocast, s.cast_inputs)
    factor = base.activation_factor if frozen else 1.0
    by_kind = {
        mixer: math.ceil(factor * (layer_activation_bytes(shape, stream, s.fused_norm_mlp, mixer, s.fused_gated_norm)
                                   + adapter_bytes))
        for mixer in ("attention", "linear_attention")
    }  # fmt: skip
    kinds = ["attention" if shape.is_full_attention(i) else "linear_attention" for i in range(shape.num_layers)]
    recomputed = set(recomputed_layers(shape.num_layers, s.checkpointing, s.checkpoint_every))
    residual = 4 if stream == "fp32" else 2
    per_token = sum(by_kind[kind] for i, kind in enumerate(kinds) if i not in recomputed)
    # each recomputed layer's input, kept to its recompute; offloaded, the one restored for the recompute and the next
    offloaded = CHECKPOINTINGS[s.checkpointing].offloads and recomputed
    kept_inputs = min(RESTORED_INPUTS, len(recomputed)) if offloaded else len(recomputed)
    per_token += kept_inputs * residual * shape.hidden_size
    per_token += max(by_kind[kinds[i]] for i in recomputed) if recomputed else 0  # the layer being recomputed
    per_token += 2 * shape.hidden_size * residual  # embedding output and final norm
    activations = s.tokens_per_gpu * per_token
    logits = s.tokens_per_gpu * shape.vocab_size * LOSS_BYTES_PER_LOGIT[s.loss]
    if s.loss == "fused_linear_ce":
        logits = s.tokens_per_gpu * shape.hidden_size * 8  # one chunk's fp32 logits and their gradient
    if frozen:
        adapter_copy = 4 * trained  # one fp32 copy of the adapter's parameters
        return MemoryPlan(
            parameters=weights + adapter_copy, gradients=adapter_copy, optimizer=2 * adapter_copy, gathered=gathered,
            activations=activations, logits=logits, capacity_gib=float(s.capacity_gib),
        )  # fmt: skip
    if s.weights == MASTER_WEIGHTS:  # bf16 weights; fp32 gradients at the step, fp32 master and moments
        kept, share = PRECISIONS[MASTER_WEIGHTS], math.ceil(params / shards)
        return MemoryPlan(
            parameters=weights, gradients=share * kept.grad_bytes, optimizer=share * (kept.master_bytes +
            kept.moment_bytes), gathered=gathered, activations=activations, logits=logits,
            capacity_gib=float(s.capacity_gib),
        )  # fmt: skip
    return MemoryPlan(
        parameters=weights, gradients=weights, optimizer=2 * weights, gathered=gathered,
        activations=activations, logits=logits, capacity_gib=float(s.capacity_gib),
    )  # fmt: skip


def gpus_needed(shape: ModelShape, settings: MemorySettings, max_gpus: int = 256) -> int | None:
    """The fewest GPUs on which the step fits with these settings (FSDP2 above one); None up to ``max_gpus``."""
    for gpus in range(1, max_gpus + 1):
        sharding = settings.sharding if gpus == 1 else "fsdp2"
        candidate = MemorySettings(**(asdict(settings) | {"gpus": gpus, "sharding": sharding}))
        if plan_memory(shape, candidate).fits:
            return gpus
    return None


def planned_capacity_gib(config: Any, default: float = H200_USABLE_GIB) -> float:
    """The memory a configuration plans for per GPU: its cap (``gpu_memory_gib``) when it names one, else
    ``default``."""
    cap = getattr(config, "gpu_memory_gib", NO_CAP)
    return float(cap) if cap != NO_CAP else float(default)


def settings_from_config(config: Any, capacity_gib: float | None = None) -> MemorySettings:
    """The memory settings of a RunConfig on a GPU (its dtype, GPU count, sharding, checkpointing), planned
    for the most positions a step of it can hold per GPU (PaddingSettings.most_tokens_per_step) and for
    ``capacity_gib`` (None: its cap, or an H200's memory without one)."""
    switches = set(config.liger_kernels) if uses_liger_switches(config.kernels) else set()
    loss = "fused_linear_ce" if "fused_linear_cross_entropy" in switches else "plain"
    loss = "liger_ce" if "cross_entropy" in switches else loss
    adapter = config.adapter_settings  # an adapter's frozen base is bf16 on a GPU unless the step is fp32
    bf16 = config.dtype == "bf16" or (adapter.entry.frozen_base and config.dtype != "fp32")
    weights = MASTER_WEIGHTS if config.dtype == MASTER_WEIGHTS else "bf16" if bf16 else "fp32"
    return MemorySettings(
        adapter=adapter.name, lora_rank=adapter.rank, lora_targets=adapter.targets,
        autocast=config.dtype in ("auto", "bf16-autocast"), cast_inputs=adapter.cast_inputs,
        gpus=config.gpus, weights=weights, sharding=config.sharding,
        checkpointing=config.activation_checkpointing, checkpoint_every=config.checkpoint_every,
        tokens_per_gpu=config.padding_settings.most_tokens_per_step, loss=loss,
        fused_norm_mlp={"rms_norm", "swiglu"} <= switches,
        fused_gated_norm=FUSED_GATED_NORM in requested_kernels(config.kernels, config.liger_kernels),
        capacity_gib=planned_capacity_gib(config) if capacity_gib is None else capacity_gib,
        frozen_base=adapter.frozen_base,
    )  # fmt: skip


class MemoryCapExceeded(ValueError):
    """A configuration the memory planner puts over its cap (``gpu_memory_gib``), refused before any work."""


def cap_plan_refusal(config: Any, shape: ModelShape) -> str:
    """Why a configuration with a memory cap cannot fit it, by the planner, or '' (no cap, or it fits): the planned
    peak per GPU by part against ``gpu_memory_gib``, with what would make it fit."""
    if getattr(config, "gpu_memory_gib", NO_CAP) == NO_CAP:
        return ""
    plan = plan_memory(shape, settings_from_config(config))
    if plan.fits:
        return ""
    parts = ", ".join(f"{name} {gib:,.1f}" for name, gib in plan.gib().items() if name != "total" and gib >= 0.05)
    return (f"gpu_memory_gib={plan.capacity_gib:g}: the memory planner puts this step's peak at "
            f"{plan.total_gib:,.1f} GiB per GPU ({parts} GiB), over the cap; fewer tokens per step, activation "
            f"checkpointing, an adapter or a quantized frozen base, more GPUs, or a larger cap")  # fmt: skip
