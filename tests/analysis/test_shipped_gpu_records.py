"""benchmarks/gpu and benchmarks/cpu: records filed by what they measure (model, question), a manifest line for each
(date, machine, commit, command), and the shelves the notebooks read naming their files in validity.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nbhelpers.analysis.gpu_results import VALIDITY_FILE, load_gpu_records, load_validity, record_files
from nbhelpers.bench.manifest import FIELDS, MANIFEST, load_manifest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
GPU = BENCHMARKS / "gpu"
SHELVES = (GPU, GPU / "hybrid")
CALL_NUMBER = re.compile(r"\bcalls?[ _-]?\d+", re.IGNORECASE)
# A date, a lease, a run or call number in a file or folder name says when it ran, not what it measures.
HISTORY_NAME = re.compile(r"\d{4}-\d\d-\d\d|lease|\brun\d|\brun-\d|next\d\d|(first|second|third|fourth|fifth|sixth)\b")
JOURNALS = ("sweep.jsonl", "tuner.jsonl")  # a notebook run's journals, beside its records


def _entries(path: Path) -> list[object]:
    """A file's JSON entries ([] for a probe's printout that is not JSON throughout)."""
    text = path.read_text()
    try:
        return [json.loads(text)] if path.suffix == ".json" else [json.loads(x) for x in text.splitlines() if x]
    except json.JSONDecodeError:
        return []


def _shelf(folder: Path) -> dict[str, list[dict]]:
    """The shelf's record files and their records (its summary file holds none)."""
    files = {path.relative_to(folder).as_posix(): _entries(path) for path in record_files(folder)}
    return {name: [e for e in entries if isinstance(e, dict) and "config" in e] for name, entries in files.items()
            if name != "h200_summary.json"}  # fmt: skip


@pytest.mark.parametrize("shelf", SHELVES, ids=lambda p: p.name)
def test_every_shown_record_has_a_validity_entry_naming_its_file(shelf):
    entries = json.loads((shelf / VALIDITY_FILE).read_text())
    held = {}
    for name, records in _shelf(shelf).items():
        assert records, f"{name} holds no records"
        for record in records:
            held[record["record_id"]] = name
            entry = entries.get(record["record_id"])
            assert entry is not None, f"{name}: {record['record_id']} ({record['config']['label']}) has no validity"
            assert entry["source"] == name and entry["validity"].strip()
    assert set(entries) == set(held), "validity.json names records that no shipped file holds"


def test_shipped_files_are_named_by_what_they_measure_and_the_reader_attaches_validity():
    names = [p.relative_to(BENCHMARKS).as_posix() for p in BENCHMARKS.rglob("*") if "__pycache__" not in p.parts]
    assert not [n for n in names if CALL_NUMBER.search(n)], "a file under benchmarks/ is named by call number"
    assert not [n for n in names if HISTORY_NAME.search(n)], "a file under benchmarks/ is named by its history"
    records = load_gpu_records()
    validity = load_validity()
    assert len(records) == sum(len(r) for r in _shelf(GPU).values())
    assert all(r.metrics["validity"] == validity[r.record_id] for r in records)
    assert {r.artifacts["source"].split("/")[0] for r in records} == {"qwen3-1.7b", "qwen3-8b"}
    assert validity["393745f7dde6"].startswith("invalid: fp32 query/key")  # torch_varlen before its dtype fix


def test_summary_agrees_with_the_validity_file():
    validity = load_validity()
    summary = json.loads((GPU / "h200_summary.json").read_text())
    assert {row["record_id"] for row in summary} == set(validity)
    assert all(row["validity"] == validity[row["record_id"]] for row in summary)
    assert {row["source"] for row in summary} == set(_shelf(GPU))


def record_folders() -> list[Path]:
    """Every folder under benchmarks/ holding a records or measurement file."""
    files = [*BENCHMARKS.rglob("*.json"), *BENCHMARKS.rglob("*.jsonl")]
    found = {p.parent for p in files if p.name not in (VALIDITY_FILE, "h200_summary.json")}
    return sorted(found - {BENCHMARKS})


@pytest.mark.parametrize("folder", record_folders(), ids=lambda p: p.relative_to(BENCHMARKS).as_posix())
def test_every_record_and_measurement_has_its_manifest_line(folder):
    lines = load_manifest(folder)
    assert lines, f"{folder.relative_to(BENCHMARKS)} has no {MANIFEST}"
    assert all(set(FIELDS) <= set(line) and all(line[f] for f in FIELDS[1:]) for line in lines)
    listed = {(line["file"], line["record_id"]) for line in lines}
    for path in sorted([*folder.glob("*.json"), *folder.glob("*.jsonl")]):
        if path.name in (MANIFEST, *JOURNALS, "tuned.json"):
            continue
        ids = [e["record_id"] for e in _entries(path) if isinstance(e, dict) and "config" in e]
        expected = {(path.name, i) for i in ids} or {(path.name, None)}
        assert expected <= listed, f"{path.relative_to(BENCHMARKS)}: {sorted(expected - listed)[:3]} unlisted"
    files = {line["file"] for line in lines}
    assert files <= {p.name for p in folder.iterdir()}, "the manifest names a file the folder lacks"


