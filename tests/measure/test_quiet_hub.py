"""A measuring process calls no hub it does not need: telemetry off always, offline for a preset on local data."""

from __future__ import annotations

import pytest

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.worker import names_nothing_on_the_hub, quiet_hub

HUB_VARIABLES = ("HF_HUB_DISABLE_TELEMETRY", "HF_HUB_OFFLINE")


@pytest.fixture
def clean_hub_env(monkeypatch):
    for name in HUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_preset_on_the_shipped_data_runs_offline_without_telemetry(clean_hub_env):
    import os

    quiet_hub(RunConfig(model="qwen3-tiny", dataset="default"))
    assert (os.environ["HF_HUB_DISABLE_TELEMETRY"], os.environ["HF_HUB_OFFLINE"]) == ("1", "1")


def test_a_hub_model_or_hub_dataset_keeps_the_hub_but_not_its_telemetry(clean_hub_env, tmp_path):
    import os

    local = tmp_path / "rows.jsonl"
    local.write_text('{"prompt": "a", "response": "b"}\n')
    assert names_nothing_on_the_hub(RunConfig(model="qwen3-tiny", dataset=str(local)))
    assert not names_nothing_on_the_hub(RunConfig(model="qwen3-tiny", dataset="openai/gsm8k"))
    assert not names_nothing_on_the_hub(RunConfig(model="Qwen/Qwen3-0.6B", dataset="default"))
    quiet_hub(RunConfig(model="Qwen/Qwen3-0.6B", dataset="default"))
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1" and "HF_HUB_OFFLINE" not in os.environ


def test_what_the_user_set_stays_as_set(clean_hub_env):
    import os

    clean_hub_env.setenv("HF_HUB_OFFLINE", "0")
    quiet_hub(RunConfig(model="qwen3-tiny", dataset="default"))
    assert os.environ["HF_HUB_OFFLINE"] == "0"
