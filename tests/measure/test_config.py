"""RunConfig validation: one bad value per parameter, each error naming parameter, value and range."""

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import ConfigError

BAD_VALUES = [
    ("run_name", "bad name/with slash"),
    ("run_name", ""),
    ("run_name", "../x"),
    ("run_name", "/abs"),
    ("run_name", "name\n"),
    ("label", 3),
    ("model", ""),
    ("dataset", "  "),
    ("prompt_field", None),
    ("response_field", ""),
    ("use_chat_template", "yes"),
    ("data_format", "csv"),
    ("prompt_template", None),
    ("num_samples", 0),
    ("min_timed_steps", 0),
    ("timing_cap_s", -1),
    ("timing_cap_s", 2.5),
    ("batch_size", 0),
    ("batch_size", 2.5),
    ("batch_size", True),
    ("max_length", 4),
    ("padding", "ragged"),
    ("pad_to_multiple_of", 0),
    ("num_buckets", 0),
    ("token_budget", -1),
    ("attn_implementation", "flash3"),
    ("kernels", "tensorrt"),
    ("liger_kernels", ("rope", "layer_norm")),
    ("liger_kernels", "rope"),
    ("liger_kernels", ("cross_entropy", "fused_linear_cross_entropy")),
    ("steps", 0),
    ("warmup", -1),
    ("timing", "epochs"),
    ("dtype", "fp8"),
    ("device", "tpu"),
    ("seed", -1),
    ("learning_rate", 0),
    ("learning_rate", 2.0),
    ("profile", 1),
    ("profile_steps", 0),
    ("timeout_s", 0),
    ("extra", []),
    ("gpus", 0),
    ("sharding", "ddp"),
    ("activation_checkpointing", "selective"),
    ("checkpoint_every", 0),
    ("engine", "accelerate"),
    ("adapter", "qlora"),
    ("lora_rank", 0),
    ("lora_alpha", -1),
    ("lora_targets", "q_proj,,v_proj"),
    ("lora_input_cast", "never"),
    ("lora_epilogue", "cutlass"),
    ("frozen_base", "int4"),
    ("gpu_memory_gib", -24),
]


def test_a_trl_engine_refuses_sharding_and_may_be_profiled():
    with pytest.raises(ConfigError, match="engine='trl_defaults'"):
        RunConfig(engine="trl_defaults", sharding="fsdp2", gpus=2)
    assert RunConfig(engine="trl_defaults", profile=True, timing="epoch").profile  # one more epoch, profiled
    assert RunConfig(engine="trl_defaults").name == "TRL SFTTrainer defaults, b4x128"


@pytest.mark.parametrize(("parameter", "value"), BAD_VALUES)
def test_each_bad_value_names_parameter_value_and_allowed(parameter, value):
    with pytest.raises(ConfigError) as caught:
        RunConfig(**{parameter: value})
    error = caught.value
    assert error.parameter == parameter
    assert str(error).startswith(f"{parameter}={value!r} is not allowed: {parameter} must be ")
    assert error.allowed


def test_every_field_has_a_bad_value_case():
    import dataclasses

    covered = {p for p, _ in BAD_VALUES}
    assert {f.name for f in dataclasses.fields(RunConfig)} == covered


def test_cross_field_rules():
    with pytest.raises(ConfigError, match="token_budget"):
        RunConfig(max_length=256, token_budget=100)
    with pytest.raises(ConfigError, match="profile_steps"):
        RunConfig(profile=True, steps=2, profile_steps=3)
    with pytest.raises(ConfigError, match="sharding='none' is not allowed: sharding must be 'fsdp2' when gpus > 1"):
        RunConfig(gpus=2)
    assert RunConfig(gpus=2, sharding="fsdp2").name.endswith("/fsdp2x2")


def test_defaults_are_valid_and_round_trip():
    config = RunConfig(batch_size=8, padding="packed", liger_kernels=["rope"])
    assert config.liger_kernels == ("rope",)
    again = RunConfig.from_dict(config.to_dict())
    assert again == config
    assert config.effective_token_budget == 8 * 128
    assert config.name == "eager/packed/sdpa/b8x128"
    assert config.replace(label="x").name == "x"


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="batchsize"):
        RunConfig.from_dict({"batchsize": 4})
