"""Settings checked against the model's own shape, before any work: the LoRA rank, checkpoint_every."""

from __future__ import annotations

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.model_fit import check_local_model_fit, model_fit_error
from nbhelpers.measure.runner import run_config
from nbhelpers.measure.workload import workload_from
from nbhelpers.models.loading import model_config
from nbhelpers.validation import ConfigError


def test_a_rank_above_the_hidden_size_and_a_k_above_the_layers_are_refused_with_what_the_model_allows():
    shape = model_config("qwen3-tiny")
    width, layers = shape.hidden_size, shape.num_hidden_layers
    assert model_fit_error(RunConfig(adapter="lora", lora_rank=width), shape) is None  # as wide as any layer: fine
    error = model_fit_error(RunConfig(adapter="lora", lora_rank=width + 1), shape)
    assert error.parameter == "lora_rank" and f"at most the model's hidden size, {width}" in str(error)
    assert model_fit_error(RunConfig(activation_checkpointing="every_k", checkpoint_every=layers), shape) is None
    error = model_fit_error(RunConfig(activation_checkpointing="every_k", checkpoint_every=layers + 1), shape)
    assert error.parameter == "checkpoint_every" and f"the model's {layers} decoder layers" in str(error)
    # without every_k or an adapter, the same numbers are not used: nothing to refuse
    assert model_fit_error(RunConfig(checkpoint_every=layers + 1, lora_rank=width + 1), shape) is None


def test_a_notebook_names_the_parameter_and_a_measurement_is_a_failed_record_before_any_work(tmp_path):
    width = model_config("qwen3-tiny").hidden_size
    parameters = {"MODEL": "qwen3-tiny", "ADAPTER": "lora", "LORA_RANK": width * 4}
    with pytest.raises(ConfigError, match=r"LORA_RANK=.* at most the model's hidden size"):
        workload_from(parameters, list(parameters))
    with pytest.raises(ConfigError, match="checkpoint_every"):
        check_local_model_fit(RunConfig(activation_checkpointing="every_k", checkpoint_every=1000))
    record = run_config(RunConfig(model="qwen3-tiny", device="cpu", adapter="lora", lora_rank=width * 4, steps=1,
                                  warmup=0, num_samples=2, batch_size=1, max_length=32), isolate=False)  # fmt: skip
    assert not record.ok and record.reason.startswith(f"lora_rank={width * 4} is not allowed")
    assert "phase_s" not in record.metrics  # refused before the model was built
