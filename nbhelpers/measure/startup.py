"""Startup cost measured: the configured shapes run once with their compiled-kernel caches in a folder (cold),
then again on a relocated copy of that cache (warm), and the filled cache exported for the next job.

A notebook that measures the startup backend anyway runs that row in the cold folder (:func:`cold_start_env`):
its own first step is then the cold start, and only the warm run is added (:func:`measure_startup`).

The caches themselves (folders, environment, archives) are :mod:`nbhelpers.kernels.cache`; the table of the
records is :func:`nbhelpers.analysis.startup.startup_table`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.kernels.cache import (
    cache_env,
    cache_files,
    cache_summary,
    export_cache,
    import_cache,
    make_cache_folders,
    startup_backend,
)

from .config import RunConfig
from .runner import prime_spare, run_isolated, shared_kernel_cache_folder
from .store import RunRecord

STARTUP_KIND = "startup"
STARTUP_STEPS = 3  # timed steps after the first of a startup run: its first step and a step median are what count


def warm_caches(
    config: RunConfig, cache_dir: str | Path, notebook: str = "", next_cache_dir: str | Path | None = None
) -> RunRecord:
    """Run the configured shapes once in a subprocess whose caches live in ``cache_dir`` (autotune results
    kept); its record. ``next_cache_dir``: the cache folder of the run after this one (its spare worker, where
    spares are used, starts with that folder's environment; it touches no cache before its job).

    When ``cache_dir`` starts empty, the record's ``first_step_s`` is the cold start.
    """
    env = cache_env(cache_dir)
    make_cache_folders(env)
    next_env = cache_env(next_cache_dir) if next_cache_dir is not None else None
    return run_isolated(config, notebook=notebook, extra_env=env, next_extra_env=next_env)


def _mark_cache(record: RunRecord, cache: str, cache_dir: Path) -> RunRecord:
    """The record, its metrics saying which cache it started on ("cold", "warm"), where, and what it held after."""
    if record.ok:
        record.metrics["cache"] = cache
        record.metrics["cache_dir"] = str(cache_dir)
        record.metrics.update({k: v for k, v in cache_summary(cache_dir).items() if k != "cache_dir"})
    return record


def _as_startup(record: RunRecord, cache: str, cache_dir: Path) -> RunRecord:
    record.kind = STARTUP_KIND
    record.config["label"] = f"{record.label} ({cache} cache)"
    return _mark_cache(record, cache, cache_dir)


@dataclass(frozen=True)
class StartupFolders:
    """The startup pair's two cache folders, empty when made: the cold run fills the first, the warm run reads a
    relocated copy of it from the second."""

    cold: Path
    warm: Path


def make_startup_folders(workdir: str | Path) -> StartupFolders:
    """Two new empty cache folders in ``workdir``."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    cold = Path(tempfile.mkdtemp(prefix="kernel-cache-cold-", dir=work))
    return StartupFolders(cold, Path(tempfile.mkdtemp(prefix="kernel-cache-warm-", dir=work)))


def prepare_startup(configs: Iterable[RunConfig], workdir: str | Path, enabled: bool = True) -> StartupFolders | None:
    """Before the notebook's other measurements: the startup pair's folders, and on a GPU a spare process that does
    its imports in the cold folder's environment meanwhile (it touches no cache before its job); None when
    :func:`measure_startup` will measure nothing."""
    if not enabled or startup_backend({c.kernels for c in configs}) is None:
        return None
    folders = make_startup_folders(workdir)
    env = cache_env(folders.cold)
    make_cache_folders(env)
    prime_spare(env)
    return folders


def cold_vs_warm(
    config: RunConfig, workdir: str | Path, notebook: str = "", folders: StartupFolders | None = None
) -> list[RunRecord]:
    """Two records of one config (kind "startup"), as a later job would see them.

    Cold: a fresh process with empty caches, which it fills. Warm: the filled cache exported to a tar.gz,
    imported into another folder (a relocated copy, like a cache shipped to another machine), and the
    same config run again on it. Compare their ``metrics["first_step_s"]``; both caches stay in ``workdir``
    (or in ``folders``, made beforehand by :func:`prepare_startup`).
    """
    folders = folders or make_startup_folders(workdir)
    cold = _as_startup(warm_caches(config, folders.cold, notebook, next_cache_dir=folders.warm), "cold", folders.cold)
    return [cold, _warm_run(config, folders, notebook)]


def _warm_run(config: RunConfig, folders: StartupFolders, notebook: str) -> RunRecord:
    """The cold folder exported, imported into the warm one (a relocated copy) and into the run's shared kernel
    cache (later configurations start from it), then ``config`` run on the warm copy (kind "startup")."""
    archive = export_cache(folders.cold, folders.cold.with_name(folders.cold.name + ".tar.gz"))
    import_cache(archive, folders.warm)
    try:
        import_cache(archive, shared_kernel_cache_folder())
    except OSError:  # an unwritable shared cache: later configurations compile again, nothing else changes
        pass
    warm = run_isolated(config, notebook=notebook, extra_env=cache_env(folders.warm))
    warm = _as_startup(warm, "warm", folders.warm)
    if warm.ok:
        warm.metrics["cache_archive"] = str(archive)
    return warm


def cold_start_env(
    configs: Iterable[RunConfig], folders: StartupFolders | None
) -> Callable[[RunConfig], dict[str, str] | None] | None:
    """For a notebook's grid (``extra_env`` of :func:`nbhelpers.measure.runner.run_configs`): the first configuration
    of the startup backend runs with its caches in the startup pair's empty cold folder, so that its first step
    is the cold start and :func:`measure_startup` adds only the warm run; None without ``folders``."""
    backend = startup_backend({c.kernels for c in configs})
    if folders is None or backend is None:
        return None
    env = cache_env(folders.cold)
    given: list[RunConfig] = []

    def extra(config: RunConfig) -> dict[str, str] | None:
        if config.kernels != backend or given:
            return None
        given.append(config)
        return env

    return extra


def _cold_row(measured: Iterable[RunRecord], backend: str, folders: StartupFolders | None) -> RunRecord | None:
    """The grid's record of the startup backend measured in the cold folder (by :func:`cold_start_env`), if any:
    measured here (not reused from the store) and the cold folder holds what it compiled."""
    if folders is None or not cache_files(folders.cold):
        return None
    return next((r for r in measured if r.config.get("kernels") == backend and not r.reused), None)


def measure_startup(
    configs: Iterable[RunConfig], workdir: str | Path, enabled: bool = True, notebook: str = "",
    folders: StartupFolders | None = None, measured: Iterable[RunRecord] = (),
) -> list[RunRecord]:  # fmt: skip
    """cold_vs_warm of the backend :func:`~nbhelpers.kernels.cache.startup_backend` picks among ``configs`` (no
    profiler, no parity probe: the backend's own record has them), in ``folders`` when :func:`prepare_startup`
    made them; [] when disabled or when no backend fills a compiled-kernel cache (eager only).

    When ``measured`` holds that backend's grid record run in the cold folder (:func:`cold_start_env`), that record
    is the cold start (marked, not copied: it stays one record) and only the warm run is made; a failed one is
    returned alone (nothing was compiled to start warm from)."""
    by_kernels: dict[str, RunConfig] = {}
    for each in configs:  # the first configuration of each backend (the one cold_start_env gave the cold folder)
        by_kernels.setdefault(each.kernels, each)
    backend = startup_backend(by_kernels)
    if not enabled or backend is None:
        return []
    config = startup_config(by_kernels[backend])
    cold = _cold_row(measured, backend, folders)
    if cold is None or folders is None:
        return cold_vs_warm(config, workdir, notebook, folders)
    if not cold.ok:
        return [cold]
    return [_mark_cache(cold, "cold", folders.cold), _warm_run(config, folders, notebook)]


def startup_config(config: RunConfig) -> RunConfig:
    """The configuration as a startup run makes it: its first step and a few more (:data:`STARTUP_STEPS`, enough for
    a step median), no profiler, no parity probe (the backend's own record has them)."""
    return config.replace(timing="steps", steps=STARTUP_STEPS, warmup=0, profile=False,
                          extra=config.extra | {"parity_probe_samples": 0})  # fmt: skip


def export_startup_cache(records: Iterable[RunRecord], archive_path: str | Path) -> Any:
    """Export the cache the startup records filled to a tar.gz; a one-row table of what was written."""
    import pandas as pd

    cache_dirs = [r.metrics["cache_dir"] for r in records if r.ok and r.metrics.get("cache_dir")]
    if not cache_dirs:
        return pd.DataFrame(
            [{"archive": "", "files": 0, "MiB": 0.0, "note": "no startup measurement: nothing to export"}]
        )
    archive = export_cache(cache_dirs[-1], archive_path)
    files = len(cache_files(cache_dirs[-1]))
    note = "unpack with import_cache(archive, folder); point the job at it with cache_env(folder)"
    return pd.DataFrame(
        [{"archive": str(archive), "files": files, "MiB": archive.stat().st_size / 2**20, "note": note}]
    )
