"""Run the notebook sequence with papermill over a parameter grid, resumably.

Layout of a sweep named ``S`` under ``out``::

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
import hashlib
import itertools
import json
import os
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbhelpers.measure.jsonl import append_line, read_lines

JOURNAL_NAME = "sweep.jsonl"
LOCK_NAME = ".sweep.lock"
KERNEL_NAME = "python3"
RUN_NAME_PARAMETER = "RUN_NAME"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# Grid


def parse_value(text: str) -> Any:
    """A grid value: int, float, true/false, else the string itself."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["batch_size=2,4", "padding=dynamic,packed"]`` -> ``{"batch_size": [2, 4], "padding": [...]}``."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"grid item {item!r} must look like name=value1,value2")
        if key in grid:
            raise ValueError(f"grid parameter {key!r} is given twice")
        parsed = [parse_value(v) for v in values.split(",") if v.strip()]
        if not parsed:
            raise ValueError(f"grid parameter {key!r} has no values")
        grid[key] = parsed
    return grid


def grid_points(grid: dict[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    """Every combination, first key slowest; an empty grid is one point with no values."""
    if not grid:
        return [{}]
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _short_hash(data: Any) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:8]


def point_name(point: dict[str, Any]) -> str:
    """Deterministic run name of a grid point: ``batch_size-2_padding-dynamic``.

    Characters a run name may not hold become "-" and a short hash of the point is appended, as it is
    when the name would pass 100 characters, so two points never share a name.
    """
    if not point:
        return "default"
    raw = "_".join(f"{k}-{v}" for k, v in point.items())
    name = _SAFE.sub("-", raw).strip("-._") or "point"
    if name != raw or len(name) > 100:
        name = f"{name[:90].rstrip('-._')}-{_short_hash(point)}"
    return name


def default_sweep_name(grid: dict[str, Sequence[Any]] | None, notebooks: Sequence[Path]) -> str:
    """Same grid and notebooks -> same name, so running the same command again resumes."""
    return "sweep-" + _short_hash({"grid": grid or {}, "notebooks": [Path(n).name for n in notebooks]})


# ----------------------------------------------------------------------------------------------
# Notebooks and their parameters


def list_notebooks(notebooks_dir: str | Path = "notebooks") -> list[Path]:
    """Every notebook of a folder in name order (01_..., 02_...), checkpoints and outputs left out."""
    folder = Path(notebooks_dir)
    candidates = (p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    found = sorted(p for p in candidates if ".partial" not in p.name)
    if not found:
        raise FileNotFoundError(f"no notebooks (*.ipynb) in {folder.resolve()}")
    return found


def find_notebooks(spec: str | Sequence[str] | None, notebooks_dir: str | Path = "notebooks") -> list[Path]:
    """Notebooks named by number prefix ("01,02"), file name or path; None or "" means all of them."""
    if not spec:
        return list_notebooks(notebooks_dir)
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    found: list[Path] = []
    for item in filter(None, items):
        path = Path(item)
        if path.suffix == ".ipynb" and path.exists():
            found.append(path)
            continue
        matches = [p for p in list_notebooks(notebooks_dir) if p.name == item or p.name.startswith(item)]
        if len(matches) != 1:
            names = ", ".join(p.name for p in list_notebooks(notebooks_dir))
            problem = "matches no notebook" if not matches else "matches several notebooks"
            raise ValueError(f"notebook {item!r} {problem} in {notebooks_dir}: {names}")
        found.append(matches[0])
    return found


def notebook_parameters(path: str | Path) -> dict[str, dict[str, Any]]:
    """The parameters a notebook's ``parameters`` cell declares (papermill.inspect_notebook)."""
    import papermill

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dict(papermill.inspect_notebook(str(path)))


def _coerce(value: Any, type_name: str, notebook: str, name: str) -> Any:
    type_name = (type_name or "").strip().lower()
    try:
        if type_name == "int" and not isinstance(value, bool):
            return int(value)
        if type_name == "float" and not isinstance(value, bool):
            return float(value)
        if type_name == "bool":
            return value if isinstance(value, bool) else parse_value(str(value)) is True
        if type_name == "str":
            return str(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{notebook}: parameter {name} is {type_name}, cannot take {value!r}") from error
    return value


def _declared_name(key: str, declared: dict[str, Any]) -> str | None:
    for candidate in (key, key.upper()):
        if candidate in declared:
            return candidate
    return None


def scoped(key: str) -> tuple[str, str]:
    """``"02:BACKENDS"`` -> ``("02", "BACKENDS")`` (for notebooks named 02...); ``"MODEL"`` -> ``("", "MODEL")``."""
    scope, sep, name = key.partition(":")
    return (scope.strip(), name.strip()) if sep else ("", key)


def parameters_for(
    notebook: Path, declared: dict[str, dict[str, Any]], point: dict[str, Any], run_name: str
) -> dict[str, Any]:
    """Only what the notebook declares: RUN_NAME and the grid values, typed as its parameters cell says
    (a scoped key ``"NN:NAME"`` only for notebooks named NN..., winning over ``NAME``)."""
    params: dict[str, Any] = {}
    if RUN_NAME_PARAMETER in declared:
        params[RUN_NAME_PARAMETER] = run_name
    for key, value in sorted(point.items(), key=lambda item: bool(scoped(item[0])[0])):
        scope, bare = scoped(key)
        name = _declared_name(bare, declared) if notebook.name.startswith(scope) else None
        if name is not None:
            info = declared[name]
            params[name] = _coerce(value, str(info.get("inferred_type_name", "")), notebook.name, name)
    return params


def check_grid(grid: dict[str, Sequence[Any]] | None, declared: dict[Path, dict[str, Any]]) -> None:
    """Every grid key must be a parameter of at least one notebook (as is, or upper-cased; "NN:" scoped)."""
    for key in grid or {}:
        scope, bare = scoped(key)
        scope_params = [params for path, params in declared.items() if Path(path).name.startswith(scope)]
        if not any(_declared_name(bare, params) for params in scope_params):
            names = sorted({n for params in scope_params for n in params})
            raise ValueError(
                f"grid parameter {key!r} is declared by none of the notebooks "
                f"({', '.join(p.name for p in declared)}); their parameters are: {', '.join(names)}"
            )


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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def _error_text(error: BaseException) -> str:
    ename = getattr(error, "ename", None)
    if ename:
        cell = getattr(error, "exec_count", None)
        where = f" (cell {cell})" if cell is not None else ""
        return f"{ename}: {getattr(error, 'evalue', '')}{where}"
    return f"{type(error).__name__}: {error}"


def execute_notebook(
    notebook: Path,
    output: Path,
    parameters: dict[str, Any],
    kernel_name: str = KERNEL_NAME,
    timeout: float | None = None,
) -> None:
    """Run one notebook with papermill; the executed copy appears at ``output`` only once it is complete.

    Papermill saves as it goes into ``<output>.partial.ipynb``; that file is renamed into place when
    papermill returns (or fails: the copy then holds the error). Raises what papermill raised.
    """
    import papermill

    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.stem + ".partial.ipynb")
    partial.unlink(missing_ok=True)  # left by a run that was killed
    try:
        papermill.execute_notebook(
            str(notebook),
            str(partial),
            parameters=parameters,
            kernel_name=kernel_name,
            cwd=str(notebook.resolve().parent),
            progress_bar=False,
            execution_timeout=timeout,
        )
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
    journal and lock live in ``journal_dir`` (default: ``runs_root``).
    """
    from tqdm.auto import tqdm

    runs_root = Path(runs_root).resolve()
    sweep_dir = Path(journal_dir).resolve() if journal_dir is not None else runs_root
    notebooks = [Path(n).resolve() for n in notebooks]
    declared = {nb: notebook_parameters(nb) for nb in notebooks}
    check_grid({k: [] for _, point in points for k in point}, declared)
    journal = Journal(sweep_dir / JOURNAL_NAME)
    result = SweepResult(sweep_dir=sweep_dir, journal=journal.path, points=[name for name, _ in points])
    with _exclusive(sweep_dir / LOCK_NAME), _kernel_environment(runs_root):
        done = journal.finished() if resume else {}
        if retry_failed:
            done = {key: entry for key, entry in done.items() if entry.get("status") == "ok"}
        complete = sum(all((name, nb.name) in done for nb in notebooks) for name, _ in points)
        label = sweep_name or sweep_dir.name
        bar = tqdm(total=len(points), initial=complete, desc=label, disable=not progress)
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
                    }
                    journal.append(entry)
                    result.ran.append(entry)
                bar.update(1)
        finally:
            bar.close()
    return result


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
    name = name or default_sweep_name(grid, notebooks)
    points = [(point_name(p), p) for p in grid_points(grid)]
    names = [n for n, _ in points]
    if len(set(names)) != len(names):
        raise ValueError(f"grid points share a run name: {names}")
    sweep_dir = Path(out) / name
    sweep_dir.mkdir(parents=True, exist_ok=True)
    manifest = sweep_dir / "sweep.json"
    if not manifest.exists():
        tmp = manifest.with_name("sweep.json.tmp")
        manifest_data = {"name": name, "grid": grid, "notebooks": [n.name for n in notebooks]}
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
        from nbhelpers.measure.store import RunStore
        from nbhelpers.views.report import write_html_report

        records = [r for point, _ in points for r in RunStore(sweep_dir / point).load()]
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

    ``parameters`` (``{"MODEL": ..., "02:BACKENDS": ...}``) reach only the notebooks that declare them.
    Returns the path of ``out/<run_name>/report.html`` (written by notebook 04, or here from the
    records when 04 did not write it) and what ran. Nothing is skipped: each call measures afresh.
    """
    from nbhelpers.measure.store import RunStore
    from nbhelpers.views.report import write_html_report

    out = Path(out).resolve()
    notebooks = list_notebooks(notebooks_dir)
    report = out / run_name / "report.html"
    started = time.time()
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
    if not report.exists() or report.stat().st_mtime < started:  # 04 missing or failed: report anyway
        write_html_report(RunStore(out / run_name).load(), report)
    return report, result
