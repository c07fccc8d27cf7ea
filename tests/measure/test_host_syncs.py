"""A profiled step counts where it made the host wait for the GPU (torch's sync debug mode, stood in for here)."""

from __future__ import annotations

import warnings

import pytest
import torch

from nbhelpers.measure.host_syncs import SYNC_WARNING, count_host_syncs, short_site


def test_a_site_is_named_by_its_path_under_the_package_root():
    assert short_site("/usr/lib/python3/site-packages/fla/ops/utils/index.py", 130) == "fla/ops/utils/index.py:130"
    assert short_site("/tmp/wb/nbhelpers/kernels/fla.py", 12) == "nbhelpers/kernels/fla.py:12"
    assert short_site("/home/me/train.py", 7) == "train.py:7"


@pytest.fixture
def sync_debug_mode(monkeypatch):
    """torch.cuda's sync debug mode as a plain setting (no GPU here); the modes set, in order."""
    modes = ["default"]
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    return modes


def test_one_step_s_synchronizing_calls_are_counted_by_line(sync_debug_mode):
    def boundaries() -> None:
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)

    def item() -> None:
        warnings.warn(SYNC_WARNING, UserWarning, stacklevel=1)

    def step() -> None:
        assert sync_debug_mode[-1] == "warn"
        for _ in range(3):
            boundaries()
        item()
        warnings.warn("another warning", UserWarning, stacklevel=1)  # not a synchronization: not counted

    found = count_host_syncs(step, "cuda", top=1)
    assert found["host_syncs_per_step"] == 4
    [site] = found["host_sync_sites"]
    line = boundaries.__code__.co_firstlineno + 1
    assert site == {"site": f"test_host_syncs.py:{line}", "syncs": 3}
    assert sync_debug_mode[-1] == "default"  # restored


def test_the_mode_is_restored_when_the_step_fails(sync_debug_mode):
    def failing() -> None:
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        count_host_syncs(failing, "cuda")
    assert sync_debug_mode == ["default", "warn", "default"]


def test_on_a_cpu_nothing_is_counted_and_the_step_is_not_run():
    ran = []
    assert count_host_syncs(lambda: ran.append(1), "cpu") == {} and ran == []
