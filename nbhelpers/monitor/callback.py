"""The monitor in a Hugging Face Trainer (and TRL's SFTTrainer, a Trainer): a ``TrainerCallback``.

How it sees the batch: transformers 5 hands a callback the model, optimizer and dataloaders but never the batch,
and a collator wrapper would run inside DataLoader worker processes (``dataloader_num_workers > 0``) while the
Trainer prefetches a whole accumulation's batches before ``on_step_begin``. So the callback puts a forward
pre-hook on the model: it receives the very tensors each training forward gets (``model(**inputs)``), in the
main process, on the device, for every micro-batch of the current optimizer step. Forwards in eval mode are
skipped, and the same ``input_ids`` seen twice in a step (TRL runs a second, no-grad forward for its metrics
when a custom loss is set) count once.

Where the figures go: at each of the Trainer's logs, the callback closes an interval, writes a ``monitor``
record to the run store and adds the numbers, prefixed ``monitor/``, to the ``logs`` dict and to the last
``state.log_history`` entry. Reporters (TensorBoard, MLflow, ...) are callbacks too, called in list order; the
Trainer puts its reporters before callbacks passed as ``callbacks=[...]``, so use :func:`attach`, which puts
the monitor first, for the reporters to receive its figures.
"""

from __future__ import annotations

import warnings
from typing import Any

from transformers import TrainerCallback

from .core import Monitor

NO_REPORTERS = (None, "none", [], ["none"], ())


class MonitorCallback(TrainerCallback):
    """Runs a :class:`Monitor` over a Trainer's training steps; options are ``Monitor``'s (``run_name``, ...)."""

    def __init__(self, run_name: str = "default", **options: Any) -> None:
        if "log_every" in options:
            raise ValueError("log_every: the Trainer's logging_steps sets the interval; leave log_every out")
        self.monitor = Monitor(run_name, source="trainer", **options)
        self.placed_first = False  # set by attach(): the reporters come after the monitor
        self._hook: Any = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if model is None:
            raise RuntimeError("the Trainer passed no model to the monitor's on_train_begin")
        self.monitor.bind(model)
        self._hook = model.register_forward_pre_hook(self._count, with_kwargs=True)
        if not self.placed_first and getattr(args, "report_to", None) not in NO_REPORTERS:
            warnings.warn(
                f"MonitorCallback was passed in callbacks=[...], after the reporters {args.report_to}: they will "
                "not see the monitor's figures (the run store will); use nbhelpers.monitor.attach(trainer) instead",
                stacklevel=2,
            )

    def _count(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not module.training:
            return None
        batch = dict(kwargs)
        if args and "input_ids" not in batch:
            batch["input_ids"] = args[0]
        if batch.get("input_ids") is not None:
            self.monitor.add_batch(batch)
        return None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.begin_step(state.global_step + 1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.end_step()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs and any(key.startswith(("eval_", "test_")) for key in logs):
            return  # an evaluation's log: the training interval closes at the next training log
        figures = self.monitor.flush()
        if not figures:
            return
        scalars = self.monitor.scalar_logs(figures)
        if logs is not None:
            logs.update(scalars)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(scalars)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.monitor.close()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


def attach(trainer: Any, run_name: str = "default", **options: Any) -> MonitorCallback:
    """Add a :class:`MonitorCallback` to ``trainer`` ahead of its reporters, so TensorBoard, MLflow and the
    progress bar receive its figures; returns the callback (``.monitor.records`` holds what it wrote)."""
    handler = getattr(trainer, "callback_handler", None)
    if handler is None or not hasattr(handler, "callbacks"):
        raise TypeError(f"trainer={type(trainer).__name__}: must be a transformers Trainer (or TRL's SFTTrainer)")
    callback = MonitorCallback(run_name, **options)
    callback.placed_first = True
    handler.callbacks.insert(0, callback)
    return callback
