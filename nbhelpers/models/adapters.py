"""The table of adapters: how a model trains besides full fine-tuning (LoRA through PEFT), one entry each.

An adapter freezes the base model and trains small added weights. Adding one is an entry in ``ADAPTERS``
plus its functions (wrap a built model, count its trained parameters from a shape, its PEFT config).
The order the measured step uses: build the model (a frozen base in bf16 on CUDA), apply the kernel
backend to the plain model, then wrap it (:func:`wrap_model`), so Liger's patched modules, fla's kernels,
torch.compile and the attention implementation run inside the adapted model.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nbhelpers.validation import ConfigError, check_choice, check_int

from .frozen_base import (
    BF16_BASE,
    FROZEN_BYTES,
    apply_frozen_base,
    check_frozen_base,
    frozen_base_bytes,
    stored_weight_count,
)  # fmt: skip
from .linears import ALL_LINEAR, OUTPUT_LAYER, bad_target_names, lora_parameters, matmul_weights, parse_targets
from .lora_epilogue import fuse_lora_epilogues
from .shape import ModelShape

NO_ADAPTER = "none"
LORA = "lora"
ADAPTER_BYTES_PER_PARAMETER = 4 * 4  # fp32 adapter weights, their gradients and AdamW's two moments
TARGETS_RULE = f"{ALL_LINEAR!r} or a comma-separated list of module names (e.g. 'q_proj,v_proj' or 'mlp.down_proj')"


@dataclass(frozen=True)
class AdapterSettings:
    """An adapter and its parameters, named as RunConfig names them (``adapter``, ``lora_rank``, ...)."""

    name: str = NO_ADAPTER  # a key of ADAPTERS
    rank: int = 16  # LoRA's rank r
    alpha: int = 32  # LoRA's alpha (the update is scaled by alpha / r)
    targets: str = ALL_LINEAR  # PEFT's target_modules: "all-linear" or a comma list of module names
    # PEFT casts each adapted layer's input to the adapters' fp32 before A; under bf16 autocast A's matmul casts it
    # straight back to bf16, so leaving it out (False) computes the same numbers with two passes fewer per layer.
    cast_inputs: bool = True
    frozen_base: str = BF16_BASE  # a key of models.frozen_base.FROZEN_BASES: how the frozen base keeps its linears
    fuse_epilogue: bool = False  # LoRA's scale and add in the GEMM (nbhelpers.models.lora_epilogue), not PEFT's
    one_function: bool = False  # with fuse_epilogue: each LoRA linear as one autograd function (models.lora_function)

    def __post_init__(self) -> None:
        check_choice("adapter", self.name, tuple(ADAPTERS))
        check_int("lora_rank", self.rank, 1, 4096)
        check_int("lora_alpha", self.alpha, 1, 65_536)
        if not isinstance(self.targets, str) or bad_target_names(self.targets):
            raise ConfigError("lora_targets", self.targets, TARGETS_RULE)
        check_frozen_base(self.frozen_base, self.entry.frozen_base)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AdapterSettings:
        """The adapter of a stored config (a record's ``config``); older records without the fields: none."""
        defaults = cls()
        return cls(
            name=config.get("adapter", defaults.name), rank=config.get("lora_rank", defaults.rank),
            alpha=config.get("lora_alpha", defaults.alpha), targets=config.get("lora_targets", defaults.targets),
            frozen_base=config.get("frozen_base", defaults.frozen_base),
        )  # fmt: skip

    @property
    def active(self) -> bool:
        """Whether an adapter trains (the base frozen) rather than the whole model."""
        return self.name != NO_ADAPTER

    @property
    def entry(self) -> Adapter:
        return ADAPTERS[self.name]

    @property
    def target_modules(self) -> str | list[str]:
        """PEFT's ``target_modules``."""
        return parse_targets(self.targets)

    @property
    def targets_output(self) -> bool:
        """Whether the targets name the output layer (``lm_head``), which "all-linear" leaves out."""
        targets = self.target_modules
        return targets != ALL_LINEAR and any(t == OUTPUT_LAYER or t.endswith("." + OUTPUT_LAYER) for t in targets)

    @property
    def label(self) -> str:
        """A short name for tables ("" without an adapter), e.g. "lora-r16"."""
        return self.entry.label(self)

    def config_fields(self) -> dict[str, Any]:
        """The RunConfig fields these settings set: ``RunConfig(**adapter.config_fields(), ...)``."""
        return {"adapter": self.name, "lora_rank": self.rank, "lora_alpha": self.alpha, "lora_targets": self.targets,
                "frozen_base": self.frozen_base}  # fmt: skip

    def matches(self, config: Mapping[str, Any]) -> bool:
        """Whether a stored config (a record's) trains this adapter: the same name and, with an adapter, the same
        rank, alpha, targets and frozen base (without one, the LoRA fields change nothing and are not compared)."""
        other = AdapterSettings.from_config(config)
        if other.name != self.name:
            return False
        same = (other.rank, other.alpha, other.target_modules, other.frozen_base) == (
            self.rank, self.alpha, self.target_modules, self.frozen_base)  # fmt: skip
        return not self.active or same


@dataclass(frozen=True)
class Adapter:
    """One entry of the table: what it is and its functions."""

    name: str
    description: str
    wrap: Callable[[Any, AdapterSettings], Any]  # (built model, settings) -> the model that trains
    parameters: Callable[[ModelShape, AdapterSettings], int]  # trained parameters, counted from a shape
    peft_class: str  # PEFT's config class ("" without an adapter), as exported code names it
    peft_kwargs: Callable[[AdapterSettings], dict[str, Any]]  # its keyword arguments
    label: Callable[[AdapterSettings], str]
    frozen_base: bool  # the base model's weights do not train


def _unchanged(model: Any, settings: AdapterSettings) -> Any:
    return model


def lora_kwargs(settings: AdapterSettings) -> dict[str, Any]:
    """``LoraConfig`` keyword arguments for the settings (no dropout, no bias, a causal LM's task type)."""
    return {
        "r": settings.rank, "lora_alpha": settings.alpha, "target_modules": settings.target_modules,
        "lora_dropout": 0.0, "bias": "none", "task_type": "CAUSAL_LM",
    }  # fmt: skip


def peft_config(settings: AdapterSettings) -> Any:
    """PEFT's config object for the settings (``peft.LoraConfig``), or None without an adapter."""
    if not settings.entry.peft_class:
        return None
    import peft

    return getattr(peft, settings.entry.peft_class)(**settings.entry.peft_kwargs(settings))


def wrap_lora(model: Any, settings: AdapterSettings) -> Any:
    """``get_peft_model`` with fp32 adapter weights (``autocast_adapter_dtype``) over a frozen base, first put in the
    settings' frozen-base format (``models.frozen_base``: refused with the reason where it cannot run). A target the
    model has no linear module of (PEFT skips those when another matches) is a ConfigError naming
    ``lora_targets`` and the model's linear modules."""
    import torch
    from peft import get_peft_model

    model = apply_frozen_base(model, settings.frozen_base)
    names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    allowed = f"{TARGETS_RULE}; this model's: {', '.join(names)}"
    try:
        wrapped = get_peft_model(model, peft_config(settings), autocast_adapter_dtype=True)
    except ValueError as error:
        if "target modules" not in str(error).lower():
            raise
        raise ConfigError("lora_targets", settings.targets, allowed) from error
    targets = settings.target_modules
    found = list(getattr(wrapped, "targeted_module_names", []))
    missing = [] if targets == ALL_LINEAR else [t for t in targets if not any(_names(f, t) for f in found)]
    if missing:
        raise ConfigError("lora_targets", settings.targets, f"{allowed} (none named {', '.join(missing)})")
    if not settings.cast_inputs:
        skip_input_casts(wrapped)
    if settings.fuse_epilogue:
        fuse_lora_epilogues(wrapped, settings.one_function)
    return wrapped


def skip_input_casts(model: Any) -> int:
    """Turn off PEFT's cast of each adapted layer's input to the adapter weights' dtype (what PEFT's
    ``helpers.disable_input_dtype_casting`` does for the length of a ``with`` block), for good; returns how many
    layers. Only for a step under bf16 autocast: there A's matmul casts its input to bf16 whatever PEFT did, so
    the bf16 -> fp32 -> bf16 round trip (exact) and its backward are left out and the numbers stay the same."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
    for layer in layers:
        layer.cast_input_dtype_enabled = False
    return len(layers)


def _names(module: str, target: str) -> bool:
    """Whether PEFT's ``target`` picks the module of this qualified name (the name or a dotted suffix of it)."""
    return module == target or module.endswith("." + target)


def _lora_parameters(shape: ModelShape, settings: AdapterSettings) -> int:
    return lora_parameters(shape, settings.rank, settings.target_modules)


def _lora_label(settings: AdapterSettings) -> str:
    label = f"lora-r{settings.rank}"
    if settings.alpha != 2 * settings.rank:
        label += f"-a{settings.alpha}"
    targets = settings.target_modules
    label = label if targets == ALL_LINEAR else label + "-" + "+".join(targets)
    return label if settings.frozen_base == BF16_BASE else f"{label}-{settings.frozen_base}"


ADAPTERS: dict[str, Adapter] = {
    adapter.name: adapter
    for adapter in (
        Adapter(
            name=NO_ADAPTER, description="full fine-tuning: every weight trains", wrap=_unchanged,
            parameters=lambda shape, settings: 0, peft_class="", peft_kwargs=lambda settings: {},
            label=lambda settings: "", frozen_base=False,
        ),
        Adapter(
            name=LORA, description="LoRA through PEFT: frozen base, rank-r A and B trained per targeted linear",
            wrap=wrap_lora, parameters=_lora_parameters, peft_class="LoraConfig", peft_kwargs=lora_kwargs,
            label=_lora_label, frozen_base=True,
        ),
    )
}  # fmt: skip
ADAPTER_NAMES = tuple(ADAPTERS)


def wrap_model(model: Any, settings: AdapterSettings) -> Any:
    """The model that trains: the built model itself, or wrapped by the adapter (call after the kernel backend)."""
    return settings.entry.wrap(model, settings)


def bf16_weights(settings: AdapterSettings, compute_dtype: str, device: str) -> bool:
    """Whether the weights are built in bf16: for a bf16 step, and for an adapter's frozen base on CUDA (unless
    the step is fp32); a CPU keeps fp32 as for full fine-tuning."""
    frozen_bf16 = settings.entry.frozen_base and device.startswith("cuda") and compute_dtype != "fp32"
    return compute_dtype in ("bf16", "bf16-master") or frozen_bf16


def weights_dtype(settings: AdapterSettings, compute_dtype: str, device: str) -> Any:
    """The torch dtype to build the weights in (:func:`bf16_weights`), or None (fp32, as built)."""
    import torch

    return torch.bfloat16 if bf16_weights(settings, compute_dtype, device) else None


def base_model_of(model: Any) -> Any:
    """The transformers model inside an adapter's wrapper (PEFT's ``get_base_model``), else the model itself."""
    getter = getattr(model, "get_base_model", None)
    return getter() if callable(getter) else model


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters that train (an optimizer's list): all of them, or an adapter's only."""
    return [p for p in model.parameters() if p.requires_grad]


def frozen_matmul_parameters(model: Any) -> int:
    """Weights of the model's ``nn.Linear`` layers (the lm head included, tied or not) that train frozen
    (``requires_grad`` False, as a LoRA base model's), each tensor once: the weight gradients a step skips.
    Embedding lookups, convolutions and norms are not counted (they are not weight matmuls)."""
    import torch

    seen: set[int] = set()
    frozen = 0
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, torch.nn.Linear) or weight is None or id(weight) in seen:
            continue
        seen.add(id(weight))
        if not weight.requires_grad:
            frozen += stored_weight_count(weight)
    return frozen


def adapter_matmul_parameters(model: Any) -> int:
    """Weights of the ``nn.Linear`` modules an adapter added (PEFT's ``lora_A``/``lora_B``), each once: matmuls a
    step runs that the base shape does not count. 0 for a model no PEFT layer wraps."""
    if "peft" not in sys.modules:  # no PEFT layer can exist before peft is imported
        return 0
    import torch
    from peft.tuners.tuners_utils import BaseTunerLayer

    seen: set[int] = set()
    total = 0
    for layer in model.modules():
        if not isinstance(layer, BaseTunerLayer):
            continue
        base = layer.get_base_layer()
        for module in layer.modules():
            weight = getattr(module, "weight", None)
            if module is base or not isinstance(module, torch.nn.Linear) or weight is None or id(weight) in seen:
                continue
            seen.add(id(weight))
            total += weight.numel()
    return total


@dataclass(frozen=True)
class ParameterCounts:
    """Trainable and frozen parameters of a model, and the matmul weights MFU's arithmetic needs."""

    trainable: int
    frozen: int
    frozen_matmul: int  # frozen nn.Linear weights: no weight gradient (frozen_matmul_parameters)
    adapter_matmul: int  # an adapter's nn.Linear weights (adapter_matmul_parameters)

    def metrics(self) -> dict[str, int]:
        """The record's fields."""
        return {
            "trainable_parameters": self.trainable,
            "frozen_parameters": self.frozen,
            "frozen_matmul_parameters": self.frozen_matmul,
            "adapter_parameters": self.adapter_matmul,
        }


def parameter_counts(model: Any) -> ParameterCounts:
    """Trainable and frozen parameters (shared tensors once) and the matmul weights of each kind."""
    seen: set[int] = set()
    trainable = frozen = 0
    for parameter in model.parameters():
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        if parameter.requires_grad:
            trainable += parameter.numel()
        else:
            frozen += stored_weight_count(parameter)
    return ParameterCounts(trainable, frozen, frozen_matmul_parameters(model), adapter_matmul_parameters(model))


def shape_counts(shape: ModelShape, settings: AdapterSettings) -> ParameterCounts:
    """The same counts from a shape, without a model: a frozen base holds every stored parameter, frozen."""
    adapter = settings.entry.parameters(shape, settings)
    if not settings.entry.frozen_base:
        return ParameterCounts(shape.total_parameters, 0, 0, 0)
    return ParameterCounts(adapter, shape.total_parameters, matmul_weights(shape), adapter)


def training_state_bytes(shape: ModelShape, weights: str, settings: AdapterSettings | None = None) -> int:
    """Weights, gradients and AdamW moments of a training run (no activations): the whole model's in the weights'
    dtype without an adapter; with one, the frozen base's weights alone plus the fp32 adapter's full state."""
    if settings is None or not settings.entry.frozen_base:
        return shape.training_state_bytes(weights)
    adapter = settings.entry.parameters(shape, settings)
    return shape.total_parameters * FROZEN_BYTES[weights] + adapter * ADAPTER_BYTES_PER_PARAMETER


def quantized_state_bytes(shape: ModelShape, weights: str, settings: AdapterSettings | None = None) -> int:
    """:func:`training_state_bytes` once the frozen base is in its format (a quantized base's stored bytes), what a
    base built on the host and quantized onto the device holds there."""
    if settings is None or not settings.entry.frozen_base:
        return shape.training_state_bytes(weights)
    adapter = settings.entry.parameters(shape, settings)
    return frozen_base_bytes(shape, settings.frozen_base, weights) + adapter * ADAPTER_BYTES_PER_PARAMETER
