"""The kernel doctor: what this machine has, and for every fused path the workbook knows whether it is installed,
compatible with these versions and this GPU, and correct.

The paths come from the two tables: every elementary kernel backend (:mod:`nbhelpers.kernels.registry`) and
every attention implementation (:mod:`nbhelpers.kernels.attention`); each entry names the distributions it
needs, its status function and its correctness probe. Compatibility is the entry's own status plus the
known-bad table (:mod:`nbhelpers.kernels.known_bad`); correctness is the probe's verdict. What is absent is
reported as absent, never as an error. The verdict is plain data (:meth:`DoctorReport.metrics`), which
:mod:`nbhelpers.measure.doctor_records` keeps as a RunRecord of kind "doctor"; notebooks 02 and 03 skip the
paths it marks broken (:func:`nbhelpers.planning.device.skip_broken`), with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from nbhelpers.machine import package_versions, resolve_device
from nbhelpers.models.frozen_base import FROZEN_BASES, FrozenBase, probe_error

from .attention import ATTENTION_TABLE
from .known_bad import BROKEN, KnownBad, matching
from .probes import FAIL, NOT_RUNNABLE, PASS, ProbeResult, not_runnable
from .registry import ELEMENTARY_BACKENDS

DOCTOR_KIND = "doctor"  # kind of the doctor's record (measure.doctor_records): in the store, outside step tables
# The distributions the doctor reports, as pip names them.
DOCTOR_PACKAGES = (
    "torch", "triton", "transformers", "liger-kernel", "flash-linear-attention", "tilelang", "causal-conv1d",
    "flash-attn", "torchao", "cut-cross-entropy", "trl", "bitsandbytes",
)  # fmt: skip
# A path's verdict: what notebooks do with it.
OK = "ok"  # its probe passed here
BROKEN_PATH = "broken"  # a known-bad combination holds, or its probe failed: notebooks skip it
ABSENT = "absent"  # a distribution it needs is not installed
NOT_HERE = "not runnable here"  # installed, but this machine cannot run it (no CUDA GPU, ...)
REFERENCE = "reference"  # the plain path the others are compared with: nothing to probe
UNCHECKED = "unchecked"  # installed and runnable, probes not run
VERDICTS = (OK, BROKEN_PATH, ABSENT, NOT_HERE, REFERENCE, UNCHECKED)


@dataclass
class PathVerdict:
    """One fused path: installed? compatible? correct? and what follows (verdict, reason, notes)."""

    path: str  # "kernels <backend>" or "attention <implementation>": the keys notebooks' skipped lists use
    installed: str
    compatible: str
    correct: str
    verdict: str
    reason: str = ""
    packages: dict[str, str | None] = field(default_factory=dict)  # what it needs -> installed version
    notes: list[str] = field(default_factory=list)  # known slow combinations (nothing is skipped for them)
    probes: list[dict[str, Any]] = field(default_factory=list)
    probe_s: float = 0.0


@dataclass
class DoctorReport:
    """The doctor's findings on this machine: device facts, package versions, one verdict per path."""

    device: str
    gpu: dict[str, Any]
    packages: dict[str, str | None]
    paths: list[PathVerdict]

    def metrics(self) -> dict[str, Any]:
        """The verdict as plain data: what a doctor record keeps as its metrics."""
        return {"device": self.device, "gpu": self.gpu, "packages": self.packages,
                "paths": [asdict(p) for p in self.paths],
                "broken": {p.path: p.reason for p in self.paths if p.verdict == BROKEN_PATH}}  # fmt: skip


# A doctor's verdict: its report, or the plain data of one (a doctor record's metrics).
DoctorSource = DoctorReport | Mapping[str, Any]


def doctor_facts(source: DoctorSource) -> Mapping[str, Any]:
    """The verdict's plain data (device, gpu, packages, paths, broken) of a report or of a record's metrics."""
    return source.metrics() if isinstance(source, DoctorReport) else source


