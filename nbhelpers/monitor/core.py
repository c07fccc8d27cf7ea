"""The monitor: counts each step's batch, times it, and every logging interval turns that into real tok/s, padding,
MFU, peak memory and (every N steps) a profiler window's figures, written to the run store and returned for logs.

A training loop drives it with ``begin_step`` / ``add_batch`` / ``end_step`` (or the ``step(batch)`` context
manager); :mod:`nbhelpers.monitor.callback` drives it from a Trainer. Step time runs from the step's start to its
end: loading the next batch, logging and evaluation between steps are not in it. On CUDA a step is timed by an
event pair read when its interval closes, so the job's queue is never drained between steps
(:mod:`nbhelpers.monitor.timing`); a profiler window's steps, and steps on other devices, are timed on the host
after a device sync. Rates cover the steps that ran without the profiler; a window's steps are its cost.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from nbhelpers.measure.env import peak_flops, safe_environment, sync_device
from nbhelpers.measure.metrics import mfu, model_flops
from nbhelpers.measure.store import RunRecord, RunStore, run_dir
from nbhelpers.models.adapters import adapter_matmul_parameters, frozen_matmul_parameters
from nbhelpers.models.families import model_shape
from nbhelpers.models.shape import ModelShape
from nbhelpers.validation import check_int, check_run_name

from .alerts import FALLBACK_KERNEL, Alert, fallback_alert, kernel_bound_alert, padding_alert
from .counting import EMPTY, BatchCount, batch_tensors, count_batch
from .timing import StepTime, StepTimer
from .window import MonitorWindow, WindowResult, WindowSchedule

MONITOR_KIND = "monitor"  # RunRecord.kind of the monitor's records: one per logging interval
LOG_PREFIX = "monitor/"  # prefix of the figures put into a Trainer's logs (TensorBoard groups on "/")
# The figures a Trainer's logs receive (numbers only; bookkeeping such as step counts stays in the record).
LOGGED_FIGURES = (
    "real_tokens_per_s", "positions_per_s", "loss_tokens_per_s", "padding_fraction", "real_tokens", "loss_tokens",
    "positions", "mfu", "peak_memory_gib", "step_time_median_s", "launches_per_step", "kernel_time_per_step_us",
    "nominal_utilization", "window_mfu", "short_share_of_launches", "idle_share", "window_time_s", "window_cost_s",
)  # fmt: skip
RECENT_STEPS = 64  # unprofiled step times kept for the median a window's cost is measured against


class MonitorWarning(UserWarning):
    """A monitor alert: something in the running job that a notebook of the workbook fixes."""


@dataclass
class StepSample:
    """One finished step: its number, duration, whether the profiler was on, and its counts; an event-timed
    step keeps host copies of its batch tensors (``batches``) until its interval closes and counts them then."""

    step: int
    duration: StepTime
    profiled: bool
    count: BatchCount | None = None
    flops: float | None = None
    batches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def time_s(self) -> float:
        return self.duration.seconds()


@dataclass
class StepHandle:
    """What ``Monitor.step`` yields; after the block, ``logs`` holds an interval's figures when one closed."""

    logs: dict[str, Any] = field(default_factory=dict)