def test_no_benchmark_script_names_a_device_call():
    for script in sorted(BENCHMARKS.glob("*.py")):
        found = [m.group(0) for m in CALL_NUMBER.finditer(script.read_text())]
        assert not found, f"{script.name} names device calls {found}: name records by experiment instead"


def test_no_benchmark_script_times_steps_or_appends_records():
    """The suites are nbhelpers.bench's; a script here is a probe or a thin call of the library."""
    for script in sorted(BENCHMARKS.glob("*.py")):
        source = script.read_text()
        for forbidden in ("perf_counter", "time.time(", "RunStore", ".append(record", "append_line", "synchronize("):
            assert forbidden not in source, f"{script.name} uses {forbidden}"


def test_each_family_reads_its_own_shipped_records():
    from nbhelpers.analysis.gpu_results import family_results_dir
    from nbhelpers.resources import GPU_RESULTS_DIR

    assert family_results_dir("qwen3-1.7b") == GPU_RESULTS_DIR
    assert family_results_dir("/no/such/checkpoint") == GPU_RESULTS_DIR
    hybrid = load_gpu_records(family_results_dir("qwen3.5-2b"))
    assert hybrid and {r.config["model"] for r in hybrid} == {"qwen3.5-2b", "qwen3.8-27b"}
    assert {"eager", "fla"} <= {r.config["kernels"] for r in hybrid}
    assert any(r.artifacts["source"] == "qwen3.5-2b/fused-kernels/hybrid-headline-b4.jsonl" for r in hybrid)


def test_a_folder_shows_its_files_and_the_nested_ones_its_validity_names(tmp_path, make_record):
    (tmp_path / "a.jsonl").write_text(json.dumps(make_record("a", 1.0).to_dict()) + "\n")
    (tmp_path / MANIFEST).write_text(json.dumps({"record_id": "x", "file": "a.jsonl"}) + "\n")
    for name in ("b", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.jsonl").write_text(json.dumps(make_record(name, 1.0).to_dict()) + "\n")
    assert [r.label for r in load_gpu_records(tmp_path)] == ["a"]
    (tmp_path / VALIDITY_FILE).write_text(json.dumps({"id": {"source": "b/b.jsonl", "validity": "valid"},
                                                      "gone": {"source": "d/d.jsonl", "validity": "valid"}}))
    with pytest.warns(UserWarning, match="names d/d.jsonl, which is absent"):
        records = load_gpu_records(tmp_path)
    assert [(r.label, r.artifacts["source"]) for r in records] == [("a", "a.jsonl"), ("b", "b/b.jsonl")]


def test_the_wheel_carries_every_file_a_shelf_shows():
    import fnmatch
    import sys

    if sys.version_info < (3, 11):
        pytest.skip("tomllib")
    import tomllib

    setuptools = tomllib.loads((BENCHMARKS.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["nbhelpers._gpu_results"] == "benchmarks/gpu"
    patterns = setuptools["package-data"]["nbhelpers._gpu_results"]
    shown = [p.relative_to(GPU).as_posix() for shelf in SHELVES for p in [*record_files(shelf), shelf / VALIDITY_FILE]]

    def carried(path: str, pattern: str) -> bool:  # setuptools' globs: "*" stays inside one folder
        parts, globs = path.split("/"), pattern.split("/")
        return len(parts) == len(globs) and all(fnmatch.fnmatchcase(p, g) for p, g in zip(parts, globs))

    assert [s for s in shown if not any(carried(s, pattern) for pattern in patterns)] == []


def test_failed_shipped_rows_go_to_a_short_table_of_what_and_why():
    import pandas as pd

    from nbhelpers.analysis.gpu_results import FAILED_COLUMNS, measured_and_failed

    frame = pd.DataFrame({"machine": ["h200", "h200"], "source": ["a.jsonl", "b.jsonl"], "label": ["ok row", "oom"],
                          "status": ["ok", "failed"], "real_tokens_per_s": [100.0, None],
                          "reason": ["", "CUDA out of memory"]})  # fmt: skip
    measured, failed = measured_and_failed(frame)
    assert list(measured["label"]) == ["ok row"] and "reason" not in measured.columns
    assert list(failed.columns) == list(FAILED_COLUMNS)
    assert failed.to_dict("records") == [{"machine": "h200", "source": "b.jsonl", "label": "oom",
                                          "reason": "CUDA out of memory"}]  # fmt: skip
    empty = frame.iloc[0:0]
    assert measured_and_failed(empty)[1].empty


def test_no_shipped_run_record_is_stored_twice():
    from collections import Counter

    from nbhelpers.bench.filing import filed_records
    from nbhelpers.resources import GPU_RESULTS_DIR

    counts = Counter(record_id for record_id, _ in filed_records(GPU_RESULTS_DIR))
    assert len(counts) > 500 and [i for i, n in counts.items() if n > 1] == []
