"""Run configurations, each in its own subprocess, and keep every record (failed ones too).

Isolation means a Liger patch, a compile cache or an out-of-memory error in one configuration
cannot leak into the next one or kill the notebook's kernel.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from nbhelpers.kernels.cache import cache_env, make_cache_folders
from nbhelpers.kernels.registry import kernel_backend

from .config import RunConfig
from .distributed import gpu_shortfall, launch_command, needs_launch, rank_failure
from .engines import ENGINES, site_env
from .env import ALLOC_CONF_VARIABLE, MEASURING_ALLOC_CONF, detect_platform
from .host_allocator import host_allocator_env
from .progress import PROGRESS_VARIABLE, Progress, ProgressReader, plain_bars, progress_bar, read_progress
from .spare import SparePool, die_with_parent, end_group, spares_wanted
from .store import RunRecord, RunStore, runs_root
from .worker import failed_record, names_nothing_on_the_hub
from .zygote import ForkedWorker, ForkServerPool, fork_server_wanted

KERNEL_CACHE_VARIABLE = "NBHELPERS_KERNEL_CACHE"  # a folder of compiled kernels shared by every configuration
KERNEL_CACHE_FOLDER = ".kernel-cache"  # its default, inside the runs folder


def shared_kernel_cache_folder() -> Path:
    """The folder of the compiled-kernel caches every configuration shares: ``$NBHELPERS_KERNEL_CACHE``, else
    ``.kernel-cache`` in the runs folder."""
    return Path(os.environ.get(KERNEL_CACHE_VARIABLE) or runs_root() / KERNEL_CACHE_FOLDER)


def shared_kernel_cache() -> dict[str, str]:
    """The environment that gives every configuration's process one set of compiled-kernel caches, with the
    autotuner's results kept: ``$NBHELPERS_KERNEL_CACHE``, else ``.kernel-cache`` in the runs folder.

    Without it each configuration compiles and autotunes again (measured on an H200, Qwen3.8-27B with LoRA: fla's
    first step took 143-148 s in each of three configurations of one run; with a shared cache 4.9-25.8 s). A
    cache variable already set in the environment is kept; an unwritable folder means no shared cache, said once in
    a warning that names it."""
    folder = shared_kernel_cache_folder()
    env = cache_env(folder)
    try:
        make_cache_folders(env)
    except OSError as error:
        if str(folder) not in _UNWRITABLE_SAID:
            _UNWRITABLE_SAID.add(str(folder))
            warnings.warn(
                f"the shared kernel cache {folder} cannot be written ({error.strerror or error}): each configuration "
                f"compiles its kernels again; set {KERNEL_CACHE_VARIABLE} to a writable folder",
                stacklevel=2,
            )
        return {}
    return env


_UNWRITABLE_SAID: set[str] = set()  # the unwritable cache folders a warning named already (once per process)


# Set by libraries in this process for themselves on their first compile (Inductor's ptxas path; the OpenMP switches
# seen on an H200 after the kernel doctor's probes): a child sets them again itself. Seen after the process started,
# they would make every waiting spare worker's environment differ (three rows a GPU command ran fresh for it).
LIBRARY_SELF_SETTINGS = ("TRITON_PTXAS_PATH", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")
_SET_AT_START = frozenset(name for name in LIBRARY_SELF_SETTINGS if name in os.environ)  # the user's: kept


def _without_inductor_leftovers(env: dict[str, str]) -> dict[str, str]:
    """``env`` less what torch's Inductor (and the libraries of :data:`LIBRARY_SELF_SETTINGS`) wrote into this
    process's environment for themselves when they first compiled here (the kernel doctor's probes do): private
    variables, switches the process did not start with, and Inductor's default cache folder, which would shadow the
    shared kernel cache in every later configuration and make the waiting spare worker's environment stale."""
    kept = {
        name: value for name, value in env.items()
        if not name.startswith("_TORCHINDUCTOR_") and (name not in LIBRARY_SELF_SETTINGS or name in _SET_AT_START)
    }  # fmt: skip
    if "TORCHINDUCTOR_CACHE_DIR" not in kept:  # set: then Inductor (or the user) is here, and importing it is free
        return kept
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return kept
    if kept.get("TORCHINDUCTOR_CACHE_DIR") == os.path.abspath(default_cache_dir()):
        del kept["TORCHINDUCTOR_CACHE_DIR"]
    return kept


