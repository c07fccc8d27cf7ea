"""LoRA as a workload setting: RunConfig's adapter fields, their checks and names, and LoRA as its own workload."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.records import group_key, speedup, workload_fields, workload_of
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.adapters import ADAPTER_NAMES, AdapterSettings
from nbhelpers.validation import ConfigError


def test_without_an_adapter_nothing_changes():
    config = RunConfig()
    assert (config.adapter, config.lora_rank, config.lora_alpha, config.lora_targets) == ("none", 16, 32, "all-linear")
    assert not config.adapter_settings.active and "lora" not in config.name
    assert config.name == "eager/dynamic/sdpa/b4x128"


def test_lora_names_itself_in_the_label():
    assert RunConfig(adapter="lora").name == "eager/dynamic/sdpa/b4x128/lora-r16"
    custom = RunConfig(adapter="lora", lora_rank=8, lora_alpha=8, lora_targets="q_proj, v_proj")
    assert custom.name.endswith("/lora-r8-a8-q_proj+v_proj")
    assert custom.adapter_settings.target_modules == ["q_proj", "v_proj"]
    assert RunConfig(adapter="lora").adapter_settings.target_modules == "all-linear"
    assert RunConfig(adapter="lora", engine="trl").name.endswith("/lora-r16")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("adapter", "qlora"),
        ("adapter", None),
        ("lora_rank", 0),
        ("lora_rank", 8.0),
        ("lora_rank", True),
        ("lora_alpha", 0),
        ("lora_alpha", "16"),
        ("lora_targets", ""),
        ("lora_targets", "q_proj,,v_proj"),
        ("lora_targets", "layers.0.q_proj"),
        ("lora_targets", "q-proj"),
        ("lora_targets", ["q_proj"]),
    ],
)
def test_a_bad_adapter_value_names_its_parameter(field, value):
    with pytest.raises(ConfigError) as caught:
        RunConfig(**({"adapter": "lora"} | {field: value}))
    assert caught.value.parameter == field
    assert f"{field} must be" in str(caught.value)


def test_what_lora_cannot_run_with_yet_is_refused_by_name():
    with pytest.raises(ConfigError, match="adapter='lora'.*sharding") as caught:
        RunConfig(adapter="lora", gpus=2, sharding="fsdp2")
    assert caught.value.parameter == "adapter"
    fused = {"kernels": "liger", "liger_kernels": ("fused_linear_cross_entropy",)}
    with pytest.raises(ConfigError, match="lm_head") as caught:
        RunConfig(adapter="lora", lora_targets="q_proj,lm_head", **fused)
    assert caught.value.parameter == "lora_targets"
    RunConfig(adapter="lora", lora_targets="q_proj,lm_head")  # plain cross-entropy reads the adapted lm head
    RunConfig(adapter="lora", **fused)  # "all-linear" leaves the lm head out
    RunConfig(gpus=2, sharding="fsdp2", lora_rank=8)  # LoRA settings without an adapter change nothing


def test_adapter_fields_round_trip_through_a_record():
    config = RunConfig(adapter="lora", lora_rank=4, lora_alpha=8, lora_targets="mlp.down_proj")
    assert RunConfig.from_dict(config.to_dict()) == config
    assert RunConfig.from_record(config.to_dict() | {"label": config.name}).adapter_settings == AdapterSettings(
        "lora", 4, 8, "mlp.down_proj"
    )
    assert ADAPTER_NAMES == ("none", "lora")


def test_lora_and_full_fine_tuning_are_different_workloads(make_record):
    full = make_record("full", 1000.0)
    old = make_record("old full", 1000.0)  # written before the adapter fields existed
    full.config.update(adapter="none", lora_rank=8)  # LoRA settings without an adapter change nothing
    lora = make_record("lora", 3000.0, adapter="lora", lora_rank=16, lora_alpha=32, lora_targets="all-linear")
    assert workload_fields(full.config) == workload_fields(old.config)
    assert speedup(full, old) == 1.0
    assert workload_fields(lora.config) != workload_fields(full.config)
    assert "lora r16 alpha 32 on all-linear" in workload_of(lora)
    assert group_key(lora) != group_key(full)
    with pytest.raises(ValueError, match="one workload"):
        speedup(lora, full)
    rank8 = make_record("lora r8", 3100.0, adapter="lora", lora_rank=8, lora_alpha=32, lora_targets="all-linear")
    with pytest.raises(ValueError, match="one workload"):
        speedup(rank8, lora)
