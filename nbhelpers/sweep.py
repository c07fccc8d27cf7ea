"""Run the notebook sequence with papermill over a parameter grid, resumably.

Layout of a sweep named ``S`` under ``out``::

    out/S/sweep.json               the sweep's name, grid and notebooks (another grid under S is refused)
    out/S/sweep.jsonl              append-only journal: one line per finished (point, notebook)
    out/S/<point>/records.jsonl    the point's RunStore (RUN_NAME = <point>, NBHELPERS_RUNS = out/S)
    out/S/<point>/01_....ipynb     each notebook's executed copy

A (point, notebook) is journaled only after papermill returned and the executed copy was moved into
place, with one locked ``O_APPEND`` write + fsync (``nbhelpers.measure.jsonl``); a sweep killed at any
moment (even ``kill -9``) and started again skips what the journal lists and reruns the rest. A failing
notebook is journaled with status "failed" and its error, and the sweep goes on.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.measure.jsonl import append_line, read_lines
from nbhelpers.measure.progress import notebook_line, plain_bars_in_children, progress_bar
from nbhelpers.measure.set_aside import (
    SET_ASIDE_NAME,
    move_aside,
    record_id_of,
    set_aside_after_marker,
    written_record_ids,
)
from nbhelpers.planning.sweep_grid import (
    check_declared,
    check_grid,
    default_sweep_name,
    find_notebooks,
    grid_points,
    grid_text,
    list_notebooks,
    notebook_parameters,
    parameters_for,
    parse_grid,
    parse_value,
    point_name,
    report_parameter,
    same_sweep,
    split_values,
)
from nbhelpers.validation import check_run_name, check_timeout

__all__ = [  # the grid helpers live in nbhelpers.planning.sweep_grid; these names stay importable from here
    "check_grid", "default_sweep_name", "find_notebooks", "grid_points", "grid_text", "list_notebooks",
    "notebook_parameters", "parameters_for", "parse_grid", "parse_value", "point_name", "split_values", "run_sweep",
    "run_all", "run_points", "check_points", "check_same_sweep", "Journal", "SweepResult", "execute_notebook",
]  # fmt: skip

JOURNAL_NAME = "sweep.jsonl"
MANIFEST_NAME = "sweep.json"  # the sweep's name, grid and notebooks, written by its first call
LOCK_NAME = ".sweep.lock"
KERNEL_NAME = "python3"
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# Journal


class Journal:
    """Append-only JSON lines (``nbhelpers.measure.jsonl``): each line written whole, torn ones skipped."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, entry: dict[str, Any]) -> None:
        append_line(self.path, entry)

    def entries(self) -> list[dict[str, Any]]:
        """Whole entries in order; a torn last line (a crash mid-write) is skipped with a warning."""
        entries = read_lines(self.path, what="journal entry", stacklevel=3)
        return [e for e in entries if "point" in e and "notebook" in e]

    def finished(self) -> dict[tuple[str, str], dict[str, Any]]:
        """(point, notebook) -> its latest entry."""
        return {(e["point"], e["notebook"]): e for e in self.entries()}


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One sweep per folder at a time (the lock dies with its process, even on kill -9)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another sweep is running in {lock_path.parent} (lock {lock_path})") from None
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _kernel_environment(runs_root: Path) -> Iterator[None]:
    """Kernels inherit the environment: point NBHELPERS_RUNS at the sweep and nbhelpers at this copy."""
    saved = {k: os.environ.get(k) for k in ("NBHELPERS_RUNS", "PYTHONPATH")}
    os.environ["NBHELPERS_RUNS"] = str(runs_root)
    paths = [str(_PACKAGE_PARENT)] + [p for p in (saved["PYTHONPATH"] or "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ----------------------------------------------------------------------------------------------
# Execution


def _load_run(folder: Path) -> list[Any]:
    """A run folder's records, its tuner's winner marked (what notebook 04's loader does), for a report."""
    from nbhelpers.analysis.tuner_choice import mark_tuner_winner
    from nbhelpers.measure.store import RunStore

    records = RunStore(folder).load()
    mark_tuner_winner(records, folder)
    return records


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _error_text(error: BaseException) -> str:
    ename = getattr(error, "ename", None)
    if ename:
        cell = getattr(error, "exec_count", None)
        where = f" (cell {cell})" if cell is not None else ""
        return f"{ename}: {getattr(error, 'evalue', '')}{where}"
    return f"{type(error).__name__}: {error}"


# The kernel's own log, errors only: ipykernel 7 warns on every start that its local TCP sockets are unencrypted.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]


def execute_notebook(
    notebook: Path,
    output: Path,
    parameters: dict[str, Any],
    kernel_name: str = KERNEL_NAME,
    timeout: float | None = None,
) -> None:
    """Run one notebook with papermill; the executed copy appears at ``output`` only once it is complete.

    Papermill saves as it goes into ``<output>.partial.ipynb``; that file is renamed into place when
    papermill returns (or fails: the copy then holds the error). Raises what papermill raised, and ConfigError for a
    parameter the notebook does not declare (before anything runs). The kernel draws
    plain-text progress bars (``PLAIN_BARS_VARIABLE``): a widget bar would be saved at its first state.
    """
    import papermill

    from nbhelpers.notebook_engine import register

    check_declared(notebook, parameters)  # papermill would only warn: a misspelt RUN_NAME writes another run
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.stem + ".partial.ipynb")
    partial.unlink(missing_ok=True)  # left by a run that was killed
    try:
        with plain_bars_in_children():  # text bars: the saved copy shows where each bar ended
            papermill.execute_notebook(
                str(notebook), str(partial), parameters=parameters, kernel_name=kernel_name,
                cwd=str(notebook.resolve().parent), progress_bar=False, execution_timeout=timeout,
                extra_arguments=KERNEL_ARGUMENTS, engine_name=register(),
            )  # fmt: skip
    finally:
        if partial.exists():
            os.replace(partial, output)


@dataclass
class SweepResult:
    """What a sweep did: its folder, journal, the entries of this invocation and those it skipped."""

    sweep_dir: Path
    journal: Path
    points: list[str]
    ran: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # journal entries finished earlier
    report: Path | None = None  # the sweep's HTML report over every point, when written

    @property
    def entries(self) -> list[dict[str, Any]]:
        """The latest entry of every (point, notebook) this sweep covers."""
        latest = {(e["point"], e["notebook"]): e for e in self.skipped + self.ran}
        return list(latest.values())

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e.get("status") != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failed


ATTEMPT_PREFIX = ".attempt-"
RESTARTED_NAME = "restarted-records.jsonl"  # records of a finished attempt, set aside by a rerun with --restart


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def attempt_marker(run_folder: Path, notebook: str) -> Path:
    """Written before a notebook runs (with the store's size), removed once it is journaled."""
    return run_folder / f"{ATTEMPT_PREFIX}{notebook}.json"


def set_aside_earlier_attempt(
    run_folder: Path, notebook: str, entry: dict[str, Any] | None, include_finished: bool = False
) -> None:
    """Move the records an earlier attempt of ``notebook`` wrote out of the run's store before it runs again.

    A killed attempt left its marker: its records are the store's bytes after the marker's size (moved into
    ``interrupted-records.jsonl``). A failed attempt's journal entry names its records (``record_ids``; older
    entries: the store's size before and after it), moved there too. With ``include_finished`` (a rerun with
    ``--restart``) a finished attempt's records are moved into ``restarted-records.jsonl``: the store keeps one
    record per configuration and nothing measured is lost.
    """
    store, marker = run_folder / "records.jsonl", attempt_marker(run_folder, notebook)
    killed = marker.exists()
    set_aside_after_marker(store, marker, run_folder / SET_ASIDE_NAME)
    if entry is None or not store.exists():
        return
    failed = entry.get("status") != "ok"
    if not failed and not include_finished:
        return
    aside = run_folder / (SET_ASIDE_NAME if failed else RESTARTED_NAME)
    ids = entry.get("record_ids")
    if isinstance(ids, list):
        wanted = {str(i) for i in ids}
        move_aside(store, aside, lambda _i, line: record_id_of(line) not in wanted)
    elif failed and not killed and len(entry.get("store_bytes") or []) == 2:  # an entry without record_ids
        begin, end = (int(v) for v in entry["store_bytes"])  # its byte span, valid until a later set-aside
        if 0 <= begin < end <= _size(store):
            move_aside(store, aside, lambda offset, _line: not begin <= offset < end)


def check_points(points: Sequence[tuple[str, dict[str, Any]]], notebooks: Sequence[Path]) -> dict[Path, dict[str, Any]]:
    """Every point's run name and parameters, checked against the notebooks before anything runs."""
    declared = {nb: notebook_parameters(nb) for nb in notebooks}
    values: dict[str, list[Any]] = {}
    for _, point in points:
        for key, value in point.items():
            values.setdefault(key, []).append(value)
    check_grid(values, declared)  # a refused key shows the values the points gave it
    for name, point in points:
        check_run_name(name, "run name of a grid point")
        for nb in notebooks:
            parameters_for(nb, declared[nb], point, name)
    return declared


def run_points(
    points: Sequence[tuple[str, dict[str, Any]]],
    notebooks: Sequence[str | Path],
    runs_root: str | Path,
    *,
    journal_dir: str | Path | None = None,
    kernel_name: str = KERNEL_NAME,
    timeout: float | None = None,
    resume: bool = True,
    retry_failed: bool = False,
    progress: bool = True,
    sweep_name: str = "",
) -> SweepResult:
    """Run every notebook for every (run name, point); run folders live under ``runs_root``.

    ``runs_root`` becomes the kernels' NBHELPERS_RUNS, so run ``name`` writes ``runs_root/name``; the
    journal and lock live in ``journal_dir`` (default: ``runs_root``). Every point's parameters are checked
    before anything runs. A (point, notebook) rerun after a kill (or with ``retry_failed``) first sets aside
    the records its earlier attempt wrote (into ``interrupted-records.jsonl``), so the store keeps exactly one
    record per configuration and nothing measured is lost.
    """
    timeout = check_timeout(timeout)
    runs_root = Path(runs_root).resolve()
    sweep_dir = Path(journal_dir).resolve() if journal_dir is not None else runs_root
    notebooks = [Path(n).resolve() for n in notebooks]
    declared = check_points(points, notebooks)
    journal = Journal(sweep_dir / JOURNAL_NAME)
    result = SweepResult(sweep_dir=sweep_dir, journal=journal.path, points=[name for name, _ in points])
    with _exclusive(sweep_dir / LOCK_NAME), _kernel_environment(runs_root):
        journal_all = journal.finished()
        done = journal_all if resume else {}
        if retry_failed:
            done = {key: entry for key, entry in done.items() if entry.get("status") == "ok"}
        complete = sum((name, nb.name) in done for name, _ in points for nb in notebooks)
        label = sweep_name or sweep_dir.name
        bar = progress_bar(total=len(points) * len(notebooks), initial=complete, desc=label, unit="notebook",
                           disable=not progress)  # fmt: skip
        try:
            for name, point in points:
                todo = [nb for nb in notebooks if (name, nb.name) not in done]
                result.skipped.extend(done[(name, nb.name)] for nb in notebooks if (name, nb.name) in done)
                if not todo:
                    continue
                for nb in todo:
                    bar.set_postfix_str(f"{name} / {nb.name}")
                    params = parameters_for(nb, declared[nb], point, name)
                    output = runs_root / name / nb.name
                    store = runs_root / name / "records.jsonl"
                    # a killed attempt (its marker) always, a failed one the journal names, and with --restart
                    # (no resume) also a finished one: the rerun's records replace them in the store
                    earlier = journal_all.get((name, nb.name))
                    set_aside_earlier_attempt(runs_root / name, nb.name, earlier, include_finished=not resume)
                    marker = attempt_marker(runs_root / name, nb.name)
                    before = _size(store)
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text(json.dumps({"store_bytes": before}))
                    started, t0 = _now(), time.perf_counter()
                    status, error = "ok", ""
                    try:
                        execute_notebook(nb, output, params, kernel_name=kernel_name, timeout=timeout)
                    except Exception as exc:  # a failing notebook is recorded; the sweep goes on
                        status, error = "failed", _error_text(exc)
                    entry = {
                        "sweep": sweep_name or sweep_dir.name,
                        "point": name,
                        "notebook": nb.name,
                        "values": point,
                        "parameters": params,
                        "status": status,
                        "error": error,
                        "output": str(output) if output.exists() else "",
                        "started_at": started,
                        "finished_at": _now(),
                        "duration_s": round(time.perf_counter() - t0, 3),
                        "pid": os.getpid(),
                        "store_bytes": [before, _size(store)],
                        "record_ids": written_record_ids(store, before, _size(store)),
                    }
                    journal.append(entry)
                    marker.unlink(missing_ok=True)
                    result.ran.append(entry)
                    bar.update(1)
                    if progress:  # a line that stays: each notebook's outcome and time
                        bar.write(notebook_line(entry))
        finally:
            bar.close()
    return result


def check_same_sweep(manifest: Path, wanted: dict[str, Any]) -> None:
    """ValueError when the sweep folder's manifest (``sweep.json``, written by its first call) describes another
    grid or other notebooks than ``wanted``: its journal, run folders and report belong to that sweep, so a
    second grid under the same name is refused, not mixed in. Nothing when the folder is new."""
    if not manifest.exists():
        return
    name = wanted["name"]
    try:
        started = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"name={name!r} (--name): {manifest} cannot be read ({error}), so it is unknown which grid the sweep "
            "there ran: use another --name"
        ) from None
    if isinstance(started, dict) and same_sweep(started, wanted["grid"], wanted["notebooks"]):
        return
    started = started if isinstance(started, dict) else {}

    def described(data: dict[str, Any]) -> str:
        notebooks = data.get("notebooks")
        names = ",".join(map(str, notebooks)) if isinstance(notebooks, list) else repr(notebooks)
        grid = data.get("grid")
        return f"--grid {grid_text(grid) if isinstance(grid, dict) else repr(grid)} --notebooks {names}"

    raise ValueError(
        f"name={name!r} (--name) is a sweep started with another grid or other notebooks: {manifest} says "
        f"{described(started)}; this call gives {described(wanted)}. Use another --name for this grid, or give "
        "the sweep's own grid and notebooks to resume it"
    )