def _child_env(config: RunConfig, extra_env: dict[str, str] | None) -> dict[str, str]:
    env = _without_inductor_leftovers(dict(os.environ))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault(ALLOC_CONF_VARIABLE, MEASURING_ALLOC_CONF)
    for name, value in shared_kernel_cache().items():
        env.setdefault(name, value)
    env["NBHELPERS_PLATFORM"] = detect_platform()  # the record says where the user ran it, not "terminal"
    if config.device != "cuda" and not _cuda_available():
        cpu_env = kernel_backend(config.kernels).cpu_env  # e.g. Liger on a CPU: the Triton interpreter
        for name, value in cpu_env.items():
            env.setdefault(name, value)
        env.update(host_allocator_env(env | (extra_env or {})))  # tcmalloc where found (its module says why)
    env.update(site_env(ENGINES[config.engine], env))  # a peer engine's own site folder: first, in its process only
    env.update(extra_env or {})
    return env


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


_spares = SparePool()  # processes for the next configurations, imports done (nbhelpers.measure.spare)
_fork_servers = ForkServerPool()  # on a CPU: processes that fork each configuration's, imports done (.zygote)


def _forkable(config: RunConfig, extra_env: dict[str, str] | None) -> bool:
    """Whether ``config``'s process may be forked from a server: run with the run's own environment (a startup row's
    cache folders: its start is what it measures, so it starts fresh), one process (no torchrun), an engine that
    needs no fresh interpreter of its own, a workload that names nothing on the hub (the server is offline), and
    forking wanted here (:func:`~nbhelpers.measure.zygote.fork_server_wanted`)."""
    return (
        not extra_env and not needs_launch(config) and not ENGINES[config.engine].needs_fresh_process
        and names_nothing_on_the_hub(config) and fork_server_wanted(_cuda_available())
    )  # fmt: skip


