"""``nbhelpers bench``: the list, a dry run, refusals, the wiring to the runner and the store, and (slow) a tiny
suite measured on a CPU into a folder with its manifest."""

from __future__ import annotations

import json

import pytest

from nbhelpers.bench import run as bench_run
from nbhelpers.bench.manifest import load_manifest
from nbhelpers.bench.table import suite_named
from nbhelpers.cli import main
from nbhelpers.measure.store import RunStore

SMOKE = "qwen3-tiny/bench-smoke/static-and-packed"


def test_the_list_names_every_suite_and_what_it_needs(capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert f"{SMOKE}: the bench path end to end" in out and "[needs fla and tilelang" in out


def test_a_dry_run_prints_the_rows_and_writes_nothing(tmp_path, capsys):
    assert main(["bench", "qwen3-tiny/bench-smoke", "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'out' / SMOKE}.jsonl:" in out and "  eager, packed, sdpa" in out
    assert not (tmp_path / "out").exists()


def test_an_unknown_suite_is_refused_in_one_line(capsys):
    assert main(["bench", "qwen3-tiny/no-such-suite"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nbhelpers bench: suite=") and len(err.splitlines()) == 1


def test_records_go_through_the_runner_and_the_store_with_their_manifest(tmp_path, make_record, monkeypatch):
    seen = {}

    def fake_run_configs(configs, store, notebook, annotate, extra_env, progress):
        seen.update(notebook=notebook, env=extra_env(configs[0]), labels=[c.label for c in configs])
        records = []
        for config in configs:
            record = make_record(config.label, 100.0, padding=config.padding)
            annotate(record, records)
            records.append(store.append(record))
        return records

    monkeypatch.setattr(bench_run, "run_configs", fake_run_configs)
    suite = suite_named(SMOKE)
    records = bench_run.run_suite(suite, tmp_path, "nbhelpers bench x", commit="c0ffee0", progress=False)
    assert seen["notebook"] == f"nbhelpers bench {SMOKE}" and seen["labels"] == ["eager, static, sdpa",
                                                                                 "eager, packed, sdpa"]
    assert seen["env"] == {"NBHELPERS_RUNS": str((tmp_path / "qwen3-tiny").resolve())}
    stored = RunStore(suite.records_file(tmp_path)).load()
    assert [r.record_id for r in stored] == [r.record_id for r in records]
    assert all(r.config["suite"] == SMOKE for r in stored)
    assert [line["record_id"] for line in load_manifest(suite.folder(tmp_path))] == [r.record_id for r in records]


def test_a_rows_own_environment_joins_the_suites(tmp_path, monkeypatch):
    """The host-allocator suite puts each row's process on the allocator its label names, beside the runs folder."""
    from nbhelpers.measure.host_allocator import ALLOCATOR_VARIABLE

    seen = {}

    def fake_run_configs(configs, store, notebook, annotate, extra_env, progress):
        seen.update({c.label: extra_env(c) for c in configs})
        return []

    monkeypatch.setattr(bench_run, "run_configs", fake_run_configs)
    bench_run.run_suite(suite_named("qwen3-tiny/host-allocator/glibc-and-tcmalloc"), tmp_path, "cmd", progress=False)
    runs = str((tmp_path / "qwen3-tiny").resolve())
    assert list(seen) == [f"{padding} on {allocator}, repeat {repeat}" for repeat in (1, 2)
                          for padding in ("static", "packed") for allocator in ("glibc", "tcmalloc")]  # fmt: skip
    assert seen["static on glibc, repeat 1"] == {"NBHELPERS_RUNS": runs, ALLOCATOR_VARIABLE: "glibc"}
    assert seen["packed on tcmalloc, repeat 2"] == {"NBHELPERS_RUNS": runs, ALLOCATOR_VARIABLE: "auto"}


def test_a_startup_suite_stores_the_cold_and_the_warm_record(tmp_path, make_record, monkeypatch):
    def fake_cold_vs_warm(config, workdir, notebook):
        return [make_record(f"{config.label} ({cache} cache)", 10.0, kind="startup") for cache in ("cold", "warm")]

    monkeypatch.setattr(bench_run, "cold_vs_warm", fake_cold_vs_warm)
    suite = suite_named("qwen3-1.7b/regional-compile/startup")
    records = bench_run.run_suite(suite, tmp_path, "cmd", commit="c", progress=False)
    assert [r.label for r in records] == ["startup (cold cache)", "startup (warm cache)"]
    assert len(load_manifest(suite.folder(tmp_path))) == 2


def test_a_reference_judges_parity_in_place_of_the_first_row(tmp_path, make_record, monkeypatch):
    reference = make_record("stored baseline", 100.0)
    monkeypatch.setattr(bench_run, "run_configs", lambda configs, **kw: [c.label for c in configs])
    labels = bench_run.run_suite(suite_named(SMOKE), tmp_path, "cmd", reference=reference, progress=False)
    assert labels == ["eager, packed, sdpa"]


def test_a_convergence_suite_stores_curves_not_timed_steps(make_record):
    annotate = bench_run.annotator(suite_named("qwen3-1.7b/float8-loss-curve/distinct-batches"), None)
    record = make_record("curve", 100.0)
    annotate(record, [])
    assert record.kind == "convergence" and "parity" not in record.metrics


@pytest.mark.slow
def test_the_smoke_suite_measures_on_a_cpu_into_its_folder(tmp_path, runs_root):
    out = tmp_path / "bench"
    assert main(["bench", "qwen3-tiny/bench-smoke", "--out", str(out)]) == 0
    suite = suite_named(SMOKE)
    records = RunStore(suite.records_file(out)).load()
    assert [(r.label, r.status) for r in records] == [("eager, static, sdpa", "ok"), ("eager, packed, sdpa", "ok")]
    assert records[1].metrics["parity"]["status"] == "pass"
    lines = load_manifest(suite.folder(out))
    assert [line["record_id"] for line in lines] == [r.record_id for r in records]
    assert all(line["command"] == f"nbhelpers bench qwen3-tiny/bench-smoke --out {out}" for line in lines)
    assert all(line["machine"] == records[0].machine and line["commit"] for line in lines)
    assert json.loads(suite.records_file(out).read_text().splitlines()[0])["notebook"] == f"nbhelpers bench {SMOKE}"
