"""environment.yml's pip section installs exactly what pyproject.toml's [project.dependencies] declares."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    tomllib = pytest.importorskip("tomli", reason="Python 3.10 reads TOML with the tomli package")

ROOT = Path(__file__).resolve().parents[2]
LOCAL_INSTALLS = {"-e .", ".", "-e .[test]"}  # the workbook itself


def _requirements(lines: list[str]) -> dict[str, Requirement]:
    parsed = [Requirement(line) for line in lines]
    names = [canonicalize_name(r.name) for r in parsed]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"listed twice: {duplicates}"
    return dict(zip(names, parsed))


def _environment_pip() -> tuple[list[str], list[str]]:
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    sections = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(sections) == 1, "environment.yml needs exactly one pip: section"
    entries = [str(e).strip() for e in sections[0]]
    local = [e for e in entries if e in LOCAL_INSTALLS]
    return [e for e in entries if e not in LOCAL_INSTALLS], local


def test_pip_section_matches_pyproject_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _requirements(project["dependencies"])
    pip_lines, _ = _environment_pip()
    listed = _requirements(pip_lines)
    assert sorted(listed) == sorted(declared), (
        f"only in environment.yml: {sorted(set(listed) - set(declared))}; "
        f"only in pyproject.toml: {sorted(set(declared) - set(listed))}"
    )
    different = {
        name: (str(listed[name]), str(declared[name]))
        for name in declared
        if (listed[name].specifier, listed[name].extras, listed[name].marker)
        != (declared[name].specifier, declared[name].extras, declared[name].marker)
    }
    assert not different, f"environment.yml vs pyproject.toml: {different}"


def test_environment_installs_the_workbook_itself():
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    _, local = _environment_pip()
    assert local, "environment.yml's pip section should install the workbook (`-e .`)"
    assert "python" in " ".join(str(d) for d in environment["dependencies"] if isinstance(d, str))