def _start_process(
    config: RunConfig, env: dict[str, str], args: list[str], progress: Path, stderr: Path,
    next_env: dict[str, str] | None = None, forkable: bool = False, main: str = "", stdout: Path | None = None,
) -> tuple[subprocess.Popen | ForkedWorker, str, str]:  # fmt: skip
    """The process that measures ``config``, how it started ("spare": a spare started with ``env``, its imports
    done; "forked": by the fork server started with ``env``; else "fresh") and why a waiting spare was not used (""
    when none waited or one was); then a spare for the configuration after this one (started with ``next_env``, by
    default ``env``), where spares are wanted. ``forkable``: :func:`_forkable`. ``main``: another module than the
    worker, run as ``python -m main *args`` (never by a spare, which waits to run the worker), its stdout into
    ``stdout`` (default: none kept)."""
    fresh = ENGINES[config.engine].needs_fresh_process  # Unsloth: its own imports first, never a spare's
    use_spares = not main and not needs_launch(config) and not fresh and spares_wanted(_cuda_available())
    child, unused = _spares.take(env, args, str(progress), str(stderr)) if use_spares else (None, "")
    how = "spare" if child is not None else "fresh"
    if child is None and not use_spares and forkable:
        child = _fork_servers.fork(env, args, str(progress), str(stderr), config.model, main, str(stdout or ""))
        how = "forked" if child is not None else "fresh"
    if child is None:
        command = [sys.executable, "-m", main or "nbhelpers.measure.worker", *args]
        if needs_launch(config) and not main:  # several GPUs (or FSDP2 on one): torchrun, one process per GPU
            command = launch_command(config, *args)
        with (
            open(stderr, "w", encoding="utf-8") as stderr_file,
            open(stdout, "w", encoding="utf-8") if stdout else contextlib.nullcontext(subprocess.DEVNULL) as out,
        ):
            child = subprocess.Popen(
                command, env=env | {PROGRESS_VARIABLE: str(progress)}, stdout=out, stderr=stderr_file,
                text=True, start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
    if use_spares:
        _spares.keep(next_env if next_env is not None else env)
    return child, how, unused


@dataclass
class MainRun:
    """How a module's ``main`` ran in a process of its own: its exit status (None: stopped at its limit), its
    output, and how its process started ("forked" or "fresh")."""

    status: int | None
    stdout: str
    stderr: str
    how: str


def run_main(config: RunConfig, module: str, args: list[str], timeout_s: float) -> MainRun:
    """``python -m module *args`` for ``config`` (a training run that is not a measurement: notebook 04's watched
    run), in the environment its measurement would get, forked from the fork server where ``config`` is forkable
    (:func:`_forkable`; the module's ``main(*args)`` then runs in the child), else a fresh process."""
    env = _child_env(config, None)
    with tempfile.TemporaryDirectory(prefix="nbhelpers-main-") as tmp:
        progress, stdout, stderr = (Path(tmp) / name for name in ("progress.txt", "stdout.txt", "stderr.txt"))
        for path in (stdout, stderr):
            path.touch()  # a forked child appends to them
        child, how, _ = _start_process(
            config, env, args, progress, stderr, forkable=_forkable(config, None), main=module, stdout=stdout
        )
        try:
            status: int | None = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            _kill_group(child)
        read = [path.read_text(encoding="utf-8", errors="replace") for path in (stdout, stderr)]
    return MainRun(status, read[0], read[1], how)


def prime_spare(extra_env: dict[str, str] | None = None) -> bool:
    """Start a spare worker now with ``extra_env`` added to the environment, where spares are wanted (on a GPU) and
    none with that environment waits, so that the configuration measured with it finds its imports done and its
    CUDA context made; on a CPU, the fork server for that environment (its imports run beside the notebook's own);
    True when one was started."""
    config = RunConfig()
    if not spares_wanted(_cuda_available()):
        if not _forkable(config, extra_env):
            return False
        return _fork_servers.start(_child_env(config, extra_env), config.model)
    return _spares.keep(_child_env(config, extra_env))


@atexit.register
def _stop_spare() -> None:
    _spares.stop_all()
    _fork_servers.stop_all()


_PROGRESS = re.compile(r"\d+%\||it/s\]|s/it\]|\|\s*\d+/\d+\s*\[")


def stderr_tail(text: str, lines: int = 6) -> str:
    """The last lines of a worker's stderr without progress bars (tqdm redraws with carriage returns)."""
    kept = [part.strip() for line in text.splitlines() for part in line.split("\r")]
    kept = [line for line in kept if line and not _PROGRESS.search(line)]
    return " | ".join(kept[-lines:]) or "no error text"


def timeout_reason(timeout_s: float, last: Progress | None, stderr: str) -> str:
    """Why a configuration stopped at its limit: the limit, the last phase it reported, its stderr's last lines."""
    counts = f" ({last.done}/{last.total})" if last is not None and last.total else ""
    where = f" in {last.phase!r}{counts}" if last is not None else ""
    tail = stderr_tail(stderr)
    return f"timed out after {timeout_s} s{where}" + (f": {tail}" if tail != "no error text" else "")


ProgressCallback = Callable[[Progress], None]
POLL_S = 0.5  # how often a waiting runner reads its configuration's progress


def run_isolated(
    config: RunConfig, notebook: str = "", extra_env: dict[str, str] | None = None,
    on_progress: ProgressCallback | None = None, next_extra_env: dict[str, str] | None = None,
) -> RunRecord:  # fmt: skip
    """Measure one configuration in a fresh Python process; never raises for a failed configuration.
    ``on_progress`` is called with the process's progress (:mod:`nbhelpers.measure.progress`) while it runs;
    ``next_extra_env``, when known, is the next configuration's ``extra_env`` (its spare is started with it)."""
    if shortfall := gpu_shortfall(config):  # before torchrun starts ranks that would find no device
        return failed_record(config, shortfall, notebook)
    with tempfile.TemporaryDirectory(prefix="nbhelpers-") as tmp:
        config_path, result_path = Path(tmp) / "config.json", Path(tmp) / "record.json"
        progress_path, stderr_path = Path(tmp) / "progress.txt", Path(tmp) / "stderr.txt"
        config_path.write_text(config.to_json())
        stderr_path.touch()
        env = _child_env(config, extra_env)
        args = [str(config_path), str(result_path), notebook]
        started = time.perf_counter()
        next_env = _child_env(config, next_extra_env) if next_extra_env is not None else None
        forkable = _forkable(config, extra_env)
        child, how, spare_unused = _start_process(config, env, args, progress_path, stderr_path, next_env, forkable)
        try:
            finished = _wait(child, config.timeout_s, progress_path, on_progress, result_path)
        except BaseException:  # an interrupted notebook must not leave a GPU-holding process behind
            _kill_group(child)
            raise
        _kill_group(child)  # compile workers and other grandchildren end with their configuration
        if not finished:
            stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
            return failed_record(config, timeout_reason(config.timeout_s, read_progress(progress_path), stderr),
                                 notebook)  # fmt: skip
        if result_path.exists():
            record = RunRecord.from_dict(json.loads(result_path.read_text()))
            if record.ok:  # phase_s says where the process's time went
                record.metrics["process_s"] = round(time.perf_counter() - started, 3)
                record.metrics["worker_process"] = how  # "spare": its imports ran before it was handed this
                if spare_unused:  # a spare waited but could not serve this configuration: why
                    record.metrics["spare_unused"] = spare_unused
            return record
        if child.returncode < 0:
            name = signal.Signals(-child.returncode).name
            hint = " (the host ran out of memory?)" if name == "SIGKILL" else ""
            reason = f"killed by {name}{hint}"
        else:
            reason = f"exited with status {child.returncode}"
        if failed_ranks := rank_failure(result_path):
            reason = failed_ranks
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
        return failed_record(config, f"{reason}: {stderr_tail(stderr)}", notebook)


def _wait(
    child: subprocess.Popen | ForkedWorker, timeout_s: float, progress_path: Path, on_progress: ProgressCallback | None,
    result_path: Path | None = None,
) -> bool:  # fmt: skip
    """Wait for the child up to ``timeout_s``, handing each new progress to ``on_progress``; False on time-out.
    Done as soon as ``result_path`` exists: the worker's last act is to move its finished record there, so its
    exit (freeing the model, tearing down the CUDA context, seconds on a GPU) is not waited for."""
    deadline = time.monotonic() + timeout_s
    reader = ProgressReader(progress_path)

    def hand_on() -> None:
        for progress in reader.new():
            if on_progress is not None:
                on_progress(progress)

    while True:
        try:
            child.wait(timeout=max(0.0, min(POLL_S, deadline - time.monotonic())))
            hand_on()
            return True
        except subprocess.TimeoutExpired:
            finished = result_path is not None and result_path.exists()
            hand_on()  # after the check: the lines written before the record was moved are all read
            if finished:
                return True
            if time.monotonic() >= deadline:
                return False


def _kill_group(child: subprocess.Popen | ForkedWorker) -> None:
    """Stop a configuration's process and everything it started (it leads its own process group)."""
    end_group(child)


def run_config(
    config: RunConfig, isolate: bool = True, notebook: str = "", on_progress: ProgressCallback | None = None,
    extra_env: dict[str, str] | None = None,
) -> RunRecord:  # fmt: skip
    """Measure one configuration: in a subprocess by default (``on_progress`` hears where it is; ``extra_env`` is
    added to its environment), in this process when isolate=False (then ``extra_env`` must be None)."""
    if isolate or needs_launch(config) or ENGINES[config.engine].needs_fresh_process:  # torchrun; Unsloth's own
        return run_isolated(config, notebook, extra_env=extra_env, on_progress=on_progress)
    if extra_env:
        raise ValueError("extra_env needs isolate=True: a process's own environment is not changed for one run")
    from .worker import failure_reason, measure_config

    try:
        return measure_config(config, notebook)
    except Exception as error:  # noqa: BLE001 - every failure becomes a record
        return failed_record(config, failure_reason(error), notebook, traceback.format_exc())


class ConfigBar:
    """One configuration's bar, fed by its process's progress (``on_progress`` of :func:`run_config`): its name,
    phase, steps done out of the phase's, the time spent and tqdm's estimate of the time left in the phase (a phase
    without steps, such as building the model, shows its name and the time only). Nested under the list's bar in a
    live notebook; alone on its line in a batch run's plain text, where it clears itself when done."""

    def __init__(self, name: str, nested: bool = True) -> None:
        self.bar = progress_bar(total=0, desc=name, unit="step", leave=False, position=1 if nested else 0,
                                bar_format=PHASE_FORMAT)  # fmt: skip
        self.bar.set_postfix_str("starting")

    def __call__(self, progress: Progress) -> None:
        self.bar.bar_format = BAR_FORMAT if progress.total else PHASE_FORMAT
        self.bar.total = progress.total
        self.bar.n = progress.done
        self.bar.set_postfix_str(progress.phase)  # refreshes the bar

    def close(self) -> None:
        self.bar.close()


# label: steps of the phase, time spent < time left in the phase (tqdm's estimate from its rate), the phase
BAR_FORMAT = "{desc}: {n_fmt}/{total_fmt} steps [{elapsed}<{remaining}{postfix}]"
PHASE_FORMAT = "{desc}: [{elapsed}{postfix}]"  # a phase without steps: its name and the time spent


def finished_line(record: RunRecord, seconds: float, reused: bool = False) -> str:
    """One configuration's outcome in a line: its figure and timed steps, or why it failed, and the time it took."""
    if reused:
        source = record.metrics.get("reused_from") or {}
        where = f" by {source['notebook']}" if isinstance(source, dict) and source.get("notebook") else ""
        ident = source.get("record_id", "?") if isinstance(source, dict) else source
        return f"{record.label}: reused, measured earlier{where} (record {ident})"
    if not record.ok:
        return f"{record.label}: failed after {seconds:.1f} s: {record.reason.splitlines()[0] if record.reason else ''}"
    figure = record.metrics.get("real_tokens_per_s")
    steps = record.metrics.get("timed_steps")
    measured = f"{figure:,.0f} real tok/s" if isinstance(figure, (int, float)) else "measured"
    on = f" on {steps} timed steps" if isinstance(steps, int) else ""
    syncs = record.metrics.get("host_syncs_per_step")
    waits = f", the host waited {syncs:,} times in a profiled step" if isinstance(syncs, int) else ""
    return f"{record.label}: {measured}{on}{waits} ({seconds:.1f} s)"


def run_configs(
    configs: Iterable[RunConfig],
    store: RunStore | None = None,
    notebook: str = "",
    isolate: bool = True,
    progress: bool = True,
    annotate: Callable[[RunRecord, list[RunRecord]], None] | None = None,
    reuse: Callable[[RunConfig], RunRecord | None] | None = None,
    extra_env: Callable[[RunConfig], dict[str, str] | None] | None = None,
) -> list[RunRecord]:
    """Measure configurations one after another, appending each record to the store as it lands.

    ``annotate(record, earlier_records)`` may add to a record before it is stored (records are
    append-only), e.g. :func:`nbhelpers.analysis.parity.check_against_first`. ``reuse(config)`` may return a
    record already in the store that measured the same thing (marked ``metrics["reused_from"]``): it stands in
    for the measurement and is not stored again. ``extra_env(config)`` may add to a measured configuration's
    environment (e.g. the folders of its compiled-kernel caches).
    """
    configs = list(configs)
    if store is not None and configs:
        store.check_writable()  # a read-only or vanished runs folder fails before anything is measured
    iterator: Iterable[RunConfig] = configs
    bar = None
    plain = plain_bars()  # a batch run's text: one bar at a time, numbered, instead of a bar over bars
    if progress:
        bar = progress_bar(configs, desc="configurations", unit="config", disable=plain)
        iterator = bar
    records = []
    for number, config in enumerate(iterator, 1):
        steps = None
        if bar is not None:
            bar.set_postfix_str(config.name)
            steps = ConfigBar(f"[{number}/{len(configs)}] {config.name}" if plain else config.name, nested=not plain)
        stored = reuse(config) if reuse is not None else None
        started = time.perf_counter()
        try:
            env = extra_env(config) if extra_env is not None and stored is None else None
            record = stored or run_config(config, isolate=isolate, notebook=notebook, on_progress=steps, extra_env=env)
        finally:
            if steps is not None:
                steps.close()
        if bar is not None:  # a line that stays, in a live notebook and in its saved copy alike
            bar.write(finished_line(record, time.perf_counter() - started, reused=stored is not None))
        if annotate is not None:
            annotate(record, records)
        if store is not None and stored is None:
            store.append(record)
        records.append(record)
    return records
