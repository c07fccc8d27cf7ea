"""RunConfig: one measured configuration, validated when it is made.

Every invalid value raises :class:`ConfigError`, which names the parameter, the value given and
what is allowed, so a notebook's parameters cell fails with a message a user can act on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nbhelpers.data.formats import FORMAT_NAMES
from nbhelpers.data.strategies import PADDING_FIELDS, PADDING_STRATEGIES, PaddingSettings
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS, DEFAULT_ATTENTION
from nbhelpers.kernels.float8 import RECIPES as FLOAT8_BACKENDS
from nbhelpers.kernels.liger import DEFAULT_LIGER_KERNELS, LIGER_KERNELS
from nbhelpers.kernels.registry import (
    BASELINE_BACKEND,
    KERNEL_BACKENDS,
    find_backend,
    switch_conflict,
    uses_liger_switches,
)
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.checkpointing import CHECKPOINTING_NAMES
from nbhelpers.models.frozen_base import BF16_BASE
from nbhelpers.models.precision import MASTER_WEIGHTS, PRECISIONS
from nbhelpers.validation import ConfigError, check_choice, check_int, check_run_name, check_text

from .engines import ENGINE_NAMES, ENGINES, WORKBOOK, batch_label
from .memory_cap import NO_CAP, cap_rule, valid_cap
from .padding import padding_settings_of

DTYPES = ("auto", *PRECISIONS)  # nbhelpers.models.precision: what each keeps per parameter
TIMINGS = ("steps", "epoch")
# extra[SHAPE_WARMUP] = False: no untimed steps for the timed steps' unseen shapes, so every optimizer step trains on
# the plan's next batch (a convergence curve, compared step by step with another plan's)
SHAPE_WARMUP = "shape_warmup"
DEVICES = ("auto", "cpu", "cuda")
SHARDINGS = ("none", "fsdp2")  # fsdp2: torch's fully_shard per decoder layer, bf16 parameters, fp32 reduction
MAX_GPUS = 1024
# PEFT's cast of each adapted layer's input to the fp32 adapters: "on" (PEFT's default), "off" (left to bf16
# autocast: the same numbers, two elementwise passes fewer per adapted layer and step), "auto" (off with any
# kernel backend but the baseline's, so the baseline stays the stock PEFT step).
LORA_INPUT_CASTS = ("auto", "on", "off")
# Each LoRA linear's scale and add: "peft" (PEFT's multiply and add, the default), "fused" (added by the GEMM into
# the base layer's output, nbhelpers.models.lora_epilogue) or "function" (the whole linear, frozen GEMM and both
# adapter GEMMs, as one autograd function, nbhelpers.models.lora_function). Not the default until a GPU measures it
# faster: "fused" ran at 1.07x PEFT's on the 27B (H100), its first form at 0.98x (1.7B) and 0.99x (8B).
LORA_EPILOGUES = ("peft", "fused", "function")


def skips_lora_input_cast(config: Mapping[str, Any]) -> bool:
    """Whether a configuration (a RunConfig's dict or a stored record's) leaves PEFT's input cast out: never
    without an adapter or for a pure bf16 step (no autocast to cast for the fp32 adapters)."""
    if config.get("adapter", "none") == "none" or config.get("dtype", "auto") == "bf16":
        return False
    setting = config.get("lora_input_cast", "on")  # older records: PEFT's default
    if setting == "auto":
        return config.get("kernels", BASELINE_BACKEND) != BASELINE_BACKEND
    return setting == "off"


def lora_forward(config: Mapping[str, Any]) -> str:
    """Which LoRA forward a configuration (a RunConfig's dict or a stored record's) runs, of LORA_EPILOGUES: "peft"
    without an adapter; older records ran PEFT's forward."""
    if config.get("adapter", "none") == "none":
        return "peft"
    return config.get("lora_epilogue", "peft")  # older records: PEFT's forward


