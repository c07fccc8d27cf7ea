"""``nbhelpers warm-cache``: pre-build the kernels of one configuration (fill, export or start from a kernel-cache
archive), its options and its command."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbhelpers.measure.config import RunConfig
from nbhelpers.validation import output_target

if TYPE_CHECKING:
    from nbhelpers.measure.store import RunRecord


def warm_arguments(warm: argparse.ArgumentParser, defaults: dict[str, Any], helps: dict[str, str]) -> None:
    """The options of ``warm-cache``: ``defaults`` are RunConfig's, ``helps`` each workload option's text."""
    warm.add_argument("--cache-dir", required=True, help="folder the kernel caches fill (one sub-folder per cache)")
    warm.add_argument("--archive", default=None, help="also export the caches to this tar.gz")
    warm.add_argument("--caches", default="", help="comma-separated caches to export (default: all)")
    warm.add_argument("--from-archive", default=None,
                      help="unpack this archive (made by --archive, on this machine or another) into --cache-dir "
                           "first: the step then starts on the carried kernels")  # fmt: skip
    warm.add_argument(
        "--out", default=None, help="append the step's record to OUT/warm-cache.jsonl, with its manifest line"
    )
    warm.add_argument("--device", default="auto", help="one of auto, cpu, cuda")
    warm.add_argument("--no-step", action="store_true", help="only the doctor's probes, no training step")
    warm.add_argument("--no-probes", action="store_true",
                      help="no doctor's probes: only the training step fills the caches (its first step is then "
                           "the cold start of an empty folder)")  # fmt: skip
    warm.add_argument("--dry-run", action="store_true", help="check the options, print the step and the caches")
    for name in ("model", "kernels", "padding", "attn_implementation", "dtype"):
        warm.add_argument(f"--{name.replace('_', '-')}", default=defaults[name], help=helps[name])
    for name in ("batch_size", "max_length", "num_samples", "token_budget"):
        warm.add_argument(f"--{name.replace('_', '-')}", type=int, default=defaults[name], help=helps[name])
    warm.add_argument("--liger-kernels", default=",".join(defaults["liger_kernels"]),
                      help="comma-separated Liger switches of a backend that runs Liger")  # fmt: skip


def _check_cache_folder(cache_dir: Path, given: str) -> None:
    """ValueError naming --cache-dir when the folder could not be made or written: a link to nowhere, a file where a
    folder must be, or a folder that cannot be written; nothing is created."""
    if cache_dir.is_symlink() and not cache_dir.exists():
        raise ValueError(f"--cache-dir={given!r}: a link to {cache_dir.resolve()}, which does not exist")
    folder = cache_dir.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"--cache-dir={given!r}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--cache-dir={given!r}: {folder} cannot be written")


def warm_cache(args: argparse.Namespace, command: str) -> int:
    from nbhelpers.kernels.cache import (
        cache_env,
        cache_summary,
        check_cache_names,
        export_cache,
        warm_probe_caches,
    )  # fmt: skip
    from nbhelpers.measure.startup import warm_caches
    from nbhelpers.models.loading import model_source
    from nbhelpers.planning.kernel_grid import parse_switches
    from nbhelpers.planning.lists import parse_list

    caches = check_cache_names(parse_list(args.caches, None, "--caches", empty=True), "--caches") or None
    cache_dir = Path(args.cache_dir.strip()) if args.cache_dir.strip() else None
    if cache_dir is None or (cache_dir.exists() and not cache_dir.is_dir()):
        raise ValueError(f"--cache-dir={args.cache_dir!r}: name a folder (created if missing) for the kernel caches")
    model_source(args.model)  # a misspelt preset or a missing folder fails here, before anything compiles
    if args.archive:
        output_target(args.archive, "--archive")  # a folder, a device or a pipe is refused, not renamed over
    if args.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device={args.device!r}: allowed are auto, cpu, cuda")
    _check_cache_folder(cache_dir, args.cache_dir)  # also under --dry-run; creates nothing
    if args.no_step and args.no_probes:
        raise ValueError("--no-step with --no-probes: nothing would fill the caches; leave one of them out")
    if args.from_archive and not Path(args.from_archive).is_file():
        raise ValueError(f"--from-archive={args.from_archive!r}: no such file (an archive made by --archive)")
    config = RunConfig(
        run_name="warm-cache", model=args.model, kernels=args.kernels, padding=args.padding,
        attn_implementation=args.attn_implementation, dtype=args.dtype, batch_size=args.batch_size,
        max_length=args.max_length, num_samples=args.num_samples, token_budget=args.token_budget, steps=1,
        warmup=0, device=args.device, liger_kernels=parse_switches(args.liger_kernels, "--liger-kernels"),
    )  # fmt: skip
    if not args.no_step:  # what the step would refuse here is refused now, by the dry run and the run alike
        from nbhelpers.measure.env import resolve_device
        from nbhelpers.planning.device import backend_refusal

        device = resolve_device(config.device)
        if reason := backend_refusal(config.kernels, config.liger_kernels, device, "--liger-kernels"):
            raise ValueError(f"--kernels={config.kernels!r} cannot run on {device}: {reason}")
    if args.dry_run:
        print(f"step: {'none' if args.no_step else config.name}")
        print("\n".join(f"{key}={value}" for key, value in cache_env(args.cache_dir).items()))
        return 0
    started_on = _start_cache(cache_dir, args.from_archive)
    summary = {} if args.no_probes else warm_probe_caches(args.cache_dir, args.device)
    if not args.no_step:
        record = warm_caches(config, args.cache_dir, notebook="nbhelpers warm-cache")
        record.metrics["cache"] = started_on
        record.metrics["probes_before_step"] = not args.no_probes  # the doctor's probes fill the caches too
        if args.from_archive:
            record.metrics["archive_bytes"] = Path(args.from_archive).stat().st_size
        if args.out:
            _store_warm_record(record, Path(args.out), command)
        if not record.ok:
            print(f"nbhelpers warm-cache: the training step failed: {record.reason}", file=sys.stderr)
            return 1
        print(f"first step: {record.metrics.get('first_step_s', float('nan')):.1f} s (cache: {started_on})")
        summary = cache_summary(args.cache_dir)
    print(", ".join(f"{key} {value}" for key, value in summary.items()))
    if args.archive:
        print(export_cache(args.cache_dir, args.archive, caches))
    return 0


def _start_cache(cache_dir: Path, archive: str | None) -> str:
    """Unpack ``archive`` into ``cache_dir`` when given; what the step starts on: "archive", "warm" (a folder that
    already holds kernels) or "cold" (an empty one)."""
    from nbhelpers.kernels.cache import cache_files, import_cache

    if archive:
        import_cache(archive, cache_dir)
        return "archive"
    return "warm" if cache_dir.is_dir() and cache_files(cache_dir) else "cold"


def _store_warm_record(record: RunRecord, out: Path, command: str) -> None:
    """Append ``record`` to ``out/warm-cache.jsonl`` with its manifest line (``command``, the one that made it)."""
    from nbhelpers.bench.manifest import ManifestStore

    ManifestStore(out / "warm-cache.jsonl", command=command).append(record)
