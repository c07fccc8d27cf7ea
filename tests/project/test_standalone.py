"""Notebooks copied alone into an empty folder run from an installed (non-editable) nbhelpers wheel.

This is what Colab and Databricks do: the notebook arrives without the repo around it, and nbhelpers
comes from ``pip install``. The test builds a wheel from a copy of the package sources, installs it with
``pip install --no-deps --target`` into a temporary folder, and runs notebooks 03 and 04 with papermill
in an empty folder, under a kernel whose ``PYTHONPATH`` is that folder (it comes before the venv's
editable install). The kernel's launcher records where nbhelpers and its data were imported from, so
the test proves that nothing came from the repo: not the code, not data/, not runs/, and the shipped H200
records it shows are the wheel's own copy of benchmarks/gpu.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import papermill
import pytest
from notebook_helpers import CELL_TIMEOUT_S, TINY_NB03

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    tomllib = pytest.importorskip("tomli", reason="Python 3.10 reads TOML with the tomli package")

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "nbhelpers", "data", "benchmarks/gpu")
DATA_FILE = "nbhelpers/_data/default_sft.jsonl.gz"
TINY_03 = {"RUN_NAME": "alone"} | TINY_NB03
# Started as the kernel: note where nbhelpers and its data come from, then become an ipykernel.
LAUNCHER = """\
import json, os, sys
import nbhelpers, nbhelpers.data.loading
with open(os.environ["STANDALONE_REPORT"], "w") as handle:
    json.dump({"nbhelpers": nbhelpers.__file__, "data_dir": str(nbhelpers.data.loading.DATA_DIR),
               "dataset_exists": nbhelpers.data.loading.DEFAULT_DATASET.is_file(), "cwd": os.getcwd()}, handle)
from ipykernel import kernelapp
kernelapp.launch_new_instance()
"""


def test_pyproject_lists_every_package_and_maps_the_data():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "nbhelpers").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = sorted(on_disk - set(setuptools["packages"]))
    assert not missing, f"pyproject.toml [tool.setuptools] packages misses {missing}: a wheel would lack them"
    assert setuptools["package-dir"]["nbhelpers._data"] == "data"
    assert (ROOT / "data" / "default_sft.jsonl.gz").is_file()


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A folder holding nbhelpers installed from a freshly built wheel (no editable link to the repo)."""
    work = tmp_path_factory.mktemp("standalone")
    source = work / "src"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    wheels, site = work / "wheels", work / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # This venv's setuptools builds it offline when new enough (torch requires one); else pip fetches one.
    isolation = [] if _setuptools_major() >= 68 else ["--use-pep517"]
    build = subprocess.run(
        [*pip, "wheel", "--no-deps", *(isolation or ["--no-build-isolation"]), "-w", str(wheels), str(source)],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("nbhelpers-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert DATA_FILE in names, f"the wheel does not carry the shipped dataset: {sorted(names)[:20]} ..."
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    return site


def _setuptools_major() -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


def _standalone_env(site: Path, **extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NBHELPERS_RUNS")}
    return {**env, "PYTHONPATH": str(site), **extra}


@pytest.mark.slow
def test_installed_wheel_reads_its_own_data(installed, tmp_path):
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    code = (
        "import json, nbhelpers, nbhelpers.data.loading as d; "
        "print(json.dumps([nbhelpers.__file__, str(d.DEFAULT_DATASET), len(d.load_rows('default', limit=3))]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=empty, env=_standalone_env(installed), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    module, dataset, rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(module).is_relative_to(installed), f"nbhelpers came from {module}, not the installed wheel"
    assert dataset == str(installed / DATA_FILE) and rows == 3


@pytest.mark.slow
def test_notebooks_run_copied_alone_into_an_empty_folder(installed, tmp_path, monkeypatch):
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("03_dynamic_padding.ipynb", "04_speedup_report.ipynb"):
        shutil.copy2(ROOT / "notebooks" / name, alone / name)

    # A python3 kernel spec found first: this interpreter, nbhelpers from the wheel, a launcher that reports.
    jupyter = tmp_path / "jupyter"
    spec_dir = jupyter / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    launcher = tmp_path / "launcher.py"
    launcher.write_text(LAUNCHER)
    report = tmp_path / "kernel.json"
    spec = {
        "argv": [sys.executable, str(launcher), "-f", "{connection_file}"],
        "display_name": "Python 3 (installed nbhelpers)",
        "language": "python",
        "env": {"PYTHONPATH": str(installed), "STANDALONE_REPORT": str(report)},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.delenv("NBHELPERS_RUNS", raising=False)  # runs/ lands next to the notebook, as in Colab
    monkeypatch.delenv("PYTHONPATH", raising=False)

    for name, parameters in (
        ("03_dynamic_padding.ipynb", TINY_03),
        ("04_speedup_report.ipynb", {"RUN_NAME": TINY_03["RUN_NAME"]}),
    ):
        papermill.execute_notebook(
            str(alone / name), str(tmp_path / f"executed-{name}"), parameters=parameters,
            kernel_name="python3", cwd=str(alone), progress_bar=False, execution_timeout=CELL_TIMEOUT_S,
        )  # fmt: skip
        seen = json.loads(report.read_text())
        assert Path(seen["nbhelpers"]).is_relative_to(installed), f"{name}: nbhelpers from {seen['nbhelpers']}"
        assert Path(seen["data_dir"]).is_relative_to(installed) and seen["dataset_exists"], seen
        assert Path(seen["cwd"]) == alone, seen

    records = [json.loads(line) for line in (alone / "runs" / "alone" / "records.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    engines = [(r["config"].get("engine", "workbook"), r["status"], r["config"]["padding"]) for r in steps]
    assert engines == [("workbook", "ok", "packed"), ("trl", "ok", "packed")], steps  # 04: TRL from the export
    assert [r["metrics"]["step"] for r in records if r["kind"] == "monitor"] == [4, 8, 10]  # 04's watched run
    assert (alone / "runs" / "alone" / "report.html").is_file()
    executed = nbformat.read(tmp_path / "executed-03_dynamic_padding.ipynb", as_version=4)
    shown = json.dumps([c.get("outputs", []) for c in executed.cells])
    assert "NVIDIA H200" in shown, "the wheel's copy of the shipped H200 records was not shown"
