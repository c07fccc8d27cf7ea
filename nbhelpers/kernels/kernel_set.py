"""The curated kernel set: the kernel packages that passed the doctor on one CUDA / torch, pinned in a pip
requirements file that installs with one command (``pip install -r FILE``) and that docker/Dockerfile builds from.

The file is generated from a doctor's verdict (plain data: a doctor record's metrics; the record's own
``write_kernel_set`` is in :mod:`nbhelpers.measure.doctor_records`), never written by hand: torch, Triton and
transformers (what every verdict is relative to) are always pinned; a kernel package is pinned when a path that
needs or uses it passed its probe and no path that needs it is broken. What was left out is listed in the
header with the reason. A torch build with a local label (``+cu128``, ``+cpu``) gets PyTorch's matching index.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from nbhelpers.validation import output_target

from .doctor import BROKEN_PATH, OK

BASE_PACKAGES = ("torch", "triton", "transformers")  # pinned whenever installed: the verdicts are relative to them
TORCH_INDEX = "https://download.pytorch.org/whl/{label}"
HEADER = "# Curated kernel set: packages that passed `nbhelpers doctor` (generated, do not edit)."


def kernel_pins(verdict: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """(pins: distribution -> version, left out: distribution -> why) from a doctor's verdict (its metrics)."""
    installed = verdict["packages"]
    pins = {name: installed[name] for name in BASE_PACKAGES if installed.get(name)}
    passed: set[str] = set()
    broken: dict[str, str] = {}
    unproved: dict[str, str] = {}
    for row in verdict["paths"]:
        for name, version in (row.get("packages") or {}).items():
            if not version or name in BASE_PACKAGES:
                continue
            if row["verdict"] == OK:
                passed.add(name)
            elif row["verdict"] == BROKEN_PATH:
                broken.setdefault(name, f"{row['path']} is broken: {row['reason']}")
            else:
                unproved.setdefault(name, f"{row['path']}: {row['verdict']} ({row['reason'] or row['correct']})")
    pins.update({name: installed[name] for name in sorted(passed - set(broken))})
    left_out = broken | {name: why for name, why in unproved.items() if name not in passed}
    return pins, left_out


def torch_index(torch_version: str | None) -> str | None:
    """PyTorch's package index for a local build label (``2.11.0+cu128`` -> .../whl/cu128), else None."""
    if not torch_version:
        return None
    local = Version(torch_version).local
    return TORCH_INDEX.format(label=local) if local else None


def render_pins(verdict: Mapping[str, Any], source: str) -> str:
    """The requirements file of a doctor's verdict: header (machine, ``source``: where the verdict came from,
    what was left out), pins."""
    pins, left_out = kernel_pins(verdict)
    gpu = verdict.get("gpu") or {}
    if gpu.get("name"):
        machine = f"{gpu['name']} ({gpu['sm']}), CUDA {gpu['cuda']}, driver {gpu.get('driver') or 'unknown'}"
    else:
        machine = f"no CUDA GPU (torch's CUDA: {gpu.get('cuda') or 'none, a CPU build'})"
    lines = [HEADER, f"# machine: {machine}", f"# {source}"]
    lines += [f"# left out: {name}: {why}" for name, why in sorted(left_out.items())]
    lines.append("# install: pip install -r THIS_FILE")
    if index := torch_index(pins.get("torch")):
        lines.append(f"--extra-index-url {index}")
    lines += [f"{name}=={version}" for name, version in pins.items()]
    return "\n".join(lines) + "\n"


def pin_target(path: str | Path) -> Path:
    """The file a kernel set for ``path`` is written to (a link's target); ValueError naming ``path`` when it
    exists and is no regular file. Callers check it before any work starts."""
    path = Path(path)
    target = path.resolve() if path.is_symlink() else path
    if target.exists() and not target.is_file():
        raise ValueError(f"{path}: exists and is not a regular file; name a file to write the kernel set to")
    return output_target(path, "pin")  # and a link into a missing folder, or a file where a folder must be


def write_pins(text: str, path: str | Path) -> Path:
    """Write a rendered kernel set (:func:`render_pins`) to ``path`` whole, through a staging file; its path.

    A symbolic link is written through (its target is replaced, the link stays); a target that exists but is no
    regular file (a folder, a device, a pipe) is refused with a ValueError naming it, never renamed over."""
    path = Path(path)
    target = pin_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(target.name + ".tmp")
    staging.write_text(text, encoding="utf-8")
    staging.replace(target)
    return path


def read_kernel_set(path: str | Path) -> dict[str, str]:
    """The pins of a kernel-set file (distribution -> version); ValueError naming a line that is no exact pin."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "--")):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as error:
            raise ValueError(f"{path}:{number}: {line!r} is no requirement ({error})") from error
        specs = list(requirement.specifier)
        if len(specs) != 1 or specs[0].operator != "==":
            raise ValueError(f"{path}:{number}: {line!r} is no exact pin (name==version)")
        pins[requirement.name] = specs[0].version
    return pins


def pin_mismatches(pins: dict[str, str], installed: dict[str, Any]) -> dict[str, str]:
    """Pins this environment does not satisfy: distribution -> "pinned X, installed Y" (or "not installed")."""
    return {
        name: f"pinned {version}, installed {installed.get(name) or 'nothing'}"
        for name, version in pins.items()
        if installed.get(name) != version
    }