def fuses_lora_epilogue(config: Mapping[str, Any]) -> bool:
    """Whether a configuration adds LoRA's scaled product in the GEMM ("fused", and "function", which does too)."""
    return lora_forward(config) != "peft"


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines one measured training step configuration."""

    run_name: str = "default"  # folder under runs/ that collects this run's records
    label: str = ""  # short name of this configuration in tables ("" = derived)
    model: str = "qwen3-tiny"  # preset name, hub id or local folder
    dataset: str = "default"  # "default", a JSONL/JSON/Parquet path, or a `datasets` name
    prompt_field: str = "prompt"  # field with the instruction (masked out of the loss)
    response_field: str = "response"  # field with the answer (the loss tokens)
    use_chat_template: bool = False  # wrap prompt/response in the tokenizer's chat template
    data_format: str = "auto"  # "auto" (detected) or a format of nbhelpers.data.formats.DATA_FORMATS
    prompt_template: str = ""  # joins several prompt fields, e.g. "{instruction}\n\n{input}"
    num_samples: int = 64  # samples taken from the dataset, same ones in the same order everywhere
    batch_size: int = 4  # sequences per step (packed: sequences flattened into one row)
    max_length: int = 128  # longest sequence kept; longer ones are truncated
    padding: str = "dynamic"  # one of PADDING_STRATEGIES
    pad_to_multiple_of: int = 8  # used by padding="multiple"
    num_buckets: int = 4  # used by padding="bucketed"
    token_budget: int = 0  # tokens per step for padding="token_budget" (0 = batch_size * max_length)
    attn_implementation: str = DEFAULT_ATTENTION  # one of ATTENTION_IMPLEMENTATIONS (nbhelpers.kernels.attention)
    kernels: str = BASELINE_BACKEND  # one of KERNEL_BACKENDS (the table in nbhelpers.kernels.registry)
    liger_kernels: tuple[str, ...] = DEFAULT_LIGER_KERNELS  # Liger switches that are on (no fused linear CE)
    steps: int = 5  # timed steps
    warmup: int = 2  # untimed steps before timing
    timing: str = "steps"  # "steps": warmup then steps; "epoch": one untimed pass over the plan, then timed passes
    min_timed_steps: int = 10  # "epoch": timed passes repeat until this many steps (the floor of a record not thin)
    timing_cap_s: int = 60  # "epoch": no further timed pass once the timed seconds plus one more pass exceed this
    dtype: str = "auto"  # auto = fp32 on CPU, fp32 weights + bf16 autocast on CUDA
    device: str = "auto"  # auto = cuda when present, else cpu
    seed: int = 0  # seed of weights, sampling and data order
    learning_rate: float = 1e-5  # AdamW learning rate
    profile: bool = False  # a torch.profiler trace of steps after the timed ones (a peer trainer: one more epoch)
    profile_steps: int = 1  # steps inside the profiler's active window
    timeout_s: int = 1800  # a subprocess that runs longer is stopped and recorded as failed
    gpus: int = 1  # processes (one per GPU) under torchrun; > 1 needs sharding="fsdp2"; batch sizes are per GPU
    sharding: str = "none"  # one of SHARDINGS
    activation_checkpointing: str = "none"  # one of CHECKPOINTING_NAMES (nbhelpers.models.checkpointing)
    checkpoint_every: int = 2  # k of activation_checkpointing="every_k": layers 0, k, 2k, ... are recomputed
    engine: str = WORKBOOK  # one of ENGINE_NAMES: the workbook's step, or TRL's SFTTrainer as a peer row
    adapter: str = "none"  # one of nbhelpers.models.adapters.ADAPTER_NAMES: "lora" trains adapters on a frozen base
    lora_rank: int = 16  # LoRA's rank r (adapter="lora")
    lora_alpha: int = 32  # LoRA's alpha: the adapters' update is scaled by alpha / r
    lora_targets: str = "all-linear"  # PEFT's target_modules: "all-linear" or a comma list of module names
    lora_input_cast: str = "auto"  # one of LORA_INPUT_CASTS: PEFT's fp32 cast of each adapted layer's input
    lora_epilogue: str = "peft"  # one of LORA_EPILOGUES: PEFT's LoRA scale and add, or in the GEMM ("fused")
    frozen_base: str = BF16_BASE  # one of FROZEN_BASE_NAMES (nbhelpers.models.frozen_base): "nf4", "float8" with LoRA
    gpu_memory_gib: float = NO_CAP  # memory the step may use per GPU (a smaller GPU on a larger one); 0: the device's
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes kept in the record

    def __post_init__(self) -> None:
        check_run_name(self.run_name, "run_name")
        if not isinstance(self.label, str):
            raise ConfigError("label", self.label, "a string")
        for name in ("model", "dataset", "prompt_field", "response_field"):
            check_text(name, getattr(self, name))
        if not isinstance(self.use_chat_template, bool):
            raise ConfigError("use_chat_template", self.use_chat_template, "True or False")
        check_choice("data_format", self.data_format, FORMAT_NAMES)
        if not isinstance(self.prompt_template, str):
            raise ConfigError("prompt_template", self.prompt_template, "a string")
        check_int("num_samples", self.num_samples, 1, 10_000_000)
        check_int("batch_size", self.batch_size, 1, 4096)
        check_int("max_length", self.max_length, 8, 131_072)
        check_choice("padding", self.padding, PADDING_STRATEGIES)
        check_int("pad_to_multiple_of", self.pad_to_multiple_of, 1, 4096)
        check_int("num_buckets", self.num_buckets, 1, 1024)
        check_int("token_budget", self.token_budget, 0, 10_000_000)
        if self.token_budget and self.token_budget < self.max_length:
            raise ConfigError(
                "token_budget", self.token_budget, f"0 or at least max_length ({self.max_length})"
            )
        check_choice("attn_implementation", self.attn_implementation, ATTENTION_IMPLEMENTATIONS)
        check_choice("kernels", self.kernels, KERNEL_BACKENDS)
        if not isinstance(self.liger_kernels, (list, tuple)):
            raise ConfigError("liger_kernels", self.liger_kernels, f"a tuple drawn from {LIGER_KERNELS}")
        switches = tuple(self.liger_kernels)
        unknown = [k for k in switches if not isinstance(k, str) or k not in LIGER_KERNELS]
        if unknown:
            raise ConfigError("liger_kernels", self.liger_kernels, f"a tuple drawn from {LIGER_KERNELS}")
        if {"fused_linear_cross_entropy", "cross_entropy"} <= set(switches):
            raise ConfigError(
                "liger_kernels",
                self.liger_kernels,
                "at most one of 'fused_linear_cross_entropy' and 'cross_entropy'",
            )
        if uses_liger_switches(self.kernels) and (clash := switch_conflict(self.kernels, switches)):
            raise ConfigError("liger_kernels", self.liger_kernels, clash)
        object.__setattr__(self, "liger_kernels", switches)
        check_int("steps", self.steps, 1, 100_000)
        check_int("warmup", self.warmup, 0, 10_000)
        check_choice("timing", self.timing, TIMINGS)
        check_int("min_timed_steps", self.min_timed_steps, 1, 100_000)
        check_int("timing_cap_s", self.timing_cap_s, 0, 7 * 24 * 3600)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("device", self.device, DEVICES)
        check_int("seed", self.seed, 0, 2**32 - 1)
        if (
            isinstance(self.learning_rate, bool)
            or not isinstance(self.learning_rate, (int, float))
            or not 0 < self.learning_rate < 1
        ):
            raise ConfigError("learning_rate", self.learning_rate, "a number between 0 and 1")
        if not isinstance(self.profile, bool):
            raise ConfigError("profile", self.profile, "True or False")
        check_int("profile_steps", self.profile_steps, 1, 100)
        if self.profile and self.timing == "steps" and self.profile_steps > self.steps:
            raise ConfigError("profile_steps", self.profile_steps, f"at most steps ({self.steps})")
        check_int("timeout_s", self.timeout_s, 1, 7 * 24 * 3600)
        if not valid_cap(self.gpu_memory_gib):
            raise ConfigError("gpu_memory_gib", self.gpu_memory_gib, cap_rule())
        self._check_scale_out()
        check_choice("engine", self.engine, ENGINE_NAMES)
        if self.engine != WORKBOOK and self.sharding != "none":
            raise ConfigError("engine", self.engine, f"{WORKBOOK!r} with sharding (TRL runs on one device)")
        if self.engine != WORKBOOK and self.profile and self.timing == "steps":
            raise ConfigError("timing", self.timing, f"'epoch' for a profiled row of engine={self.engine!r} (its "
                              "trace is one more epoch after the timed ones)")  # fmt: skip
        self._check_adapter()
        if not isinstance(self.extra, dict):
            raise ConfigError("extra", self.extra, "a dict")

    def _check_adapter(self) -> None:
        """The adapter and its LoRA settings (each named in its error), and what it cannot run with yet."""
        check_choice("lora_input_cast", self.lora_input_cast, LORA_INPUT_CASTS)
        check_choice("lora_epilogue", self.lora_epilogue, LORA_EPILOGUES)
        adapter = self.adapter_settings
        if self.lora_input_cast == "off" and self.dtype == "bf16":
            raise ConfigError("lora_input_cast", self.lora_input_cast, "'auto' or 'on' with dtype='bf16' (no autocast "
                              "casts the bf16 input for the fp32 adapters)")  # fmt: skip
        if self.dtype == MASTER_WEIGHTS and (adapter.active or self.sharding != "none"):
            raise ConfigError("dtype", self.dtype, "another dtype with an adapter or sharding (LoRA's adapters are "
                              "fp32 already; under fsdp2, 'bf16-autocast' keeps fp32 sharded master parameters and "
                              "gathers them in bf16)")  # fmt: skip
        if adapter.active and self.sharding != "none":
            raise ConfigError("adapter", self.adapter, "'none' with sharding (an adapter trains on one GPU for now)")
        fused_head = uses_liger_switches(self.kernels) and "fused_linear_cross_entropy" in self.liger_kernels
        if adapter.active and adapter.targets_output and fused_head:
            raise ConfigError("lora_targets", self.lora_targets, "without 'lm_head' under Liger's fused linear "
                              "cross-entropy (it reads lm_head.weight, which would skip the adapter)")  # fmt: skip
        self._check_frozen_base()

    def _check_frozen_base(self) -> None:
        """A quantized frozen base (validated with the adapter) runs in an engine that loads it (Engine.frozen_bases),
        not beside a float8 kernel backend (both replace the linear layers)."""
        if self.frozen_base == BF16_BASE:
            return
        allowed = ENGINES[self.engine].frozen_bases
        if self.frozen_base not in allowed:
            raise ConfigError("frozen_base", self.frozen_base, f"one of {', '.join(allowed)} with "
                              f"engine={self.engine!r} (allowed with engine={WORKBOOK!r}: "
                              f"{', '.join(ENGINES[WORKBOOK].frozen_bases)})")  # fmt: skip
        backend = find_backend(self.kernels)
        float8 = [part for part in (backend.components if backend is not None else ()) if part in FLOAT8_BACKENDS]
        if float8:
            raise ConfigError("frozen_base", self.frozen_base, f"{BF16_BASE!r} with kernels={self.kernels!r} "
                              f"({float8[0]} swaps the same linear layers for torchao's float8 training)")  # fmt: skip

    def _check_scale_out(self) -> None:
        """GPU count, sharding and activation checkpointing: the fields that take a configuration to N GPUs."""
        check_int("gpus", self.gpus, 1, MAX_GPUS)
        check_choice("sharding", self.sharding, SHARDINGS)
        if self.gpus > 1 and self.sharding == "none":
            raise ConfigError("sharding", self.sharding, f"'fsdp2' when gpus > 1 (gpus={self.gpus})")
        check_choice("activation_checkpointing", self.activation_checkpointing, CHECKPOINTING_NAMES)
        check_int("checkpoint_every", self.checkpoint_every, 1, 1024)

    @property
    def name(self) -> str:
        """The label used in tables: the given label or one derived from the settings."""
        if self.label:
            return self.label
        adapter = f"/{self.adapter_settings.label}" if self.adapter_settings.active else ""
        if self.engine != WORKBOOK:
            return f"{ENGINES[self.engine].label}, {self.batch_label_on(self.engine)}{adapter}"
        name = f"{self.kernels}/{self.padding}/{self.attn_implementation}/b{self.batch_size}x{self.max_length}"
        if self.sharding != "none":
            name += f"/{self.sharding}x{self.gpus}"
        if self.activation_checkpointing != "none":
            every = f"{self.checkpoint_every}" if self.activation_checkpointing == "every_k" else ""
            name += f"/ckpt-{self.activation_checkpointing.replace('_k', '_')}{every}"
        return name + adapter

    @property
    def padding_settings(self) -> PaddingSettings:
        """The padding strategy and the parameters its plan and rows depend on, with the token multiple
        the kernel backend needs (float8: 16)."""
        return padding_settings_of({key: getattr(self, key) for key in (*PADDING_FIELDS, "kernels")})

    @property
    def adapter_settings(self) -> AdapterSettings:
        """The adapter and its settings (validated: a bad value names its RunConfig field)."""
        skip = skips_lora_input_cast({"adapter": self.adapter, "dtype": self.dtype, "kernels": self.kernels,
                                      "lora_input_cast": self.lora_input_cast})  # fmt: skip
        forward = lora_forward({"adapter": self.adapter, "lora_epilogue": self.lora_epilogue})
        return AdapterSettings(self.adapter, self.lora_rank, self.lora_alpha, self.lora_targets, cast_inputs=not skip,
                               frozen_base=self.frozen_base, fuse_epilogue=forward != "peft",
                               one_function=forward == "function")  # fmt: skip

    @property
    def effective_token_budget(self) -> int:
        """Tokens per step for token-budget batching."""
        return self.padding_settings.effective_token_budget

    def batch_label_on(self, engine: str) -> str:
        """How this workload batches on ``engine``, as a row's label says it (its token budget where it packs)."""
        return batch_label(engine, self.batch_size, self.max_length, self.effective_token_budget)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        data = dataclasses.asdict(self)
        data["liger_kernels"] = list(self.liger_kernels)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_record(cls, config: Mapping[str, Any]) -> RunConfig:
        """A stored record's config as a RunConfig: keys it carries beside the fields (a derived label, a
        benchmark group, the tuner's notes) are left out; the fields are validated as in :meth:`from_dict`. A
        record made before ``lora_input_cast`` or ``lora_epilogue`` existed ran PEFT's cast ("on") and forward
        ("peft")."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in config.items() if k in known}
        values.setdefault("lora_input_cast", "on")  # a record from before the setting: PEFT's cast ran
        values.setdefault("lora_epilogue", "peft")  # and PEFT's forward
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Build from a dict; unknown keys are an error that names them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(unknown[0], data[unknown[0]], "a RunConfig field: " + ", ".join(sorted(known)))
        values = dict(data)
        if "liger_kernels" in values and isinstance(values["liger_kernels"], list):
            values["liger_kernels"] = tuple(values["liger_kernels"])
        return cls(**values)
