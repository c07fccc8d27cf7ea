"""The memory cap (RunConfig.gpu_memory_gib): its rule, its arithmetic on a fake device, its record fields, and the
planner's refusal of a step planned over it before any work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nbhelpers.measure import memory_cap, step, worker
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.memory_cap import GIB, apply_memory_cap, cap_refusal
from nbhelpers.measure.memory_cap import memory_cap as capped
from nbhelpers.measure.memory_plan import H200_USABLE_GIB, cap_plan_refusal, plan_memory, settings_from_config
from nbhelpers.models import loading
from nbhelpers.models.families import model_shape, preset_config
from nbhelpers.validation import ConfigError


class FakeDevice:
    """torch.cuda's memory functions for one GPU of ``total_gib``, recording the fraction set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, total_gib: float) -> None:
        import torch

        self.total = int(total_gib * GIB)
        self.fractions: list[tuple[float, int]] = []
        monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=self.total))
        monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, i=0: self.fractions.append((f, i)))
        monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda i=0: self.fractions[-1][0])


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), True, "24", 5000])
def test_a_bad_cap_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match="gpu_memory_gib") as error:
        RunConfig(gpu_memory_gib=value)
    assert memory_cap.cap_rule() in str(error.value)


def test_a_cap_sets_the_allocators_fraction_and_the_record_says_so(monkeypatch):
    device = FakeDevice(monkeypatch, 139.8)
    fields = apply_memory_cap(24, "cuda", index=1)
    assert device.fractions == [(24 * GIB / device.total, 1)]
    assert fields == {"memory_cap_gib": 24.0, "memory_cap_enforced": True, "device_memory_gib": device.total / GIB}
    assert loading.device_memory_bytes("cuda") == int(24 * GIB)  # the state refusal sees the cap, not the device


def test_a_cap_is_lifted_after_its_measurement(monkeypatch):
    device = FakeDevice(monkeypatch, 80)
    with capped(48, "cuda") as fields:
        assert fields["memory_cap_enforced"]
    assert device.fractions[-1] == (1.0, 0)


def test_set_up_outside_the_step_gets_the_whole_device_and_the_cap_comes_back(monkeypatch):
    import torch

    device = FakeDevice(monkeypatch, 80)
    resets = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: resets.append("empty"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda index=0: resets.append("peak"))
    with capped(24, "cuda"):
        with memory_cap.cap_lifted("cuda"):
            assert device.fractions[-1] == (1.0, 0)  # a peer's bf16 weights built and saved under no cap
            assert loading.device_memory_bytes("cuda") == device.total
        assert device.fractions[-1] == (24 * GIB / device.total, 0)  # the step runs under the cap again
        assert resets == ["empty", "peak"]  # and its peak is its own
    with memory_cap.cap_lifted("cpu"):
        pass  # nothing to lift on a CPU
    assert device.fractions[-1] == (1.0, 0)


def test_a_cap_above_the_device_is_refused_before_any_fraction_is_set(monkeypatch):
    device = FakeDevice(monkeypatch, 80)
    assert "more than this device has (80.0 GiB)" in cap_refusal(96, device.total)
    with pytest.raises(ValueError, match="gpu_memory_gib=96"):
        apply_memory_cap(96, "cuda")
    assert device.fractions == []


def test_no_cap_touches_nothing_and_a_cpu_cap_is_recorded_as_not_enforced(monkeypatch):
    device = FakeDevice(monkeypatch, 80)
    assert apply_memory_cap(0, "cuda") == {}
    assert apply_memory_cap(24, "cpu") == {"memory_cap_gib": 24.0, "memory_cap_enforced": False}
    assert device.fractions == []


def test_the_planner_plans_for_the_cap():
    config = RunConfig(model="qwen3-8b", batch_size=1, max_length=2048)
    assert settings_from_config(config).capacity_gib == H200_USABLE_GIB
    assert settings_from_config(config.replace(gpu_memory_gib=24)).capacity_gib == 24
    assert settings_from_config(config.replace(gpu_memory_gib=24), capacity_gib=80).capacity_gib == 80


def test_a_step_planned_over_its_cap_is_a_failed_record_with_the_planners_reason_before_any_work(monkeypatch):
    config = RunConfig(model="qwen3-8b", batch_size=1, max_length=2048, device="cpu", gpu_memory_gib=24)
    shape = model_shape(preset_config("qwen3-8b"))
    planned = plan_memory(shape, settings_from_config(config)).total_gib
    assert planned > 24  # full fine-tuning of 8B parameters: weights, gradients and moments alone are over 24 GiB
    reason = cap_plan_refusal(config, shape)
    assert reason.startswith("gpu_memory_gib=24: the memory planner puts this step's peak at")
    assert f"{planned:,.1f} GiB per GPU" in reason

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(step, "load_tokenizer", no_work)
    monkeypatch.setattr(step, "build_for", no_work)
    try:
        worker.measure_config(config)
    except Exception as error:  # noqa: BLE001 - the worker turns it into the failed record below
        record = worker.failed_record(config, worker.failure_reason(error))
    assert not record.ok and record.reason == reason
    assert record.config["gpu_memory_gib"] == 24


def test_a_step_that_fits_its_cap_is_not_refused():
    config = RunConfig(model="qwen3-tiny", gpu_memory_gib=24)
    assert cap_plan_refusal(config, model_shape(preset_config("qwen3-tiny"))) == ""
    assert cap_plan_refusal(RunConfig(model="qwen3-8b"), model_shape(preset_config("qwen3-8b"))) == ""  # no cap


def test_a_capped_cpu_step_records_its_cap_as_not_enforced():
    config = RunConfig(model="qwen3-tiny", num_samples=4, batch_size=2, max_length=64, steps=1, warmup=0,
                       device="cpu", gpu_memory_gib=24)  # fmt: skip
    record = worker.measure_config(config)
    assert record.ok, record.reason
    assert record.metrics["memory_cap_gib"] == 24 and record.metrics["memory_cap_enforced"] is False
