"""Command line: ``nbhelpers run-all``, ``sweep``, ``tune``, ``report``, ``doctor``, ``warm-cache`` and ``bench``.

    nbhelpers run-all [--notebooks-dir DIR] [--out RUNS] [--run-name default] [-p [NN:]NAME=VALUE ...]
    nbhelpers sweep --grid batch_size=2,4 max_length=64,128 padding=dynamic,packed \\
                    [--notebooks 01,02,03,04] [--out RUNS] [--name NAME] [--retry-failed] [--restart]
    nbhelpers tune --run-name R --model M --batch-size 8 --max-length 2048 --num-samples 32 \\
                   --kernels eager,liger --strategies static,packed,token_budget --attention sdpa,torch_varlen \\
                   --budget-s 300 [--adapter lora --lora-rank 16 --lora-alpha 32 --lora-targets all-linear]
    nbhelpers report RUN_DIR [RUN_DIR ...] [--output report.html] [--baseline LABEL]
    nbhelpers doctor [--run-name R] [--out RUNS] [--pin kernel-set.txt] [--json] [--device auto] [--no-probes]
    nbhelpers warm-cache --cache-dir DIR [--archive kernel-cache.tar.gz] [--model M --kernels liger ...] [--no-step]
    nbhelpers bench [SUITE ...] [--out DIR] [--list] [--dry-run] [--rehearse] [--reference FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from nbhelpers.bench.options import add_arguments as _bench_arguments
from nbhelpers.measure.config import RunConfig
from nbhelpers.planning.device import GPU_AUTO_KERNELS, TUNER_CPU_KERNELS
from nbhelpers.planning.notebook_defaults import NOTEBOOK_DEFAULTS, command_defaults
from nbhelpers.resources import notebooks_folder, runs_folder
from nbhelpers.validation import ConfigError, check_run_name, output_target
from nbhelpers.warm_cache import warm_arguments, warm_cache

if TYPE_CHECKING:
    from nbhelpers.measure.store import RunRecord

# RunConfig's defaults, for the options of ``tune`` that set its fields.
RUN_CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}
# warm-cache's step has the notebooks' shape; its one kernel backend stays RunConfig's (auto names a list)
STEP_SHAPE = ("MODEL", "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, unless it has none to show (None, "", [], a switch that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        if default is None or default is False or (isinstance(default, (str, list)) and not default):
            return action.help or ""
        return super()._get_help_string(action) or ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbhelpers", description="Run the fine-tuning workbook and report.")
    sub = parser.add_subparsers(dest="command", required=True)

    run_all = sub.add_parser(
        "run-all", help="run every notebook once on its defaults, print the report path",
        description="Run the numbered notebooks in order (papermill), each on its parameters cell's defaults and "
                    "the -p values, into one run folder; print the report's path.",
        epilog="example: nbhelpers run-all --run-name first -p MODEL=qwen3-0.6b -p 03:TUNE_BUDGET_S=60",
        formatter_class=DefaultsHelpFormatter,
    )  # fmt: skip
    run_all.add_argument("--notebooks-dir", default=None, help="numbered notebooks (default: the workbook's)")
    run_all.add_argument("--out", default=None, help="runs folder (default: $NBHELPERS_RUNS or the workbook's runs/)")
    run_all.add_argument("--run-name", default="default", help="RUN_NAME passed to every notebook")
    run_all.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    run_all.add_argument("--timeout", type=float, default=None, help="seconds a cell may run (default: none)")
    run_all.add_argument("--no-progress", action="store_true", help="no progress bar")
    run_all.add_argument(
        "-p", "--param", action="append", default=[], metavar="[NN:]NAME=VALUE",
        help="a notebook parameter (repeatable); NN: limits it to notebooks named NN...; "
        "a notebook only receives the parameters its parameters cell declares",
    )  # fmt: skip

    _tune_arguments(sub.add_parser(
        "tune", help="search kernels x padding x attention within a time budget",
        description="Search kernel backends x padding strategies x attention implementations on one workload "
                    "within a wall-clock budget (successive halving); the winner is stored as the run's tuned "
                    "configuration.",
        epilog="example: nbhelpers tune --model qwen3-tiny --strategies static,packed,token_budget --budget-s 120 "
               "(on a GPU: --kernels eager,liger --attention sdpa,torch_varlen)",
        formatter_class=DefaultsHelpFormatter,
    ))  # fmt: skip

    sweep = sub.add_parser(
        "sweep", help="run the notebooks once per grid point (resumable)",
        description="Run the notebooks once per combination of the grid's values, each point in its own run "
                    "folder under OUT/NAME; a journal makes a rerun resume where the last one stopped.",
        epilog="example: nbhelpers sweep --grid batch_size=2,4 padding=dynamic,packed --notebooks 01,03",
        formatter_class=DefaultsHelpFormatter,
    )  # fmt: skip
    sweep.add_argument(
        "--grid",
        nargs="+",
        required=True,
        metavar="NAME=V1,V2",
        help="parameter values; every combination runs",
    )
    sweep.add_argument("--notebooks", default="", help="comma-separated numbers or names (default: all)")
    sweep.add_argument("--notebooks-dir", default=None, help="numbered notebooks (default: the workbook's)")
    sweep.add_argument(
        "--out", default=None, help="runs folder (default: $NBHELPERS_RUNS or the workbook's runs/); writes OUT/NAME"
    )
    sweep.add_argument("--name", default=None, help="sweep name (default: derived from grid and notebooks)")
    sweep.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    sweep.add_argument("--timeout", type=float, default=None, help="seconds a cell may run (default: none)")
    sweep.add_argument("--restart", action="store_true", help="ignore the journal: run every point again")
    sweep.add_argument("--retry-failed", action="store_true", help="run again what the journal says failed")
    sweep.add_argument("--no-report", action="store_true", help="no report.html over all points at the end")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")

    _doctor_arguments(sub.add_parser(
        "doctor", help="check every fused kernel path: installed, compatible, correct",
        description="Check every fused kernel path of this machine: the packages installed, known-bad version "
                    "pairs, and a probe of each kernel against its reference; ends with a verdict.",
        epilog="example: nbhelpers doctor --device cpu --no-probes", formatter_class=DefaultsHelpFormatter,
    ))  # fmt: skip
    warm_arguments(sub.add_parser(
        "warm-cache", help="pre-build the kernels: fill (and export) the kernel caches",
        description="Fill the compiled-kernel caches (Triton, Inductor, tilelang) with one training step of a "
                    "configuration and the doctor's probes, and optionally export them as an archive.",
        epilog="example: nbhelpers warm-cache --cache-dir /tmp/kernel-cache --model qwen3-tiny --kernels liger "
               "--dry-run",
        formatter_class=DefaultsHelpFormatter,
    ), RUN_CONFIG_DEFAULTS | command_defaults(STEP_SHAPE), _workload_help())  # fmt: skip

    report = sub.add_parser(
        "report", help="write the HTML report of one or more run folders",
        description="Write the HTML report (waterfall, table, recommendation, peers, monitor) of the records in "
                    "one or more run folders.",
        epilog="example: nbhelpers report runs/default runs/gpu --output runs/both.html",
        formatter_class=DefaultsHelpFormatter,
    )  # fmt: skip
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders or records.jsonl files")
    report.add_argument("--output", "-o", default=None, help="HTML path (default: FIRST_RUN_DIR/report.html)")
    report.add_argument("--baseline", default=None, help="label of the baseline configuration")
    _bench_arguments(sub.add_parser(
        "bench", help="measure benchmark suites, filed by what they measure",
        description="Measure named suites of configurations through the runner; each record lands in "
                    "OUT/<suite>.jsonl with its line (date, machine, commit, command) in the manifest beside it.",
        epilog="example: nbhelpers bench qwen3-tiny/bench-smoke --out /tmp/bench",
        formatter_class=DefaultsHelpFormatter,
    ))  # fmt: skip
    return parser


def _doctor_arguments(doctor: argparse.ArgumentParser) -> None:
    doctor.add_argument("--run-name", default=None, help="append the verdict to runs/RUN_NAME/records.jsonl")
    doctor.add_argument("--out", default=None, help="runs folder (default: $NBHELPERS_RUNS or the workbook's runs/)")
    doctor.add_argument("--pin", default=None, metavar="FILE", help="write the curated kernel set (pip -r file)")
    doctor.add_argument("--json", action="store_true", help="print the verdict as JSON instead of a table")
    doctor.add_argument("--device", default="auto", help="one of auto, cpu, cuda")
    doctor.add_argument("--no-probes", action="store_true", help="inventory and known-bad table only")


@contextlib.contextmanager
def _stdout_to_stderr(enabled: bool) -> Iterator[None]:
    """Send whatever is written to stdout, by Python or by native code, to stderr while the block runs."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _doctor(args: argparse.Namespace) -> int:
    import json

    from nbhelpers.kernels.doctor import doctor_text, run_doctor
    from nbhelpers.kernels.kernel_set import pin_target
    from nbhelpers.measure.doctor_records import doctor_record, write_kernel_set
    from nbhelpers.measure.jsonl import dumps
    from nbhelpers.measure.store import RunStore

    if args.out:
        os.environ["NBHELPERS_RUNS"] = str(args.out)
    if args.pin:
        pin_target(args.pin)  # a --pin that names no regular file fails before the doctor runs
    if args.run_name:  # a bad name or a folder that cannot take the record fails before the doctor runs
        RunStore.for_run(check_run_name(args.run_name, "--run-name")).check_writable()
    with _stdout_to_stderr(enabled=args.json):  # kernel libraries log to stdout (tilelang's compile lines)
        report = run_doctor(args.device, run_probes=not args.no_probes)
    record = doctor_record(report, args.run_name or "default", notebook="nbhelpers doctor")
    if args.run_name:
        RunStore.for_run(args.run_name).append(record)
    if args.json:
        print(json.dumps(json.loads(dumps(record.to_dict())), indent=1))
    else:
        print(doctor_text(report))
    if args.pin:
        print(f"kernel set written to {write_kernel_set(record, args.pin)}", file=sys.stderr)
    return 1 if record.metrics["broken"] else 0


