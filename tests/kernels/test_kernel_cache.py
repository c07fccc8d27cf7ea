"""Kernel caches: export/import round trip (all caches, or one backend's), unsafe archives refused, autotune
results kept, cold vs warm torch.compile on CPU, ``nbhelpers warm-cache``."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from pathlib import Path

import pytest
from test_parity import compile_pair

from nbhelpers.analysis.startup import startup_table
from nbhelpers.bench.manifest import load_manifest
from nbhelpers.cli import main
from nbhelpers.kernels import cache as cache_module
from nbhelpers.kernels.cache import (
    UnsafeArchiveError,
    backend_caches,
    cache_env,
    cache_files,
    cache_summary,
    export_cache,
    import_cache,
    startup_backend,
    warm_probe_caches,
)
from nbhelpers.measure import startup
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RunRecord, RunStore


def _fill(root: Path) -> dict[str, bytes]:
    files = {
        "inductor/fxgraph/ab/graph.pt": b"graph",
        "inductor/aotautograd/cd/entry": b"aot" * 100,
        "triton/XYZ/kernel.json": b'{"name": "k"}',
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def test_cache_env_points_into_the_folder_and_keeps_autotune_results(tmp_path):
    assert cache_env(tmp_path / "c") == {
        "TRITON_CACHE_DIR": str(tmp_path / "c" / "triton"),
        "TRITON_CACHE_AUTOTUNING": "1",  # Triton writes the autotuner's choices next to its kernels
        "FLA_CACHE_RESULTS": "1",  # fla's autotuned kernels ask for the same
        "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c" / "inductor"),
        "TILELANG_CACHE_DIR": str(tmp_path / "c" / "tilelang"),
    }
    assert cache_env(tmp_path / "c", ["inductor"]) == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "c" / "inductor")}
    with pytest.raises(ValueError, match=r"caches=\['ptx'\]: ptx unknown; caches are triton, inductor, tilelang"):
        cache_env(tmp_path / "c", ["ptx"])


def test_triton_reads_the_autotune_switch_the_cache_env_sets(monkeypatch):
    from triton import knobs

    monkeypatch.setenv("TRITON_CACHE_AUTOTUNING", cache_env("/tmp/x")["TRITON_CACHE_AUTOTUNING"])
    assert knobs.autotuning.cache is True


@pytest.mark.parametrize(
    ("kernels", "expected"),
    [("eager", set()), ("liger", {"triton"}), ("compile", {"inductor", "triton"}), ("fla", {"triton", "tilelang"})],
)
def test_export_of_one_backends_caches_round_trips_only_those(tmp_path, kernels, expected):
    source = tmp_path / "cache"
    files = _fill(source) | {"tilelang/autotuner/key/best_config.json": b"{}"}
    (source / "tilelang/autotuner/key").mkdir(parents=True)
    (source / "tilelang/autotuner/key/best_config.json").write_bytes(b"{}")
    assert set(backend_caches(kernels)) == expected
    archive = export_cache(source, tmp_path / f"{kernels}.tar.gz", backend_caches(kernels))
    target = tmp_path / "elsewhere"
    imported = import_cache(archive, target)
    assert sorted(imported) == sorted(name for name in files if name.split("/")[0] in expected)
    for name in imported:
        assert (target / name).read_bytes() == files[name]


def test_export_import_round_trip(tmp_path):
    source = tmp_path / "cache"
    files = _fill(source)
    (source / "inductor" / "link").symlink_to(source / "triton")  # links are not exported
    archive = export_cache(source, tmp_path / "out" / "cache.tar.gz")
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == sorted(files)
    target = tmp_path / "elsewhere"
    assert sorted(import_cache(archive, target)) == sorted(files)
    assert {p.as_posix() for p in cache_files(target)} == set(files)
    for name, data in files.items():
        assert (target / name).read_bytes() == data
    summary = cache_summary(target)
    assert (summary["inductor_files"], summary["inductor_bytes"], summary["triton_files"]) == (2, 305, 1)


def _archive(path: Path, member: tarfile.TarInfo, data: bytes = b"x") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo("inductor/fine.txt")
        ok.size = 1
        tar.addfile(ok, io.BytesIO(b"y"))
        if member.isfile():
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
        else:
            tar.addfile(member)
    return path


@pytest.mark.parametrize(
    "name, kind, message",
    [
        ("/etc/evil", tarfile.REGTYPE, "absolute path or '..'"),
        ("../evil", tarfile.REGTYPE, "absolute path or '..'"),
        ("inductor/../../evil", tarfile.REGTYPE, "absolute path or '..'"),
        ("inductor/link", tarfile.SYMTYPE, "not a regular file or folder"),
    ],
)
def test_import_refuses_unsafe_members_and_writes_nothing(tmp_path, name, kind, message):
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
    archive = _archive(tmp_path / "bad.tar.gz", member)
    target = tmp_path / "target"
    with pytest.raises(UnsafeArchiveError, match=message):
        import_cache(archive, target)
    assert not target.exists() and not (tmp_path / "evil").exists()


def test_export_of_a_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        export_cache(tmp_path / "nope", tmp_path / "a.tar.gz")


def test_startup_table_and_backend(make_record):
    cold = make_record("compile (cold cache)", kind="startup")
    cold.metrics.update(cache="cold", first_step_s=60.0, step_time_median_s=0.5, inductor_files=40, triton_files=0)
    warm = make_record("compile (warm cache)", kind="startup")
    warm.metrics.update(cache="warm", first_step_s=6.0, step_time_median_s=0.5, inductor_files=40, triton_files=0)
    table = startup_table([cold, warm]).set_index("cache")
    assert table.loc["cold", "startup overhead s"] == 59.5 and table.loc["warm", "startup overhead s"] == 5.5
    assert table.loc["warm", "cold / this"] == 10.0 and table.loc["warm", "cache files"] == 40
    assert startup_table([]).empty and "first step s" in startup_table([]).columns
    flex_cold = make_record("flex (cold cache)", kind="startup")
    flex_cold.metrics.update(cache="cold", first_step_s=21.0, step_time_median_s=0.2)
    flex_warm = make_record("flex (warm cache)", kind="startup")
    flex_warm.metrics.update(cache="warm", first_step_s=7.0, step_time_median_s=0.2)
    both = startup_table([cold, warm, flex_cold, flex_warm])  # each warm row against its own cold row
    assert both["cold / this"].tolist() == [1.0, 10.0, 1.0, 3.0]
    assert startup_backend(["eager", "liger", "compile"]) == "compile"
    assert startup_backend(["eager", "liger"]) == "liger"
    assert startup_backend(["eager"]) is None


def test_the_cold_run_names_the_warm_folder_as_the_next_runs_environment(tmp_path, monkeypatch):
    calls: list = []

    def fake_run(config, notebook="", extra_env=None, on_progress=None, next_extra_env=None):
        calls.append((extra_env, next_extra_env))
        return RunRecord.failed(config.to_dict(), "not run here", notebook=notebook)

    monkeypatch.setattr(startup, "run_isolated", fake_run)
    monkeypatch.setattr(startup, "export_cache", lambda folder, archive: Path(archive))
    monkeypatch.setattr(startup, "import_cache", lambda archive, folder: [])
    startup.cold_vs_warm(RunConfig(kernels="compile"), tmp_path)
    (cold_env, cold_next), (warm_env, _) = calls
    assert cold_next == warm_env and cold_env != warm_env  # the warm run's spare can start while the cold one runs
    assert Path(warm_env["TORCHINDUCTOR_CACHE_DIR"]).parent.name.startswith("kernel-cache-warm-")


@pytest.mark.slow
def test_cold_vs_warm_compile_on_cpu(tmp_path_factory):
    cold, warm = compile_pair(tmp_path_factory)
    assert (cold.kind, cold.metrics["cache"], warm.metrics["cache"]) == ("startup", "cold", "warm")
    assert cold.label == "compile (cold cache)" and warm.label == "compile (warm cache)"
    # Seen on 2 cores: 19-65 s cold (Inductor compiles C++ kernels), ~5 s warm. Only the ratio is checked, with
    # room to spare: the absolute times depend on the machine.
    assert warm.metrics["first_step_s"] < cold.metrics["first_step_s"] / 2
    # The warm run used a relocated copy: the cold run's cache, exported and imported into another folder.
    cold_dir, warm_dir = Path(cold.metrics["cache_dir"]), Path(warm.metrics["cache_dir"])
    assert cold_dir != warm_dir and cold_dir.parent == warm_dir.parent
    assert cold.metrics["inductor_files"] > 10 and warm.metrics["inductor_files"] >= cold.metrics["inductor_files"]
    with tarfile.open(warm.metrics["cache_archive"]) as tar:
        names = tar.getnames()
    assert sorted(names) == sorted(p.as_posix() for p in cache_files(cold_dir))
    assert any(name.startswith("inductor/fxgraph/") for name in names)
    assert all((warm_dir / name).is_file() for name in names)


def _fake_doctor_run(calls):
    """A stand-in for the doctor's subprocess: records the call and compiles one "kernel" into Inductor's folder.

    The real probes take ~25 s cold on 2 cores (Inductor compiles C++), too slow for this suite."""

    def run(command, env, **kwargs):
        calls.append((command, env))
        folder = Path(env["TORCHINDUCTOR_CACHE_DIR"]) / "fxgraph" / "ab"
        folder.mkdir(parents=True)
        (folder / "graph").write_bytes(b"compiled")
        return subprocess.CompletedProcess(command, 0, "", "")

    return run


def test_warm_probe_caches_runs_the_doctor_in_a_process_whose_caches_point_into_the_folder(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(cache_module.subprocess, "run", _fake_doctor_run(calls))
    summary = warm_probe_caches(tmp_path / "cache", "cpu")
    ((command, env),) = calls
    assert command[1:] == ["-m", "nbhelpers.kernels.probe_run", "--device", "cpu"]
    assert env["TRITON_CACHE_AUTOTUNING"] == "1" and env["TILELANG_CACHE_DIR"] == str(tmp_path / "cache" / "tilelang")
    assert (summary["inductor_files"], summary["triton_files"]) == (1, 0)
    assert (tmp_path / "cache" / "tilelang").is_dir()  # every cache folder exists before the probes run


def test_warm_cache_command_exports_what_the_probes_built(tmp_path, monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(cache_module.subprocess, "run", _fake_doctor_run(calls))
    cache, archive = tmp_path / "cache", tmp_path / "kernel-cache.tar.gz"
    argv = ["warm-cache", "--cache-dir", str(cache), "--device", "cpu", "--no-step", "--archive", str(archive),
            "--caches", "inductor,triton"]  # fmt: skip
    assert main(argv) == 0
    assert "inductor_files 1" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        assert tar.getnames() == ["inductor/fxgraph/ab/graph"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--caches", "ptx"], "--caches=['ptx']: ptx unknown"), (["--device", "tpu"], "--device='tpu': allowed are"),
     (["--liger-kernels", "rope,flash"], "--liger-kernels"), (["--no-probes"], "nothing would fill the caches")],
)  # fmt: skip
def test_warm_cache_refuses_bad_input_before_building_anything(tmp_path, capsys, argv, named):
    assert main(["warm-cache", "--cache-dir", str(tmp_path / "cache"), "--no-step", *argv]) == 2
    assert named in capsys.readouterr().err and not (tmp_path / "cache").exists()


def test_warm_cache_runs_one_training_step_of_the_named_configuration(tmp_path, monkeypatch, capsys, runs_root):
    probed: list = []
    monkeypatch.setattr(cache_module, "warm_probe_caches", lambda folder, device: probed.append(device) or {})
    argv = ["warm-cache", "--cache-dir", str(tmp_path / "cache"), "--device", "cpu", "--model", "qwen3-tiny",
            "--kernels", "eager", "--padding", "packed", "--batch-size", "1", "--max-length", "128",
            "--num-samples", "2"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert probed == ["cpu"] and "inductor_files 0" in capsys.readouterr().out  # eager compiles nothing
    assert (tmp_path / "cache" / "triton").is_dir() and (tmp_path / "cache" / "tilelang").is_dir()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--cache-dir", ""], "--cache-dir='': name a folder"),
        (["--cache-dir", "FILE"], "name a folder"),
        (["--cache-dir", "DIR", "--model", "qwen3-tinyy"], "model='qwen3-tinyy' is not allowed"),
    ],
)
def test_warm_cache_dry_run_refuses_a_bad_cache_folder_and_a_misspelt_model(tmp_path, capsys, arguments, message):
    from nbhelpers import cli

    (tmp_path / "file").write_text("x")
    arguments = [{"FILE": str(tmp_path / "file"), "DIR": str(tmp_path / "caches")}.get(a, a) for a in arguments]
    assert cli.main(["warm-cache", "--dry-run", *arguments]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "caches").exists()


def test_the_probe_run_prints_each_paths_verdict(capsys):
    import json

    from nbhelpers.kernels import probe_run

    code = probe_run.main(["--device", "cpu"])
    verdicts = json.loads(capsys.readouterr().out)
    assert "kernels eager" in verdicts and code == (1 if "broken" in verdicts.values() else 0)


def test_measure_startup_times_first_steps_without_a_profiler_or_a_parity_probe(monkeypatch, tmp_path):
    from nbhelpers.measure import startup
    from nbhelpers.measure.config import RunConfig

    seen = []
    monkeypatch.setattr(
        startup, "cold_vs_warm", lambda config, workdir, notebook="", folders=None: seen.append(config) or []
    )
    configs = [RunConfig(run_name="s", kernels=k, profile=True) for k in ("eager", "compile")]
    assert startup.measure_startup(configs, tmp_path) == []
    (config,) = seen
    assert config.kernels == "compile" and not config.profile and config.extra["parity_probe_samples"] == 0
    assert startup.measure_startup(configs, tmp_path, enabled=False) == [] and len(seen) == 1


def test_prepare_startup_makes_the_empty_folders_and_primes_a_process_in_the_cold_ones_environment(
    tmp_path, monkeypatch
):
    primed: list = []
    monkeypatch.setattr(startup, "prime_spare", lambda env=None: primed.append(env) or True)
    eager_only = [RunConfig(kernels="eager")]
    assert startup.prepare_startup(eager_only, tmp_path) is None and not primed  # nothing fills a cache
    configs = [RunConfig(kernels="eager"), RunConfig(kernels="compile")]
    assert startup.prepare_startup(configs, tmp_path, enabled=False) is None and not primed
    folders = startup.prepare_startup(configs, tmp_path / "startup")
    assert folders is not None and folders.cold != folders.warm
    assert startup.cache_files(folders.cold) == [] and startup.cache_files(folders.warm) == []
    assert primed == [cache_env(folders.cold)]
    seen: list = []

    def fake_run(config, notebook="", extra_env=None, on_progress=None, next_extra_env=None):
        seen.append(extra_env)
        return RunRecord.failed(config.to_dict(), "not run here")

    monkeypatch.setattr(startup, "run_isolated", fake_run)
    monkeypatch.setattr(startup, "export_cache", lambda folder, archive: Path(archive))
    monkeypatch.setattr(startup, "import_cache", lambda archive, folder: [])
    startup.measure_startup(configs, tmp_path / "elsewhere", folders=folders)
    assert seen == [cache_env(folders.cold), cache_env(folders.warm)]  # the pair ran in the prepared folders
    assert not (tmp_path / "elsewhere").exists()


def test_the_startup_backends_grid_row_is_the_cold_start_and_only_the_warm_run_is_added(tmp_path, monkeypatch):
    monkeypatch.setenv("NBHELPERS_RUNS", str(tmp_path / "runs"))
    folders = startup.make_startup_folders(tmp_path / "startup")
    configs = [RunConfig(kernels="eager", label="eager"), RunConfig(kernels="compile", label="compile"),
               RunConfig(kernels="compile", label="again")]  # fmt: skip
    assert startup.cold_start_env(configs, None) is None and startup.cold_start_env(configs[:1], folders) is None
    extra = startup.cold_start_env(configs, folders)
    assert [extra(c) for c in configs] == [None, cache_env(folders.cold), None]  # the first compile row only
    eager = RunRecord(config=configs[0].to_dict(), metrics={"first_step_s": 1.0, "step_time_median_s": 0.5})
    row = RunRecord(config=configs[1].to_dict(), metrics={"first_step_s": 30.0, "step_time_median_s": 0.5})
    _fill(folders.cold)  # what the row compiled into the cold folder
    runs: list = []

    def fake_run(config, notebook="", extra_env=None, on_progress=None, next_extra_env=None):
        runs.append((config, extra_env))
        return RunRecord(config=config.to_dict(), metrics={"first_step_s": 5.0, "step_time_median_s": 0.5})

    monkeypatch.setattr(startup, "run_isolated", fake_run)
    cold, warm = startup.measure_startup(configs, tmp_path / "unused", folders=folders, measured=[eager, row])
    assert cold is row and row.kind == "step" and row.metrics["cache"] == "cold"  # marked, not copied
    assert row.metrics["inductor_files"] == 2 and row.metrics["cache_dir"] == str(folders.cold)
    ((config, env),) = runs  # one process: the warm run, on a relocated copy, without profiler or parity probe
    assert config.label == "compile" and env == cache_env(folders.warm)
    assert not config.profile and config.extra["parity_probe_samples"] == 0
    assert (config.timing, config.steps, config.warmup) == ("steps", startup.STARTUP_STEPS, 0)  # first steps only
    assert (warm.kind, warm.metrics["cache"], warm.metrics["inductor_files"]) == ("startup", "warm", 2)
    shared = tmp_path / "runs" / ".kernel-cache"  # later configurations of the run start from what it compiled
    assert sorted(p.as_posix() for p in cache_files(shared)) == sorted(p.as_posix() for p in cache_files(folders.cold))
    table = startup_table([cold, warm]).set_index("cache")
    assert table.loc["cold", "label"].endswith("(cold cache)") and table.loc["warm", "label"].endswith("(warm cache)")
    assert table.loc["warm", "cold / this"] == 6.0


def test_a_reused_or_failed_grid_row_is_no_cold_start(tmp_path, monkeypatch):
    monkeypatch.setenv("NBHELPERS_RUNS", str(tmp_path / "runs"))
    folders = startup.make_startup_folders(tmp_path / "startup")
    configs = [RunConfig(kernels="compile")]
    _fill(folders.cold)
    pairs: list = []
    monkeypatch.setattr(startup, "cold_vs_warm", lambda config, workdir, notebook="", folders=None: pairs.append(1))
    reused = RunRecord(config=configs[0].to_dict(), metrics={"reused_from": {"record_id": "abc"}})
    startup.measure_startup(configs, tmp_path, folders=folders, measured=[reused])
    assert pairs == [1]  # measured earlier, elsewhere: the pair runs as before
    failed = RunRecord.failed(configs[0].to_dict(), "compile error")
    assert startup.measure_startup(configs, tmp_path, folders=folders, measured=[failed]) == [failed]
    assert pairs == [1]  # nothing compiled to start warm from: no run is added


def test_warm_cache_starts_from_a_carried_archive_and_stores_the_steps_record(tmp_path, monkeypatch, capsys, runs_root):
    def no_probes(folder, device):
        raise AssertionError("--no-probes ran the probes")

    monkeypatch.setattr(cache_module, "warm_probe_caches", no_probes)
    made = tmp_path / "made-elsewhere"
    files = _fill(made)
    archive = export_cache(made, tmp_path / "carried.tar.gz")
    cache, out = tmp_path / "fresh-machine-cache", tmp_path / "records"
    argv = ["warm-cache", "--cache-dir", str(cache), "--from-archive", str(archive), "--out", str(out), "--no-probes",
            "--device", "cpu", "--model", "qwen3-tiny", "--kernels", "eager", "--padding", "packed",
            "--batch-size", "1", "--max-length", "64", "--num-samples", "2"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    assert re.search(r"first step: \d+\.\d s \(cache: archive\)", capsys.readouterr().out)
    assert {str(p) for p in cache_files(cache)} >= set(files)  # unpacked before the step ran
    (record,) = RunStore(out / "warm-cache.jsonl").load()
    assert record.ok and record.metrics["cache"] == "archive" and record.metrics["probes_before_step"] is False
    assert record.metrics["archive_bytes"] == archive.stat().st_size and record.metrics["first_step_s"] > 0
    (line,) = load_manifest(out)
    assert line["record_id"] == record.record_id and line["command"].startswith("nbhelpers warm-cache ")


def test_warm_cache_refuses_a_missing_archive_before_anything_runs(tmp_path, capsys):
    argv = ["warm-cache", "--cache-dir", str(tmp_path / "cache"), "--from-archive", str(tmp_path / "none.tar.gz")]
    assert main(argv) == 2
    assert "--from-archive=" in capsys.readouterr().err and not (tmp_path / "cache").exists()