def run_sweep(
    grid: dict[str, Sequence[Any]],
    notebooks: Sequence[str | Path],
    out: str | Path = "runs",
    name: str | None = None,
    *,
    kernel_name: str = KERNEL_NAME,
    timeout: float | None = None,
    resume: bool = True,
    retry_failed: bool = False,
    progress: bool = True,
    report: bool = True,
) -> SweepResult:
    """Every grid point runs every notebook, as run ``<point name>`` under ``out/<sweep name>/``.

    ``resume`` skips what the journal lists as finished (``retry_failed``: only what finished ok);
    ``report`` writes ``out/<sweep name>/report.html`` over every point's records at the end.
    """
    notebooks = [Path(n) for n in notebooks]
    name = check_run_name(name, "name") if name is not None else default_sweep_name(grid, notebooks)
    timeout = check_timeout(timeout)
    points = [(point_name(p), p) for p in grid_points(grid)]
    names = [n for n, _ in points]
    if len(set(names)) != len(names):
        raise ValueError(f"grid points share a run name: {names}")
    check_points(points, [n.resolve() for n in notebooks])  # a rejected grid writes nothing
    sweep_dir = Path(out) / name
    manifest = sweep_dir / MANIFEST_NAME
    manifest_data = {"name": name, "grid": grid, "notebooks": [n.name for n in notebooks]}
    check_same_sweep(manifest, manifest_data)  # another grid under a taken name runs nothing
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if not manifest.exists():
        tmp = manifest.with_name(MANIFEST_NAME + ".tmp")
        tmp.write_text(json.dumps(manifest_data, indent=2))
        os.replace(tmp, manifest)
    result = run_points(
        points,
        notebooks,
        sweep_dir,
        kernel_name=kernel_name,
        timeout=timeout,
        resume=resume,
        retry_failed=retry_failed,
        progress=progress,
        sweep_name=name,
    )
    if report:
        from nbhelpers.views.report import write_html_report

        records = [r for point, _ in points for r in _load_run(sweep_dir / point)]
        result.report = write_html_report(records, sweep_dir / "report.html", title=f"Sweep {name}")
    return result