def _command_line(argv: Sequence[str] | None) -> str:
    """The command as typed: ``nbhelpers`` and its arguments (``argv``, else this process's)."""
    import shlex

    return shlex.join(["nbhelpers", *(sys.argv[1:] if argv is None else argv)])


def _workload_help() -> dict[str, str]:
    """What each workload option of ``tune`` sets, with its allowed values (read from the tables)."""
    from nbhelpers.data.strategies import PADDING_STRATEGIES
    from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
    from nbhelpers.kernels.registry import KERNEL_BACKENDS
    from nbhelpers.measure.config import DEVICES, DTYPES, TIMINGS
    from nbhelpers.measure.memory_cap import cap_rule
    from nbhelpers.models.adapters import ADAPTER_NAMES
    from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES

    return {
        "model": "a preset (e.g. qwen3-tiny, qwen3-1.7b, qwen3.5-2b), a hub id or a local folder",
        "dataset": "'default', a JSONL/JSON/Parquet path, or a datasets name",
        "batch_size": "sequences per step", "max_length": "longest sequence kept (longer ones are truncated)",
        "num_samples": "samples of the dataset, the same for every candidate", "steps": "timed steps",
        "warmup": "untimed steps before timing", "seed": "seed of weights, sampling and data order",
        "timing": f"one of {', '.join(TIMINGS)}", "dtype": f"one of {', '.join(DTYPES)}",
        "device": f"one of {', '.join(DEVICES)}", "adapter": f"one of {', '.join(ADAPTER_NAMES)}",
        "lora_targets": "PEFT's target_modules: all-linear or a comma list of module names",
        "lora_rank": "LoRA's rank r", "lora_alpha": "LoRA's alpha (the update is scaled by alpha / r)",
        "kernels": f"one of {', '.join(KERNEL_BACKENDS)}", "padding": f"one of {', '.join(PADDING_STRATEGIES)}",
        "attn_implementation": f"one of {', '.join(ATTENTION_IMPLEMENTATIONS)}",
        "token_budget": "tokens per step of padding=token_budget (0 = batch x max length)",
        "frozen_base": f"with an adapter, the frozen base's format: one of {', '.join(FROZEN_BASE_NAMES)}",
        "gpu_memory_gib": f"GiB the step may use per GPU, a smaller GPU on this one (80, 48, 24): the tuner drops "
        f"candidates the memory planner puts over it and the step enforces it; {cap_rule()}",
    }  # fmt: skip


