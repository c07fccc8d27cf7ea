"""benchmarks/gpu: records named by experiment, each with its validity kept as data beside it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from nbhelpers.analysis.gpu_results import VALIDITY_FILE, load_gpu_records, load_validity
from nbhelpers.measure.jsonl import read_lines

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
GPU = BENCHMARKS / "gpu"
CALL_NUMBER = re.compile(r"\bcalls?[ _-]?\d+", re.IGNORECASE)


def _shipped_records() -> dict[str, list[dict]]:
    return {path.name: read_lines(path) for path in sorted(GPU.glob("*.jsonl"))}


def test_every_shipped_record_has_a_validity_entry_naming_its_file():
    entries = json.loads((GPU / VALIDITY_FILE).read_text())
    held = {}
    for name, records in _shipped_records().items():
        assert records, f"{name} holds no records"
        for record in records:
            held[record["record_id"]] = name
            entry = entries.get(record["record_id"])
            assert entry is not None, f"{name}: {record['record_id']} ({record['config']['label']}) has no validity"
            assert entry["source"] == name and entry["validity"].strip()
    assert set(entries) == set(held), "validity.json names records that no shipped file holds"


def test_shipped_files_are_named_by_experiment_and_the_reader_attaches_validity():
    names = [p.name for p in GPU.rglob("*") if p.is_file()]
    assert not [n for n in names if CALL_NUMBER.search(n)], "a file under benchmarks/gpu is named by call number"
    records = load_gpu_records()
    validity = load_validity()
    assert len(records) == sum(len(r) for r in _shipped_records().values())
    assert all(r.metrics["validity"] == validity[r.record_id] for r in records)
    assert validity["393745f7dde6"].startswith("invalid: fp32 query/key")  # torch_varlen before its dtype fix


def test_summary_agrees_with_the_validity_file():
    validity = load_validity()
    summary = json.loads((GPU / "h200_summary.json").read_text())
    assert {row["record_id"] for row in summary} == set(validity)
    assert all(row["validity"] == validity[row["record_id"]] for row in summary)
    assert {row["source"] for row in summary} == set(_shipped_records())


def test_no_benchmark_script_names_a_device_call():
    for script in sorted(BENCHMARKS.glob("*.py")):
        found = [m.group(0) for m in CALL_NUMBER.finditer(script.read_text())]
        assert not found, f"{script.name} names device calls {found}: name records by experiment instead"


def test_each_family_reads_its_own_shipped_records():
    from nbhelpers.analysis.gpu_results import family_results_dir, load_gpu_records
    from nbhelpers.resources import GPU_RESULTS_DIR

    assert family_results_dir("qwen3-1.7b") == GPU_RESULTS_DIR
    assert family_results_dir("/no/such/checkpoint") == GPU_RESULTS_DIR
    hybrid = load_gpu_records(family_results_dir("qwen3.5-2b"))
    assert hybrid and {r.config["model"] for r in hybrid} == {"qwen3.5-2b", "qwen3.8-27b"}
    assert {"eager", "fla"} <= {r.config["kernels"] for r in hybrid}