class Monitor:
    """Watches a real training run and writes kind-"monitor" records to ``runs/<run_name>/records.jsonl``.

    ``profile_every``: a profiler window of ``profile_warmup`` + ``profile_steps`` steps starts at every step
    number divisible by it (0: never). ``log_every``: close an interval every that many steps in ``end_step``
    (None: only when ``flush`` is called, as the Trainer callback does at each of the Trainer's logs).
    ``peak_flops``: FLOP/s for MFU; None takes the peak this machine's measured records use (the GPU's datasheet
    row, bf16 dense; else a matmul measured once per machine and cached).
    """

    def __init__(
        self,
        run_name: str = "default",
        *,
        model: Any = None,
        profile_every: int = 0,
        profile_steps: int = 1,
        profile_warmup: int = 1,
        log_every: int | None = None,
        peak_flops: float | None = None,
        keep_traces: bool = False,
        label: str = "",
        root: Any = None,
        source: str = "loop",
        model_name: str = "",
    ) -> None:
        check_run_name(run_name, "run_name")
        check_int("profile_every", profile_every, 0, 10**9)
        check_int("profile_steps", profile_steps, 1, 100)
        check_int("profile_warmup", profile_warmup, 0, 100)
        if log_every is not None:
            check_int("log_every", log_every, 1, 10**9)
        number = isinstance(peak_flops, (int, float)) and not isinstance(peak_flops, bool)
        if peak_flops is not None and not (number and math.isfinite(peak_flops) and peak_flops > 0):
            raise ValueError(f"peak_flops={peak_flops!r}: must be a positive number of FLOP/s, or None")
        if profile_every and profile_every < profile_warmup + profile_steps:
            raise ValueError(
                f"profile_every={profile_every}: must be 0 or at least profile_warmup + profile_steps "
                f"({profile_warmup + profile_steps}), so windows never overlap"
            )
        self.run_name, self.label, self.source = run_name, label or f"monitor ({source})", source
        self.model_name = model_name  # as the job names its model (preset, folder, hub id); else read off the model
        self.log_every = log_every
        self.folder = run_dir(run_name, root)
        self.store = RunStore(self.folder / RunStore.FILENAME).check_writable()
        self.schedule = WindowSchedule(profile_every, profile_warmup, profile_steps)
        self.keep_traces = keep_traces
        self._peak_arg = float(peak_flops) if peak_flops is not None else None
        self.model: Any = None
        self.shape: ModelShape | None = None
        self._flops_note = ""
        self.frozen_parameters = 0
        self.adapter_parameters = 0
        self.device = "cpu"
        self.device_index: int | None = None
        self.rank = 0
        self.peak_flops: float | None = None
        self.peak_source = ""
        self.environment: dict[str, Any] = {}
        self.window: MonitorWindow | None = None
        self.records: list[RunRecord] = []
        self.alerts: list[Alert] = []
        self._warned: set[str] = set()
        self._samples: list[StepSample] = []
        self._recent: list[StepTime] = []
        self._windows: list[WindowResult] = []
        self._pending: dict[tuple[int, tuple[int, ...]], dict[str, Any]] = {}
        self._step_open: tuple[int, bool] | None = None
        self.timer = StepTimer("cpu")
        self._steps = 0
        self.session = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} {uuid.uuid4().hex[:6]}"
        if model is not None:
            self.bind(model)

    # -- set-up -------------------------------------------------------------------------------------------
    def bind(self, model: Any) -> Monitor:
        """Read the model's shape (FLOPs), device (sync, memory, peak) and kernel paths (fallback alert)."""
        import torch

        from nbhelpers.kernels.hybrid_paths import TORCH, layer_paths

        self.model = model
        config = getattr(model, "config", None)
        try:
            self.shape = model_shape(config) if config is not None else None
            self._flops_note = "" if config is not None else "the model has no config to count FLOPs from"
        except (AttributeError, TypeError, ValueError) as error:  # not a decoder config the FLOP count knows
            self.shape, self._flops_note = None, f"cannot count FLOPs from the model's config ({error})"
        self.frozen_parameters = frozen_matmul_parameters(model) if hasattr(model, "parameters") else 0
        self.adapter_parameters = adapter_matmul_parameters(model) if hasattr(model, "modules") else 0
        parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
        self.device = parameter.device.type if parameter is not None else "cpu"
        self.device_index = parameter.device.index if parameter is not None else None
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.rank = torch.distributed.get_rank() if distributed else 0  # each rank counts its own batches
        if self._peak_arg is not None:
            self.peak_flops, self.peak_source = self._peak_arg, "given: peak_flops"
        else:  # the peak the measured records of this machine use: a datasheet row, else a matmul measured once
            fp32 = parameter is not None and parameter.dtype == torch.float32 and self.device == "cpu"
            peak = peak_flops(self.device, "fp32" if fp32 else "bf16")
            self.peak_flops, self.peak_source = peak.flops_per_s, peak.source
        self.environment = safe_environment(self.device)
        self.timer = StepTimer(self.device, self.device_index)
        self.window = MonitorWindow(
            self.folder / "traces", self.device, self.schedule, self.peak_flops, self.keep_traces,
            prefix=f"monitor-rank{self.rank}" if distributed else "monitor",
        )  # fmt: skip
        self._alert(fallback_alert(layer_paths(model), TORCH))
        return self

    @property
    def steps_done(self) -> int:
        """The number of the last finished step (0 before the first)."""
        return self._steps

    # -- one step -----------------------------------------------------------------------------------------
    def begin_step(self, step: int | None = None) -> None:
        """Start step ``step`` (default: the next one); opens a profiler window when one is due."""
        if self.model is None:
            raise RuntimeError("the monitor has no model: pass model= or call bind(model) first")
        number = step if step is not None else self._steps + 1
        window = self.window
        # A window's step is timed on the host, from before the profiler starts (starting it is part of its cost).
        self.timer.start(synced=window is not None and (window.running or window.schedule.due(number)))
        profiled = window.begin_step(number) if window is not None else False
        self._step_open = (number, profiled)

    def add_batch(self, batch: Mapping[str, Any]) -> None:
        """Count a batch of the current step (one per micro-batch; the same tensors seen twice count once).

        GPU tensors are copied to the host without waiting (``non_blocking``: pinned memory, in stream order):
        reading them there now would drain the job's queue; they are counted once the step is known done."""
        tensors = batch_tensors(batch)
        ids = tensors["input_ids"]
        key = (ids.data_ptr(), tuple(ids.shape))
        host = {k: v.to("cpu", non_blocking=True) if getattr(v, "is_cuda", False) else v for k, v in tensors.items()}
        self._pending.setdefault(key, {}).update(host)  # a second forward may bring the labels

    def end_step(self) -> dict[str, Any] | None:
        """Finish the step; when ``log_every`` steps have passed, close the interval and return its figures."""
        if self._step_open is None:
            raise RuntimeError("end_step() without begin_step()")
        number, profiled = self._step_open
        duration = self.timer.stop()
        self._step_open = None
        sample = StepSample(number, duration, profiled, batches=list(self._pending.values()))
        self._pending = {}
        if not duration.pending:  # the step was synced: its host copies are complete, count them now
            self._count(sample)
        self._samples.append(sample)
        self._steps = number
        if not profiled:
            self._recent = (self._recent + [duration])[-RECENT_STEPS:]
        elif self.window is not None:
            result = self.window.end_step(duration.seconds(), sample.flops or 0.0)
            if result is not None:
                self._windows.append(result)
        if self.log_every is not None and len(self._samples) >= self.log_every:
            return self.flush()
        return None

    @contextmanager
    def step(self, batch: Mapping[str, Any] | None = None) -> Iterator[StepHandle]:
        """One step of a plain training loop: ``with monitor.step(batch) as s: ...``; then ``s.logs``."""
        handle = StepHandle()
        self.begin_step()
        if batch is not None:
            self.add_batch(batch)
        try:
            yield handle
        except BaseException:
            self._pending, self._step_open = {}, None
            if self.window is not None:
                self.window.stop()
            raise
        handle.logs = self.end_step() or {}

    # -- intervals ----------------------------------------------------------------------------------------
    def flush(self) -> dict[str, Any]:
        """Close the interval: its figures (empty when no step finished since the last), also stored as a record."""
        if not self._samples and not self._windows:
            return {}
        figures = self._interval(self._samples, self._windows)
        self._samples, self._windows = [], []
        found = [padding_alert(figures.get("padding_fraction"))]
        found.append(kernel_bound_alert(
            figures.get("nominal_utilization"), figures.get("window_mfu", figures.get("mfu")), figures.get("trace_unit")
        ))  # fmt: skip
        figures["warnings"] = [a.to_dict() for a in self.alerts + [a for a in found if a is not None]]
        for alert in found:
            self._alert(alert)
        record = RunRecord(
            config={"run_name": self.run_name, "label": self.label, "model": self._model_name(), "device": self.device,
                    "rank": self.rank, "source": self.source, "session": self.session,
                    "profile_every": self.schedule.every, "profile_steps": self.schedule.active,
                    "profile_warmup": self.schedule.warmup},
            kind=MONITOR_KIND, notebook=self.source, metrics=figures, environment=self.environment,
            artifacts={"trace": figures["trace"]} if figures.get("trace") else {},
        )  # fmt: skip
        self.records.append(self.store.append(record))
        return figures

    def close(self) -> dict[str, Any]:
        """End of training: drop an unfinished profiler window and close the last interval."""
        if self.window is not None:
            self.window.stop()
        self._pending, self._step_open = {}, None
        return self.flush()

    @staticmethod
    def scalar_logs(figures: Mapping[str, Any]) -> dict[str, float]:
        """The :data:`LOGGED_FIGURES` that are numbers, prefixed with ``monitor/`` (what TensorBoard and MLflow
        take as metrics; a figure that is None, such as MFU without a peak, is left out), and after a profiler
        window each top kernel category's share of kernel time as ``monitor/time_share/<category>``."""
        scalars = {
            f"{LOG_PREFIX}{key}": float(figures[key]) for key in LOGGED_FIGURES
            if isinstance(figures.get(key), (int, float)) and not isinstance(figures.get(key), bool)
        }  # fmt: skip
        for row in figures.get("top_categories") or []:
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(row["category"]))  # "softmax/loss" -> "softmax_loss"
            scalars[f"{LOG_PREFIX}time_share/{name}"] = float(row["share_of_time"])
        return scalars

    # -- internals ----------------------------------------------------------------------------------------
    def _count(self, sample: StepSample) -> None:
        """Count a step's batches (host tensors) and its model FLOPs; its tensors are then let go."""
        count = sum((count_batch(b) for b in sample.batches), EMPTY) if sample.batches else EMPTY
        sample.count, sample.batches = count, []
        if self.shape is not None:
            lengths = count.sequence_lengths
            sample.flops = model_flops(self.shape, lengths, self.frozen_parameters, self.adapter_parameters)

    def _settle(self, samples: list[StepSample]) -> None:
        """Every sample counted: one device sync for the interval (its host copies complete), then the counts."""
        waiting = [s for s in samples if s.count is None]
        if waiting:
            sync_device(self.device)
            for sample in waiting:
                self._count(sample)

    def _interval(self, samples: list[StepSample], windows: list[WindowResult]) -> dict[str, Any]:
        self._settle(samples)
        total = sum((s.count for s in samples if s.count is not None), EMPTY)
        timed = [s for s in samples if not s.profiled] or samples
        rated = sum((s.count for s in timed if s.count is not None), EMPTY)
        time_s = sum(s.time_s for s in timed)
        figures: dict[str, Any] = {
            "step": samples[-1].step if samples else self._steps,
            "first_step": samples[0].step if samples else self._steps,
            "steps": len(samples),
            "profiled_steps": sum(s.profiled for s in samples),
            "rated_steps": len(timed),
            "time_s": time_s,
            "step_time_median_s": statistics.median(s.time_s for s in timed) if timed else None,
            "positions": total.positions,
            "real_tokens": total.real,
            "loss_tokens": total.loss,
            "padding_fraction": total.padding_fraction if total.positions else None,
            "real_tokens_per_s": rated.real / time_s if time_s > 0 else None,
            "positions_per_s": rated.positions / time_s if time_s > 0 else None,
            "loss_tokens_per_s": rated.loss / time_s if time_s > 0 and rated.loss is not None else None,
        }
        figures.update(self._mfu(timed, time_s))
        figures.update(self._memory())
        if windows:
            figures.update(self._window_figures(windows[-1]))
        return figures

    def _mfu(self, timed: list[StepSample], time_s: float) -> dict[str, Any]:
        flops = [s.flops for s in timed]
        useful = sum(flops) if flops and None not in flops else None
        value, note = None, self.peak_source
        if useful is None:
            note = self._flops_note
        elif self.peak_flops and time_s > 0:
            value, note = mfu(useful, time_s, self.peak_flops), ""
        return {"model_flops": useful, "mfu": value, "mfu_note": note, "peak_flops": self.peak_flops,
                "peak_flops_source": self.peak_source, "frozen_parameters": self.frozen_parameters,
                "adapter_parameters": self.adapter_parameters}  # fmt: skip

    def _memory(self) -> dict[str, Any]:
        if self.device != "cuda":
            return {"peak_memory_gib": None, "memory_note": f"peak memory is read on CUDA devices only ({self.device})"}
        import torch

        return {"peak_memory_gib": torch.cuda.max_memory_allocated(self.device_index) / 2**30, "memory_note": ""}

    def _window_figures(self, window: WindowResult) -> dict[str, Any]:
        s = window.summary
        median = statistics.median(t.seconds() for t in self._recent) if self._recent else None
        cost = window.time_s - window.steps * median if median is not None else None
        return {
            "window_step": window.first_step,
            "window_steps": window.steps,
            "window_active_steps": window.active_steps,
            "trace_unit": s.get("unit"),
            "launches_per_step": s.get("launches_per_step"),
            "kernel_time_per_step_us": s.get("kernel_time_per_step_us"),
            "nominal_utilization": s.get("nominal_utilization"),
            "window_mfu": s.get("mfu"),
            "short_share_of_launches": s.get("short_share_of_launches"),
            "idle_share": s.get("idle_share"),
            "top_categories": s.get("top_categories"),
            "window_time_s": window.time_s,
            "window_export_s": window.export_time_s,
            "window_cost_s": cost,
            "window_cost_note": "" if median is not None else "no unprofiled step yet to compare with",
            "trace": window.trace,
        }

    def _alert(self, alert: Alert | None) -> None:
        if alert is None:
            return
        if alert.code not in self._warned:
            self._warned.add(alert.code)
            warnings.warn(f"nbhelpers.monitor: {alert.message}", MonitorWarning, stacklevel=3)
        if alert.code == FALLBACK_KERNEL and alert not in self.alerts:
            self.alerts.append(alert)  # a property of the model: repeated in every record

    def _model_name(self) -> str:
        if self.model_name:
            return self.model_name
        config = getattr(self.model, "config", None)
        return str(getattr(config, "_name_or_path", "") or getattr(config, "model_type", "") or "")