def _tune_arguments(tune: argparse.ArgumentParser) -> None:
    from nbhelpers.data.strategies import PADDING_STRATEGIES
    from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS
    from nbhelpers.kernels.registry import KERNEL_BACKENDS
    # the notebooks' defaults (notebook 03 runs the same tuner), then RunConfig's for what no notebook sets
    defaults = RUN_CONFIG_DEFAULTS | command_defaults(NOTEBOOK_DEFAULTS)
    helps = _workload_help()
    tune.add_argument("--run-name", default=defaults["run_name"], help="run folder under --out for records")
    tune.add_argument("--out", default=None, help="runs folder (default: $NBHELPERS_RUNS or the workbook's runs/)")
    for name in ("model", "dataset", "timing", "dtype", "device", "adapter", "lora_targets", "frozen_base"):
        tune.add_argument(f"--{name.replace('_', '-')}", default=defaults[name], help=helps[name])
    for name in ("batch_size", "max_length", "num_samples", "steps", "warmup", "seed", "lora_rank", "lora_alpha"):
        tune.add_argument(f"--{name.replace('_', '-')}", type=int, default=defaults[name], help=helps[name])
    tune.add_argument("--gpu-memory-gib", type=float, default=defaults["gpu_memory_gib"], help=helps["gpu_memory_gib"])
    tune.add_argument("--kernels", default=defaults["kernels"],
                      help=f"comma-separated kernel backends of {', '.join(KERNEL_BACKENDS)}; auto: {GPU_AUTO_KERNELS} "
                           f"on a GPU, {TUNER_CPU_KERNELS} on a CPU (Liger runs only in Triton's interpreter there)")
    tune.add_argument(
        "--liger-kernels", default="", help="Liger switch sets, ';' between sets (default: RunConfig's set)"
    )
    tune.add_argument("--no-unfused-twin", action="store_true", help="no plain cross-entropy twin of a fused set")
    tune.add_argument("--strategies", default=defaults["strategies"],
                      help=f"comma-separated padding strategies of {', '.join(PADDING_STRATEGIES)}")  # fmt: skip
    tune.add_argument("--token-budgets", default=defaults["tune_token_budgets"],
                      help="comma-separated token budgets (0 = batch x max length)")  # fmt: skip
    tune.add_argument("--attention", default=defaults["attention"],
                      help=f"comma-separated attention implementations of {', '.join(ATTENTION_IMPLEMENTATIONS)}")
    tune.add_argument("--budget-s", type=float, default=float(defaults["tune_budget_s"]),
                      help="wall-clock budget of the whole search")  # fmt: skip
    tune.add_argument("--eta", type=int, default=3, help="each rung keeps the best 1/eta")
    tune.add_argument("--first-steps", type=int, default=2, help="timed steps of rung 0 (x eta per rung)")
    tune.add_argument("--final-count", type=int, default=1, help="survivors measured at the workload's timing")
    tune.add_argument("--no-progress", action="store_true", help="no progress bar")


