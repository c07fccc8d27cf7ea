"""A notebook's workload from its parameters: one RunConfig, validated before any work.

Each notebook's facade names the parameters its workload takes (keys of :data:`WORKLOAD_FIELDS`) and the fields
it fixes, and calls :func:`workload_from` with the notebook's globals. A refused value raises
:class:`~nbhelpers.validation.ConfigError` naming the notebook parameter (``BATCH_SIZE``, not ``batch_size``) and
what is allowed; a parameter under an old name (:data:`RENAMED`) is refused with its new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbhelpers.data.loading import DATA_PARAMETERS, DataParams, describe_format
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.validation import ConfigError

from .config import RunConfig
from .model_fit import check_local_model_fit

# Notebook parameter -> the RunConfig field it sets (LIGER_KERNELS: once parsed into the tuple the field holds).
WORKLOAD_FIELDS: dict[str, str] = {
    "RUN_NAME": "run_name", "MODEL": "model", **DATA_PARAMETERS,
    "BATCH_SIZE": "batch_size", "MAX_LENGTH": "max_length", "NUM_SAMPLES": "num_samples", "STEPS": "steps",
    "WARMUP": "warmup", "TIMING": "timing", "PADDING": "padding", "TOKEN_BUDGET": "token_budget",
    "PAD_TO_MULTIPLE_OF": "pad_to_multiple_of", "NUM_BUCKETS": "num_buckets", "ATTENTION": "attn_implementation",
    "KERNELS": "kernels", "LIGER_KERNELS": "liger_kernels", "DEVICE": "device", "DTYPE": "dtype", "PROFILE": "profile",
    "ACTIVATION_CHECKPOINTING": "activation_checkpointing",
    "ADAPTER": "adapter", "LORA_RANK": "lora_rank", "LORA_ALPHA": "lora_alpha", "LORA_TARGETS": "lora_targets",
    "FROZEN_BASE": "frozen_base", "GPU_MEMORY_GIB": "gpu_memory_gib",
}  # fmt: skip
DATA_NAMES = tuple(DATA_PARAMETERS)  # DATASET, DATA_FORMAT, PROMPT_FIELD, RESPONSE_FIELD, ...
ADAPTER_NAMES = ("ADAPTER", "LORA_RANK", "LORA_ALPHA", "LORA_TARGETS", "FROZEN_BASE")
RENAMED = {"BACKENDS": "KERNELS", "CAPACITY_GIB": "GPU_MEMORY_GIB"}  # old notebook parameter -> its name now


@dataclass(frozen=True)
class Workload:
    """A notebook's workload: its RunConfig, and the data and adapter parameters it was made of."""

    config: RunConfig
    data: DataParams
    adapter: AdapterSettings

    @property
    def description(self) -> str:
        """One line: the data format read from the dataset's first row, and how to override it."""
        data = self.data
        return describe_format(data.dataset, data.data_format, data.prompt_field, data.response_field)


def check_renamed(parameters: Mapping[str, Any]) -> None:
    """ConfigError for a parameter given under its old name (papermill passes unknown names through)."""
    for old, new in RENAMED.items():
        if old in parameters:
            raise ConfigError(old, parameters[old], f"passed as {new} (its name now)")


def workload_from(parameters: Mapping[str, Any], names: Sequence[str], **fixed: Any) -> Workload:
    """The workload the notebook parameters ``names`` (keys of :data:`WORKLOAD_FIELDS`, read from ``parameters``,
    a notebook's ``globals()``) and the ``fixed`` RunConfig fields make; errors name the notebook parameter."""
    check_renamed(parameters)
    missing = [name for name in names if name not in parameters]
    if missing:
        raise KeyError(f"not parameters of this notebook (not in its globals): {', '.join(missing)}")
    fields = {WORKLOAD_FIELDS[name]: parameters[name] for name in names}
    try:
        config = RunConfig(**(fields | fixed))
        check_local_model_fit(config)  # the rank and the recomputation against the model's own shape
    except ConfigError as error:
        raise _as_parameter(error, names) from None
    data = DataParams(**{field: fields[field] for field in DATA_PARAMETERS.values() if field in fields})
    adapter = AdapterSettings(config.adapter, config.lora_rank, config.lora_alpha, config.lora_targets,
                              frozen_base=config.frozen_base)  # fmt: skip
    return Workload(config, data, adapter)


def _as_parameter(error: ConfigError, names: Sequence[str]) -> ConfigError:
    """The same refusal, named by the notebook parameter that set the field (a fixed field keeps its name)."""
    parameter = next((name for name in names if WORKLOAD_FIELDS[name] == error.parameter), error.parameter)
    return ConfigError(parameter, error.value, error.allowed)


__all__ = ["ADAPTER_NAMES", "DATA_NAMES", "RENAMED", "WORKLOAD_FIELDS", "Workload", "check_renamed", "workload_from"]