def run_all(
    notebooks_dir: str | Path = "notebooks",
    out: str | Path = "runs",
    run_name: str = "default",
    *,
    kernel_name: str = KERNEL_NAME,
    timeout: float | None = None,
    progress: bool = True,
    parameters: dict[str, Any] | None = None,
) -> tuple[Path, SweepResult]:
    """Every notebook in order, once, on its embedded defaults with RUN_NAME ``run_name``.

    ``parameters`` (``{"MODEL": ..., "02:KERNELS": ...}``) reach only the notebooks that declare them.
    Returns the path of ``out/<run_name>/report.html``, written here last from every notebook's records (notebook
    04 writes one too, for a run of 04 alone), and what ran. Nothing is skipped: each call measures afresh; what an
    earlier call killed mid-notebook wrote is set aside first (``interrupted-records.jsonl``), as the sweep does.
    """
    from nbhelpers.analysis.job_projection import PARAMETERS, JobSpec
    from nbhelpers.views.report import write_html_report

    check_run_name(run_name, "run_name")
    timeout = check_timeout(timeout)
    out = Path(out).resolve()
    notebooks = list_notebooks(notebooks_dir)
    report = out / run_name / "report.html"
    result = run_points(
        [(run_name, dict(parameters or {}))],
        notebooks,
        out,
        journal_dir=out / run_name,
        kernel_name=kernel_name,
        timeout=timeout,
        resume=False,
        progress=progress,
        sweep_name=run_name,
    )
    # Last, after every notebook (05's scaling rows and 04's peers and watched run included), with 04's baseline.
    given = parameters or {}
    job = JobSpec.from_parameters({name: value for name in PARAMETERS.values()
                                   if (value := report_parameter(given, name)) is not None})  # fmt: skip
    write_html_report(_load_run(out / run_name), report, report_parameter(given, "BASELINE_LABEL") or None, job=job)
    return report, result