def _tune(args: argparse.Namespace) -> int:
    import os

    from nbhelpers.models.loading import model_source
    from nbhelpers.tuning import tune
    from nbhelpers.views.tuner_plots import journal_table

    if not math.isfinite(args.budget_s) or args.budget_s <= 0:
        raise ConfigError("budget_s", args.budget_s, "a finite number of seconds > 0 for the whole search")
    model_source(args.model)  # a misspelt preset or a missing folder fails here, not once per candidate
    if args.out:
        os.environ["NBHELPERS_RUNS"] = str(args.out)
    workload = RunConfig(
        run_name=args.run_name, model=args.model, dataset=args.dataset, batch_size=args.batch_size,
        max_length=args.max_length, num_samples=args.num_samples, steps=args.steps, warmup=args.warmup,
        seed=args.seed, timing=args.timing, dtype=args.dtype, device=args.device, adapter=args.adapter,
        lora_rank=args.lora_rank, lora_alpha=args.lora_alpha, lora_targets=args.lora_targets,
        frozen_base=args.frozen_base, gpu_memory_gib=args.gpu_memory_gib,
    )  # fmt: skip
    result = tune(
        workload, args.kernels, args.strategies, args.attention, budget_s=args.budget_s,
        liger_kernels=args.liger_kernels or None, unfused_twin=not args.no_unfused_twin,
        token_budgets=args.token_budgets, eta=args.eta, first_steps=args.first_steps,
        final_count=args.final_count, notebook="nbhelpers tune", progress=not args.no_progress,
    )  # fmt: skip
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_colwidth", 90, "display.max_rows", 500):
        print(journal_table(result.journal).to_string(index=False))
    print(result.summary())
    if result.measured_candidates == 0:
        print(f"nbhelpers tune: {result.why_nothing_measured()}; the baseline is no tuned result", file=sys.stderr)
        return 1
    if result.winner is None:
        print(f"nbhelpers tune: no winner: {result.why_no_winner()}", file=sys.stderr)
        return 1
    return 0


