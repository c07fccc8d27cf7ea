"""Folders the workbook ships: the repo's ``data/`` and ``benchmarks/gpu/``, or the copies a wheel carries.

pyproject.toml maps ``data/`` onto ``nbhelpers/_data`` and ``benchmarks/gpu/`` onto ``nbhelpers/_gpu_results``
when a wheel is built, so a notebook copied alone into Colab or Databricks finds them after a plain
``pip install``. In a clone (or an editable install) the repo's own folders are used.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def shipped_dir(repo_relative: str, package_name: str, marker: str = "") -> Path:
    """``REPO_ROOT / repo_relative`` when it exists (and holds ``marker``), else ``nbhelpers/<package_name>``."""
    repo = REPO_ROOT / repo_relative
    if repo.is_dir() and (not marker or (repo / marker).exists()):
        return repo
    from importlib.resources import files

    return Path(str(files("nbhelpers").joinpath(package_name)))


DATA_DIR = shipped_dir("data", "_data", marker="default_sft.jsonl.gz")
GPU_RESULTS_DIR = shipped_dir("benchmarks/gpu", "_gpu_results")


def runs_folder() -> Path:
    """Where runs go: ``$NBHELPERS_RUNS``; in a clone of the workbook its ``runs/`` (wherever the notebook or
    command runs); for a notebook copied alone (an installed package), ``runs/`` in the working folder,
    which Jupyter, Colab and Databricks set to the notebook's folder."""
    configured = os.environ.get("NBHELPERS_RUNS", "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    if (REPO_ROOT / "notebooks").is_dir() and (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT / "runs"
    return Path("runs").resolve()


def notebooks_folder() -> Path:
    """The numbered notebooks: a clone's ``notebooks/`` wherever a command runs, else ``notebooks/`` here."""
    if (REPO_ROOT / "notebooks").is_dir() and (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT / "notebooks"
    return Path("notebooks").resolve()