def installed_versions(names: Iterable[str] = DOCTOR_PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, None where it is not installed."""
    return package_versions(names, missing=None)


def driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, None where there is none (or it does not answer)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip().splitlines()[0] if result.stdout.strip() else None


def gpu_facts(device: str) -> dict[str, Any]:
    """Name, compute capability (SM), memory, CUDA and driver of the GPU; {"name": None} without one."""
    import torch

    if device != "cuda":
        return {"name": None, "capability": None, "sm": None, "memory_gib": None, "cuda": torch.version.cuda,
                "driver": None}  # fmt: skip
    props = torch.cuda.get_device_properties(0)
    major, minor = torch.cuda.get_device_capability()
    return {"name": props.name, "capability": [major, minor], "sm": f"sm{major}{minor}",
            "memory_gib": round(props.total_memory / 2**30, 1), "cuda": torch.version.cuda,
            "driver": driver_version()}  # fmt: skip


@dataclass(frozen=True)
class FusedPath:
    """What the doctor needs of a table entry: its key, distributions, status and probe."""

    path: str
    packages: tuple[str, ...]
    optional: tuple[str, ...]
    status: Callable[[str], str]
    probe: Callable[[str], list[Any]] | None


def frozen_base_probe(base: FrozenBase) -> Callable[[str], list[ProbeResult]]:
    """A quantized frozen base's probe: one layer's output against fp32 within the table's ``parity_rtol``."""

    def probe(device: str) -> list[ProbeResult]:
        kernel = f"frozen_base {base.name}"
        if why := base.status(device):
            return [not_runnable(kernel, why)]
        error = probe_error(base.name, device)
        status = PASS if error <= base.parity_rtol else FAIL
        detail = f"one layer's output {error:.2e} of its largest value from fp32 (bound {base.parity_rtol:g})"
        return [ProbeResult(kernel, status, detail, max_abs_diff=error, rtol=base.parity_rtol)]

    return probe


def fused_paths() -> list[FusedPath]:
    """Every elementary kernel backend, attention implementation and quantized frozen base, as the doctor checks
    them."""
    paths = [FusedPath(f"kernels {b.name}", b.packages, b.optional_packages, b.status, b.probe)
             for b in ELEMENTARY_BACKENDS]  # fmt: skip
    paths += [FusedPath(f"attention {a.name}", a.packages, (), a.status, a.probe) for a in ATTENTION_TABLE.values()]
    paths += [FusedPath(f"frozen_base {b.name}", b.packages, (), b.status, frozen_base_probe(b))
              for b in FROZEN_BASES.values() if b.quantized]  # fmt: skip
    return paths


def _run_probe(path: FusedPath, device: str) -> tuple[list[ProbeResult], float]:
    start = time.perf_counter()
    try:
        results = list(path.probe(device)) if path.probe is not None else []
    except Exception as error:  # noqa: BLE001 - a probe that cannot even set up its kernel is a failed probe
        results = [ProbeResult(path.path, FAIL, f"the probe raised {type(error).__name__}: {error}"[:500])]
    return results, time.perf_counter() - start


def check_path(
    path: FusedPath,
    device: str,
    packages: Mapping[str, str | None],
    known_bad: list[KnownBad],
    run_probes: bool = True,
) -> PathVerdict:
    """One path's verdict: absent, broken (known bad or probe failed), not runnable here, ok, reference, unchecked."""
    needed = {name: packages.get(name) for name in (*path.packages, *path.optional)}
    missing = [name for name in path.packages if needed[name] is None]
    present = ", ".join(f"{n} {v}" for n, v in needed.items() if v) or "torch only"
    installed = f"no: {', '.join(missing)} missing" if missing else f"yes ({present})"
    mine = [entry for entry in known_bad if entry.path == path.path]
    notes = [f"{e.name}: {e.effect}; fix: {e.fix} (source: {e.source})" for e in mine if e.severity != BROKEN]
    verdict = PathVerdict(path.path, installed, "", "", ABSENT, packages=needed, notes=notes)
    if missing:
        verdict.compatible, verdict.correct = "not checked", "not probed"
        verdict.reason = f"not installed: {', '.join(missing)} (pip install {' '.join(missing)})"
        return verdict
    broken = [e for e in mine if e.severity == BROKEN]
    if broken:
        verdict.compatible = "known bad: " + ", ".join(e.name for e in broken)
        verdict.correct, verdict.verdict = "not probed", BROKEN_PATH
        verdict.reason = "; ".join(f"{e.effect}; fix: {e.fix} (source: {e.source})" for e in broken)
        return verdict
    why = path.status(device)
    verdict.compatible = "yes" if not why else f"not here: {why}"
    if path.probe is None:
        verdict.correct, verdict.verdict = "reference", REFERENCE
        return verdict
    if why:
        verdict.correct, verdict.verdict, verdict.reason = "not probed", NOT_HERE, why
        return verdict
    if not run_probes:
        verdict.correct, verdict.verdict, verdict.reason = "not probed", UNCHECKED, "probes were not run"
        return verdict
    results, verdict.probe_s = _run_probe(path, device)
    verdict.probes = [r.to_dict() for r in results]
    failed = [r for r in results if r.status == FAIL]
    passed = [r for r in results if r.status == PASS]
    if failed:
        verdict.verdict = BROKEN_PATH
        verdict.correct = f"fail ({len(failed)} of {len(results)} kernels)"
        verdict.reason = "probe failed: " + "; ".join(f"{r.kernel}: {r.detail}" for r in failed)
    elif passed:
        verdict.verdict = OK
        verdict.correct = f"pass ({len(passed)} kernel{'s' if len(passed) != 1 else ''})" + (
            f", {len(results) - len(passed)} not runnable here" if len(passed) < len(results) else ""
        )
    else:
        reasons = "; ".join(dict.fromkeys(r.detail for r in results if r.status == NOT_RUNNABLE))
        verdict.correct, verdict.verdict, verdict.reason = NOT_HERE, NOT_HERE, reasons
    return verdict


def run_doctor(
    device: str = "auto", run_probes: bool = True, known_bad: tuple[KnownBad, ...] | None = None
) -> DoctorReport:
    """Inventory this machine and check every fused path; seconds on a GPU (its probes), about ten on a CPU
    (torch.compile's probe compiles). ``device`` is "auto", "cpu" or "cuda"."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device={device!r}: allowed are auto, cpu, cuda")
    device = resolve_device(device)
    packages = installed_versions()
    gpu = gpu_facts(device)
    capability = (gpu["capability"][0], gpu["capability"][1]) if gpu["capability"] else None
    bad = matching(packages, capability, known_bad)
    paths = [check_path(p, device, packages, bad, run_probes) for p in fused_paths()]
    return DoctorReport(device, gpu, packages, paths)


def doctor_table(source: DoctorSource) -> Any:
    """One row per fused path: installed, compatible, correct, verdict and reason (pandas); ``source`` is a
    report or a doctor record's metrics."""
    import pandas as pd

    rows = doctor_facts(source)["paths"]
    columns = ["path", "installed", "compatible", "correct", "verdict", "reason"]
    frame = pd.DataFrame([{c: row.get(c, "") for c in columns} for row in rows], columns=columns)
    frame["notes"] = [" | ".join(row.get("notes") or []) for row in rows]
    return frame


def describe_machine(source: DoctorSource) -> str:
    """Two lines: the GPU (or none) with SM, memory, CUDA and driver; the package versions (``source``: a report
    or a doctor record's metrics)."""
    facts = doctor_facts(source)
    gpu, packages = facts["gpu"], facts["packages"]
    if gpu.get("name"):
        head = (f"GPU {gpu['name']} ({gpu['sm']}, {gpu['memory_gib']} GiB), CUDA {gpu['cuda']}, "
                f"driver {gpu['driver'] or 'unknown'}")  # fmt: skip
    else:
        built = f"torch built for CUDA {gpu['cuda']}" if gpu.get("cuda") else "torch built without CUDA"
        head = f"no CUDA GPU ({built})"
    versions = ", ".join(f"{name} {version or 'not installed'}" for name, version in packages.items())
    return f"{head}\n{versions}"


def verdict_line(source: DoctorSource) -> str:
    """The doctor's closing line: which paths are broken (notebooks and the tuner leave them out), or none."""
    broken = [r["path"] for r in doctor_facts(source)["paths"] if r["verdict"] == BROKEN_PATH]
    return f"verdict: {len(broken)} broken ({', '.join(broken)})" if broken else "verdict: nothing broken"


def verdict_tally(source: DoctorSource) -> str:
    """How many paths each verdict has, e.g. "paths: 2 absent, 4 unchecked (of 6)"."""
    rows = doctor_facts(source)["paths"]
    counts = ", ".join(f"{n} {v}" for v in VERDICTS if (n := sum(1 for r in rows if r["verdict"] == v)))
    return f"paths: {counts} (of {len(rows)})"


def doctor_text(source: DoctorSource, width: int = 100) -> str:
    """The verdict for a terminal, no line wider than ``width``: the machine, one line per path (its verdict and
    why, wrapped under the reason's column), the notes, the tally and :func:`verdict_line` last."""
    import textwrap

    rows = doctor_facts(source)["paths"]
    name_width = max(len(r["path"]) for r in rows) + 2 if rows else 10
    verdict_width = max(len(v) for v in VERDICTS) + 2
    indent = " " * (name_width + verdict_width)
    lines = [textwrap.fill(line, width, subsequent_indent="  ") for line in describe_machine(source).splitlines()]
    lines += ["", f"{'path':<{name_width}}{'verdict':<{verdict_width}}why"]
    for row in rows:
        why = row.get("reason") or ("" if row["installed"].startswith("yes") else row["installed"])
        head = f"{row['path']:<{name_width}}{row['verdict']:<{verdict_width}}"
        wrapped = textwrap.wrap(why, width - len(indent)) or [""]
        lines.append((head + wrapped[0]).rstrip())
        lines += [indent + more for more in wrapped[1:]]
        for note in row.get("notes") or []:
            lines.append(textwrap.fill(f"note: {note}", width, initial_indent=indent, subsequent_indent=indent))
    closing = [verdict_tally(source), verdict_line(source)]
    return "\n".join(lines + [""] + [textwrap.fill(line, width, subsequent_indent="  ") for line in closing])


def broken_paths(source: DoctorSource | None) -> dict[str, str]:
    """The paths a verdict (a report or a doctor record's metrics) marks broken, with the reason ({} without)."""
    if source is None:
        return {}
    rows = doctor_facts(source).get("paths", [])
    return {row["path"]: row["reason"] for row in rows if row["verdict"] == BROKEN_PATH}