def _parse_params(items: Sequence[str]) -> dict[str, object]:
    from nbhelpers.planning.sweep_grid import parse_value

    params: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--param {item!r} must look like NAME=VALUE or NN:NAME=VALUE")
        params[key.strip()] = parse_value(value)
    return params


def _print_failures(failed: list[dict]) -> None:
    for entry in failed:
        print(f"FAILED {entry['point']} / {entry['notebook']}: {entry.get('error', '')}", file=sys.stderr)


def _report_records(run_dirs: list[str]) -> tuple[list[RunRecord], list[str]]:
    """The records of ``run_dirs`` and the lines their reader skipped (each said on stderr, one line each)."""
    import warnings

    from nbhelpers.analysis.overview import load_report_records
    from nbhelpers.measure.jsonl import SkippedLine

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedLine)
        records = load_report_records(None, run_dirs)
    left_out = []
    for warning in caught:
        if issubclass(warning.category, SkippedLine):
            left_out.append(str(warning.message))
            print(f"nbhelpers report: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return list(records), left_out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run-all":
            from nbhelpers.sweep import run_all

            report, result = run_all(
                args.notebooks_dir or notebooks_folder(),
                args.out or runs_folder(),
                args.run_name,
                kernel_name=args.kernel,
                timeout=args.timeout,
                progress=not args.no_progress,
                parameters=_parse_params(args.param),
            )
            _print_failures(result.failed)
            print(report)
            return 0 if result.ok else 1

        if args.command == "sweep":
            from nbhelpers.planning.sweep_grid import find_notebooks, parse_grid
            from nbhelpers.sweep import run_sweep

            result = run_sweep(
                parse_grid(args.grid),
                find_notebooks(args.notebooks, args.notebooks_dir or notebooks_folder()),
                args.out or runs_folder(),
                args.name,
                kernel_name=args.kernel,
                timeout=args.timeout,
                resume=not args.restart,
                retry_failed=args.retry_failed,
                progress=not args.no_progress,
                report=not args.no_report,
            )
            _print_failures(result.failed)
            done = len(result.entries) - len(result.failed)
            print(
                f"{result.sweep_dir}: {len(result.points)} point(s), {done} notebook run(s) ok, "
                f"{len(result.failed)} failed, {len(result.skipped)} skipped as already finished"
            )
            print(result.journal)
            if result.report is not None:
                print(result.report)
            return 0 if result.ok else 1

        if args.command == "tune":
            return _tune(args)

        if args.command == "doctor":
            return _doctor(args)

        if args.command == "warm-cache":
            return warm_cache(args, _command_line(argv))

        if args.command == "bench":
            from nbhelpers.bench.command import bench

            return bench(args, _command_line(argv))

        if args.command == "report":
            from nbhelpers.analysis.overview import store_for
            from nbhelpers.views.report import write_html_report

            default = store_for(args.run_dirs[0]).path.parent / "report.html"
            output_target(args.output or default, "--output" if args.output else "RUN_DIR")  # before any drawing
            records, left_out = _report_records(list(args.run_dirs))
            path = write_html_report(records, args.output or default, baseline_label=args.baseline, left_out=left_out)
            print(path)
            return 0
    except (ValueError, OSError, RuntimeError) as error:  # a folder that cannot be written is an OSError
        print(f"nbhelpers {args.command}: {error}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
