"""What to do about a failed measurement, by cause (one table), and the error a notebook raises for it."""

from __future__ import annotations

from collections.abc import Iterable

from .store import RunRecord

# (words in the reason, lower case) -> advice; the first row whose words all appear wins.
ADVICE: tuple[tuple[tuple[str, ...], str], ...] = (
    (("no loss tokens",), "raise MAX_LENGTH: truncation cut off the responses of a whole batch: nothing to learn"),
    (("out of memory",), "lower BATCH_SIZE or MAX_LENGTH, or pad less (PADDING='dynamic' or 'packed')"),
    (("sigkill",), "the host ran out of memory or the process was stopped: a smaller model, batch or MAX_LENGTH"),
    (("timed out",), "allow a longer timeout, or time fewer STEPS / NUM_SAMPLES"),
    (("missing package",), "install the package the reason names (pip install ...) and run again"),
    (("no gpu",), "run on a machine with a GPU, or choose a configuration that runs on a CPU"),
    (("not writable",), "make the runs folder writable or set NBHELPERS_RUNS to a writable folder"),
    (("dataset",), "fix the data parameters the reason names (DATASET, DATA_FORMAT, PROMPT_FIELD, RESPONSE_FIELD)"),
    (("model=",), "MODEL must be a preset, a folder holding config.json, or a hub id the hub or its cache knows"),
    (("non-finite",), "the loss diverged: lower the learning rate or check the data"),
    (("nan",), "the loss diverged: lower the learning rate or check the data"),
)


def advice_for(reason: str) -> str:
    """One sentence on what to change, chosen by the words of a failed record's reason."""
    text = reason.lower()
    for words, advice in ADVICE:
        if all(word in text for word in words):
            return advice
    return "read the reason; the worker's traceback is in the notebook's log"


class MeasurementFailed(RuntimeError):
    """A notebook's measurement failed: raised after its records are written, so the run fails visibly."""


def raise_if_failed(records: Iterable[RunRecord | None], where: str = "") -> None:
    """MeasurementFailed naming each failed record, its reason and the advice for it; nothing when all are ok."""
    failed = [r for r in records if r is not None and not r.ok]
    if failed:
        lines = [f"{r.label}: {r.reason} -> {advice_for(r.reason)}" for r in failed]
        saved = f" (records written to {where})" if where else ""
        raise MeasurementFailed(f"{len(failed)} measurement(s) failed{saved}:\n" + "\n".join(lines))
