"""Command line: ``nbhelpers run-all``, ``nbhelpers sweep`` and ``nbhelpers report``.

    nbhelpers run-all [--notebooks-dir notebooks] [--out runs] [--run-name default]
    nbhelpers sweep --grid batch_size=2,4 max_length=64,128 padding=dynamic,packed \\
                    [--notebooks 01,02,03,04] [--out runs] [--name NAME] [--retry-failed] [--restart]
    nbhelpers report RUN_DIR [RUN_DIR ...] [--output report.html] [--baseline LABEL]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbhelpers", description="Run the fine-tuning workbook and report.")
    sub = parser.add_subparsers(dest="command", required=True)

    run_all = sub.add_parser("run-all", help="run every notebook once on its defaults, print the report path")
    run_all.add_argument("--notebooks-dir", default="notebooks", help="folder of the numbered notebooks")
    run_all.add_argument("--out", default="runs", help="runs folder (the report lands in OUT/RUN_NAME)")
    run_all.add_argument("--run-name", default="default", help="RUN_NAME passed to every notebook")
    run_all.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    run_all.add_argument("--timeout", type=float, default=None, help="seconds a cell may run (default: none)")
    run_all.add_argument("--no-progress", action="store_true", help="no progress bar")

    sweep = sub.add_parser("sweep", help="run the notebooks once per grid point (resumable)")
    sweep.add_argument(
        "--grid",
        nargs="+",
        required=True,
        metavar="NAME=V1,V2",
        help="parameter values; every combination runs",
    )
    sweep.add_argument("--notebooks", default="", help="comma-separated numbers or names (default: all)")
    sweep.add_argument("--notebooks-dir", default="notebooks", help="folder of the numbered notebooks")
    sweep.add_argument("--out", default="runs", help="runs folder; the sweep writes OUT/NAME")
    sweep.add_argument("--name", default=None, help="sweep name (default: derived from grid and notebooks)")
    sweep.add_argument("--kernel", default="python3", help="Jupyter kernel name")
    sweep.add_argument("--timeout", type=float, default=None, help="seconds a cell may run (default: none)")
    sweep.add_argument("--restart", action="store_true", help="ignore the journal: run every point again")
    sweep.add_argument("--retry-failed", action="store_true", help="run again what the journal says failed")
    sweep.add_argument("--no-report", action="store_true", help="no report.html over all points at the end")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")

    report = sub.add_parser("report", help="write the HTML report of one or more run folders")
    report.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders or records.jsonl files")
    report.add_argument("--output", "-o", default=None, help="HTML path (default: FIRST_RUN_DIR/report.html)")
    report.add_argument("--baseline", default=None, help="label of the baseline configuration")
    return parser


def _print_failures(failed: list[dict]) -> None:
    for entry in failed:
        print(f"FAILED {entry['point']} / {entry['notebook']}: {entry.get('error', '')}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run-all":
            from nbhelpers.sweep import run_all

            report, result = run_all(
                args.notebooks_dir,
                args.out,
                args.run_name,
                kernel_name=args.kernel,
                timeout=args.timeout,
                progress=not args.no_progress,
            )
            _print_failures(result.failed)
            print(report)
            return 0 if result.ok else 1

        if args.command == "sweep":
            from nbhelpers.sweep import find_notebooks, parse_grid, run_sweep

            result = run_sweep(
                parse_grid(args.grid),
                find_notebooks(args.notebooks, args.notebooks_dir),
                args.out,
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

        if args.command == "report":
            from nbhelpers.analysis.overview import load_report_records, store_for
            from nbhelpers.views.report import write_html_report

            records = load_report_records(None, list(args.run_dirs))
            default = store_for(args.run_dirs[0]).path.parent / "report.html"
            path = write_html_report(records, args.output or default, baseline_label=args.baseline)
            print(path)
            return 0
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"nbhelpers {args.command}: {error}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
