"""Watch a real training run: real tok/s, padding, loss tokens, MFU, peak memory and, every N steps, a profiler
window (launches per step, kernel-time categories, nominal utilization), with warnings that name the notebook
that fixes what they see. Records go to the run store (kind ``monitor``) for notebook 04.

``Monitor`` drives a plain training loop; ``attach(trainer)`` (or ``MonitorCallback``) a Trainer or SFTTrainer.
"""

from typing import Any

from nbhelpers.monitor.alerts import HIGH_PADDING_FRACTION, KERNEL_BOUND_MFU, KERNEL_BOUND_UTILIZATION, Alert
from nbhelpers.monitor.core import LOG_PREFIX, MONITOR_KIND, Monitor, MonitorWarning
from nbhelpers.monitor.counting import BatchCount, count_batch

_FROM_CALLBACK = ("MonitorCallback", "attach")  # they import transformers' Trainer (and torch): on first use only


def __getattr__(name: str) -> Any:
    if name in _FROM_CALLBACK:
        from nbhelpers.monitor import callback

        return getattr(callback, name)
    raise AttributeError(f"module 'nbhelpers.monitor' has no attribute {name!r}")

__all__ = [
    "HIGH_PADDING_FRACTION",
    "KERNEL_BOUND_MFU",
    "KERNEL_BOUND_UTILIZATION",
    "LOG_PREFIX",
    "MONITOR_KIND",
    "Alert",
    "BatchCount",
    "Monitor",
    "MonitorCallback",
    "MonitorWarning",
    "attach",
    "count_batch",
]
