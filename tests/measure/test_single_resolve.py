"""One measurement resolves its model once: the timed step and its parity probe share the resolved model, and
nothing on the way looks the name up again (preset table, folder or hub)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from nbhelpers.measure import step as step_module
from nbhelpers.measure import worker
from nbhelpers.measure.config import RunConfig
from nbhelpers.models import loading

TINY = RunConfig(run_name="resolve", batch_size=2, max_length=64, num_samples=4, steps=1, warmup=0, padding="packed",
                 extra={"parity_probe_samples": 2})  # fmt: skip
LOOKUPS = ("model_source", "preset_config", "family_of_model", "_pretrained_config")


def _count(monkeypatch: pytest.MonkeyPatch, counts: Counter[str], name: str) -> None:
    real: Callable[..., Any] = getattr(loading, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(loading, name, counted)


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each of the model look-ups runs (a preset's config, its source, its family by name)."""
    counts: Counter[str] = Counter()
    for name in LOOKUPS:
        _count(monkeypatch, counts, name)
    return counts


def test_a_measurement_and_its_parity_probe_resolve_the_model_once(runs_root, lookups):
    record = worker.measure_config(TINY)
    assert record.ok, record.reason
    assert "error" not in record.metrics["parity_probe"]  # the probe built the model from the same resolve
    assert lookups == Counter({"model_source": 1, "preset_config": 1, "family_of_model": 1})


def test_building_from_a_resolved_model_looks_nothing_up(lookups):
    resolved = loading.resolve_model("qwen3-tiny")
    lookups.clear()
    first = step_module.build_for(TINY, resolved, "cpu", "fp32")
    second = step_module.build_for(TINY, resolved, "cpu", "fp32")
    assert not lookups
    assert first.config is not resolved.config and second.config is not first.config  # the resolved config stays


def test_the_resolved_family_refuses_before_anything_is_built(monkeypatch):
    resolved = loading.resolve_model("qwen3.5-tiny")
    assert resolved.family is not None and resolved.boundaries and resolved.preset

    def no_build(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built before the refusal")

    monkeypatch.setattr(loading, "_from_preset", no_build)
    with pytest.raises(ValueError, match="model='qwen3.5-tiny':"):
        loading.build_resolved(resolved, "flex_attention")  # refused by the hybrid family's attention list


def test_a_kernel_backend_the_family_lacks_is_refused_before_anything_is_built(monkeypatch):
    def no_build(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built before the refusal")

    monkeypatch.setattr(step_module, "build_resolved", no_build)
    dense = RunConfig(run_name="resolve", kernels="fla", max_length=64, num_samples=4, steps=1, warmup=0)
    with pytest.raises(ValueError, match="model='qwen3-tiny': kernels='fla' is not supported by the qwen3 family"):
        step_module.build_for(dense, loading.resolve_model("qwen3-tiny"), "cpu", "fp32")
