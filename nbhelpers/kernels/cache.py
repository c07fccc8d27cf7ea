"""Startup cost: compiled-kernel caches (Triton with its autotune results, TorchInductor, tilelang) warmed once,
shipped as a tar.gz, reused.

torch.compile, Triton and tilelang spend the first step compiling and autotuning; each keeps what it compiled on
disk (the table :data:`nbhelpers.kernels.registry.COMPILED_CACHES`: ``TRITON_CACHE_DIR`` with
``TRITON_CACHE_AUTOTUNING=1`` for the autotuner's choices, ``TORCHINDUCTOR_CACHE_DIR``, ``TILELANG_CACHE_DIR``).
Warm the caches once for the configured shapes, export them (all, or the ones a backend fills), and import them
where the next job starts (another machine, a Databricks cluster, a container image), so its first step is fast.
:func:`nbhelpers.measure.startup.cold_vs_warm` measures the difference.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from nbhelpers.validation import output_target

from .registry import COMPILED_CACHES, find_backend, kernel_backend


class UnsafeArchiveError(ValueError):
    """A cache archive member that would land outside the cache folder (or is not a plain file)."""


def check_cache_names(caches: Iterable[str], parameter: str = "caches") -> tuple[str, ...]:
    """The cache names as a tuple; ValueError naming the parameter and the caches the table has otherwise."""
    names = tuple(caches)
    unknown = [name for name in names if name not in COMPILED_CACHES]
    if unknown:
        raise ValueError(f"{parameter}={list(names)!r}: {', '.join(unknown)} unknown; caches are "
                         f"{', '.join(COMPILED_CACHES)}")  # fmt: skip
    return names


def cache_env(cache_dir: str | Path, caches: Iterable[str] | None = None) -> dict[str, str]:
    """Environment that points the compiled-kernel caches (all, or ``caches``) into ``cache_dir/<name>`` and
    turns on their result caching (Triton's autotune results)."""
    root = Path(cache_dir).resolve()
    env: dict[str, str] = {}
    for name in check_cache_names(COMPILED_CACHES if caches is None else caches):
        env[COMPILED_CACHES[name].variable] = str(root / name)
        env.update(COMPILED_CACHES[name].switches)
    return env


def make_cache_folders(env: dict[str, str]) -> None:
    """Create the folder of every cache an environment from :func:`cache_env` points somewhere."""
    for cache in COMPILED_CACHES.values():
        if cache.variable in env:
            Path(env[cache.variable]).mkdir(parents=True, exist_ok=True)


def backend_caches(kernels: str) -> tuple[str, ...]:
    """The caches a kernel backend of the table fills (() for eager); BackendUnavailable for an unknown name."""
    return kernel_backend(kernels).caches


def cache_files(cache_dir: str | Path) -> list[Path]:
    """Regular files under the cache folder, relative to it, sorted."""
    root = Path(cache_dir)
    if not root.exists():
        return []
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def cache_summary(cache_dir: str | Path) -> dict[str, Any]:
    """Files and bytes per cache (triton, inductor, tilelang) in a cache folder."""
    root = Path(cache_dir)
    summary: dict[str, Any] = {"cache_dir": str(root)}
    for name in COMPILED_CACHES:
        files = cache_files(root / name)
        summary[f"{name}_files"] = len(files)
        summary[f"{name}_bytes"] = sum((root / name / f).stat().st_size for f in files)
    return summary


def export_cache(cache_dir: str | Path, archive_path: str | Path, caches: Iterable[str] | None = None) -> Path:
    """Write the cache folder's regular files to a tar.gz (paths relative to the folder); its path.

    ``caches`` keeps only those caches' folders (e.g. :func:`backend_caches` of one backend); None keeps all.
    """
    root = Path(cache_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"cache_dir={str(root)!r}: no such folder")
    kept = None if caches is None else set(check_cache_names(caches))
    archive = output_target(archive_path, "archive")  # a link is written through; a folder or device refused
    archive.parent.mkdir(parents=True, exist_ok=True)
    staging = archive.with_name(archive.name + ".tmp")
    with tarfile.open(staging, "w:gz") as tar:
        for relative in cache_files(root):
            if kept is None or relative.parts[0] in kept:
                tar.add(root / relative, arcname=relative.as_posix(), recursive=False)
    staging.replace(archive)
    return archive


def _check_member(member: tarfile.TarInfo) -> None:
    path = PurePosixPath(member.name)
    if path.is_absolute() or member.name.startswith(("/", "\\")) or ".." in path.parts or ":" in member.name:
        raise UnsafeArchiveError(f"refusing archive member {member.name!r}: absolute path or '..'")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"refusing archive member {member.name!r}: not a regular file or folder")


def warm_probe_caches(cache_dir: str | Path, device: str = "auto", timeout_s: float = 900) -> dict[str, Any]:
    """Run the kernel doctor's probes in a fresh process whose caches live in ``cache_dir``: every fused kernel
    this machine runs is compiled (and autotuned) once; the cache summary. Seconds on a GPU, ~10 s on a CPU."""
    env = os.environ | cache_env(cache_dir)
    make_cache_folders(env)
    command = [sys.executable, "-m", "nbhelpers.kernels.probe_run", "--device", device]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    if result.returncode not in (0, 1):  # 1: the doctor ran and found a broken path
        raise RuntimeError(f"the doctor's probes failed to run (exit {result.returncode}): {result.stderr[-2000:]}")
    return cache_summary(cache_dir)


def import_cache(archive_path: str | Path, cache_dir: str | Path) -> list[str]:
    """Unpack a cache archive into ``cache_dir``; the member names. Nothing is written if any member is
    unsafe (absolute path, '..', link or device): that raises UnsafeArchiveError naming it."""
    root = Path(cache_dir)
    with tarfile.open(archive_path, "r:*") as tar:
        members = tar.getmembers()
        for member in members:
            _check_member(member)
        root.mkdir(parents=True, exist_ok=True)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, members=members, filter="data")
        else:  # pragma: no cover - Python without extraction filters; members were checked above
            tar.extractall(root, members=members)
    return [m.name for m in members if m.isfile()]


def startup_backend(backends: Iterable[str]) -> str | None:
    """The backend whose startup is worth measuring: one that fills Inductor's cache (the fewest parts first,
    so plain torch.compile), else the first that fills any compiled-kernel cache; None when none does."""
    filling = [b for name in backends if (b := find_backend(name.strip())) is not None and b.caches]
    inductor = [b for b in filling if "inductor" in b.caches]
    if inductor:
        return min(inductor, key=lambda b: len(b.components)).name
    return filling[0].name if filling else None
