"""``python -m nbhelpers.bench.filing`` files a GPU job's suite: its records, their manifest lines and its console
lines, each record once."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbhelpers.bench import filing
from nbhelpers.bench.manifest import MANIFEST, load_manifest, manifest_line
from nbhelpers.measure.jsonl import append_line, read_lines

SUITE = "hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-fla-boundaries"


def job_folder(tmp_path: Path, records) -> Path:
    """A job's runs/bench: the suite's records and the manifest of its folder (with another suite's line)."""
    runs = tmp_path / "runs" / "bench"
    folder = runs / Path(SUITE).parent
    for record in records:
        append_line(runs / f"{SUITE}.jsonl", record.to_dict())
        append_line(folder / MANIFEST, manifest_line(record, "24-gib-offload-fla-boundaries.jsonl", "abc1234", "bench"))
    append_line(folder / MANIFEST, {"record_id": "other", "file": "other.jsonl"})
    return runs


CONSOLE = (
    f"[{SUITE}] under a cap of 24 GiB: two rows\n"
    "configurations:   0%|  | 0/2\rrow a: [00:10, timed]\rrow a: \x1b[1m4,000 real tok/s\x1b[0m on 10 timed steps\n"
    "row b: failed: out of memory\n"
    f"[{SUITE}] 2 record(s), 1 failed\n"
    "[another/suite] started\nrow c: 9 real tok/s on 2 timed steps\n"
)


def test_a_suite_is_filed_with_its_manifest_and_console_lines(tmp_path, make_record):
    records = [make_record("a", 4000.0), make_record("b", 100.0)]
    runs, root = job_folder(tmp_path, records), tmp_path / "gpu"
    dest = root / "hybrid" / "24-gib-offload-fla-boundaries"
    said = filing.file_suite(runs, SUITE, dest, CONSOLE, root=root)
    assert said.endswith("2 record(s), 2 manifest line(s), console")
    filed = read_lines(dest / "24-gib-offload-fla-boundaries.jsonl")
    assert [r["record_id"] for r in filed] == [r.record_id for r in records]
    assert [line["record_id"] for line in load_manifest(dest)] == [r.record_id for r in records]
    assert (dest / "24-gib-offload-fla-boundaries.log").read_text().splitlines() == [
        f"[{SUITE}] under a cap of 24 GiB: two rows", "row a: 4,000 real tok/s on 10 timed steps",
        "row b: failed: out of memory", f"[{SUITE}] 2 record(s), 1 failed"]  # fmt: skip
    before = (dest / "24-gib-offload-fla-boundaries.jsonl").read_text()
    with pytest.raises(ValueError, match=f"already filed, not stored twice: {records[0].record_id} "):
        filing.file_suite(runs, SUITE, root / "elsewhere", root=root)
    assert (dest / "24-gib-offload-fla-boundaries.jsonl").read_text() == before and not (root / "elsewhere").exists()


def test_a_missing_suite_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no records of suite 'a/b'"):
        filing.file_suite(tmp_path, "a/b", tmp_path / "dest", root=tmp_path)
