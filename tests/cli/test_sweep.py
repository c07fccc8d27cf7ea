"""Sweep and CLI: grid parsing, point names, papermill runs of tiny stand-in notebooks, failure, resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from nbhelpers import sweep
from nbhelpers.cli import main
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.planning.sweep_grid import report_parameter

STAND_IN = """\
import time
from nbhelpers.measure.store import RunRecord, RunStore

if PADDING == "broken":
    raise RuntimeError(f"stand-in failure for {RUN_NAME}")
time.sleep(SLEEP_S)
config = {"run_name": RUN_NAME, "label": f"{STEP}-{PADDING}", "batch_size": BATCH_SIZE, "padding": PADDING,
          "kernels": "eager"}
metrics = {"real_tokens_per_s": 100.0 * BATCH_SIZE}
environment = {"device_name": "cpu", "hostname": "test"}
record = RunRecord(config=config, notebook=STEP, metrics=metrics, environment=environment)
RunStore.for_run(RUN_NAME).append(record)
"""


def write_notebook(path: Path, step: str, params: dict[str, str], source: str = STAND_IN) -> Path:
    """A notebook with a tagged parameters cell declaring ``params`` (name -> source line)."""
    nb = nbformat.v4.new_notebook()
    lines = "\n".join(f"{name}{decl}" for name, decl in params.items())
    nb.cells = [
        nbformat.v4.new_markdown_cell(f"# {step}"),
        nbformat.v4.new_code_cell(lines, metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(f"STEP = {step!r}\n" + source),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def stand_ins(folder: Path, sleep_s: float = 0.0) -> list[Path]:
    """01 declares BATCH_SIZE and PADDING; 02 declares PADDING only (gets BATCH_SIZE from its default)."""
    common = {"RUN_NAME": ': str = "default"  # run folder', "SLEEP_S": f": float = {sleep_s}  # pause"}
    one = write_notebook(
        folder / "01_first.ipynb",
        "01",
        {**common, "BATCH_SIZE": ": int = 1  # sequences", "PADDING": ': str = "static"  # strategy'},
    )
    two = write_notebook(
        folder / "02_second.ipynb",
        "02",
        {**common, "PADDING": ': str = "static"  # strategy'},
        source="BATCH_SIZE = 7\n" + STAND_IN,
    )
    return [one, two]


def test_parse_grid_and_points():
    grid = sweep.parse_grid(["batch_size=2,4", "max_length=64", "padding=dynamic,packed", "profile=true"])
    assert grid == {
        "batch_size": [2, 4],
        "max_length": [64],
        "padding": ["dynamic", "packed"],
        "profile": [True],
    }
    points = sweep.grid_points(grid)
    assert len(points) == 4
    assert points[0] == {"batch_size": 2, "max_length": 64, "padding": "dynamic", "profile": True}
    assert sweep.point_name(points[0]) == "batch_size-2_max_length-64_padding-dynamic_profile-True"
    assert sweep.grid_points({}) == [{}] and sweep.point_name({}) == "default"
    with pytest.raises(ValueError, match="name=value1,value2"):
        sweep.parse_grid(["batch_size"])
    items = ["batch_size=2,4", "profile=true", "liger_kernels=[rope,swiglu],[rms_norm]"]
    assert sweep.grid_text(sweep.parse_grid(items)) == " ".join(items)  # shown as --grid takes it


def test_point_names_are_safe_unique_and_deterministic():
    a = sweep.point_name({"kernels": "liger+compile"})
    b = sweep.point_name({"kernels": "liger-compile"})
    assert a != b and a.startswith("kernels-liger-compile-") and b == "kernels-liger-compile"
    assert a == sweep.point_name({"kernels": "liger+compile"})
    long = sweep.point_name({f"parameter_{i}": "x" * 20 for i in range(8)})
    assert len(long) <= 100
    from nbhelpers.measure.config import RunConfig

    RunConfig(run_name=a)  # a valid run name
    RunConfig(run_name=long)


def test_find_notebooks_by_number(tmp_path):
    nbs = stand_ins(tmp_path / "nbs")
    assert sweep.find_notebooks("02,01", tmp_path / "nbs") == [nbs[1], nbs[0]]
    assert sweep.find_notebooks("", tmp_path / "nbs") == nbs
    with pytest.raises(ValueError, match="matches no notebook"):
        sweep.find_notebooks("05", tmp_path / "nbs")


def test_parameters_only_those_declared(tmp_path):
    nbs = stand_ins(tmp_path / "nbs")
    declared = sweep.notebook_parameters(nbs[1])
    assert set(declared) == {"RUN_NAME", "SLEEP_S", "PADDING"}
    params = sweep.parameters_for(nbs[1], declared, {"batch_size": "4", "padding": "packed"}, "p1")
    assert params == {"RUN_NAME": "p1", "PADDING": "packed"}
    params = sweep.parameters_for(nbs[0], sweep.notebook_parameters(nbs[0]), {"batch_size": "4"}, "p1")
    assert params == {"RUN_NAME": "p1", "BATCH_SIZE": 4}
    with pytest.raises(ValueError, match="declared by none of the notebooks"):
        sweep.check_grid({"max_length": [1]}, {nb: sweep.notebook_parameters(nb) for nb in nbs})


@pytest.mark.slow
def test_sweep_end_to_end_with_a_failing_point(tmp_path, kernel_env, capsys):
    stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    code = main(
        ["sweep", "--grid", "batch_size=2,3", "padding=dynamic,broken", "--notebooks", "01,02"]
        + ["--notebooks-dir", str(tmp_path / "nbs"), "--out", str(out), "--name", "s1", "--no-progress"]
    )
    assert code == 1  # the broken points failed, and are reported
    sweep_dir = out / "s1"
    entries = [json.loads(line) for line in (sweep_dir / "sweep.jsonl").read_text().splitlines()]
    assert len(entries) == 8
    by_key = {(e["point"], e["notebook"]): e for e in entries}
    ok_point = "batch_size-2_padding-dynamic"
    assert by_key[(ok_point, "01_first.ipynb")]["status"] == "ok"
    assert by_key[(ok_point, "01_first.ipynb")]["parameters"] == {
        "RUN_NAME": ok_point,
        "BATCH_SIZE": 2,
        "PADDING": "dynamic",
    }
    assert by_key[(ok_point, "02_second.ipynb")]["parameters"] == {"RUN_NAME": ok_point, "PADDING": "dynamic"}
    bad = by_key[("batch_size-3_padding-broken", "02_second.ipynb")]
    assert bad["status"] == "failed" and "RuntimeError" in bad["error"] and "stand-in failure" in bad["error"]
    assert sum(e["status"] == "failed" for e in entries) == 4
    # each point's records in its own run folder, executed copies next to them
    records = RunStore(sweep_dir / "batch_size-3_padding-dynamic").load()
    assert [(r.config["label"], r.metrics["real_tokens_per_s"]) for r in records] == [
        ("01-dynamic", 300.0),
        ("02-dynamic", 700.0),
    ]
    executed = nbformat.read(sweep_dir / ok_point / "01_first.ipynb", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert 'RUN_NAME = "batch_size-2_padding-dynamic"' in injected[0].source
    assert (sweep_dir / "batch_size-2_padding-broken" / "01_first.ipynb").exists()  # failed copy kept
    assert not list(sweep_dir.rglob("*.partial.ipynb"))
    err = capsys.readouterr().err
    assert "FAILED batch_size-2_padding-broken / 01_first.ipynb: RuntimeError" in err

    # the same command again skips everything (failed ones too), appends nothing
    code = main(
        ["sweep", "--grid", "batch_size=2,3", "padding=dynamic,broken", "--notebooks", "01,02"]
        + ["--notebooks-dir", str(tmp_path / "nbs"), "--out", str(out), "--name", "s1", "--no-progress"]
    )
    assert code == 1
    assert len((sweep_dir / "sweep.jsonl").read_text().splitlines()) == 8
    out_text = capsys.readouterr().out
    assert "8 skipped as already finished" in out_text
    assert out_text.strip().splitlines()[-1] == str(sweep_dir / "report.html")  # over every point
    report = (sweep_dir / "report.html").read_text()
    assert all(f"batch_size-{b}_padding-dynamic" in report for b in (2, 3))

    # --retry-failed reruns only the (point, notebook) pairs that failed
    code = main(
        ["sweep", "--grid", "batch_size=2,3", "padding=dynamic,broken", "--notebooks", "01,02"]
        + ["--notebooks-dir", str(tmp_path / "nbs"), "--out", str(out), "--name", "s1", "--no-progress"]
        + ["--retry-failed", "--no-report"]
    )
    lines = (sweep_dir / "sweep.jsonl").read_text().splitlines()
    assert code == 1 and len(lines) == 12
    assert {(e["point"], e["status"]) for e in map(json.loads, lines[8:])} == {
        ("batch_size-2_padding-broken", "failed"),
        ("batch_size-3_padding-broken", "failed"),
    }


WRITE_THEN_SLEEP = STAND_IN.replace("time.sleep(SLEEP_S)\n", "") + "time.sleep(SLEEP_S)\n"


@pytest.mark.slow
def test_sweep_killed_with_sigkill_resumes_without_loss(tmp_path, kernel_env):
    """Killed after a point's notebook wrote its record but before the journal said so: the resumed
    sweep sets that record aside and reruns the point, so every store holds exactly one record."""
    params = {"RUN_NAME": ': str = "default"  # run', "SLEEP_S": ": float = 3.0  # pause",
              "BATCH_SIZE": ": int = 1  # sequences", "PADDING": ': str = "static"  # strategy'}  # fmt: skip
    nbs = [write_notebook(tmp_path / "nbs" / "01_first.ipynb", "01", params, source=WRITE_THEN_SLEEP)]
    out = tmp_path / "runs"
    script = (
        "import sys; from nbhelpers.cli import main; "
        f"sys.exit(main(['sweep', '--grid', 'batch_size=1,2,3', '--notebooks', '01', '--notebooks-dir', "
        f"{str(nbs[0].parent)!r}, '--out', {str(out)!r}, '--name', 'k', '--no-progress']))"
    )
    journal = out / "k" / "sweep.jsonl"
    env = {**os.environ, "PYTHONPATH": str(Path(sweep.__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    deadline = time.monotonic() + 120

    def killed_point_wrote() -> bool:
        done = len(journal.read_text().splitlines()) if journal.exists() else 0
        return done >= 1 and (out / "k" / "batch_size-2" / "records.jsonl").exists()

    while time.monotonic() < deadline and not killed_point_wrote():
        time.sleep(0.1)
    if not killed_point_wrote():
        proc.kill()
        pytest.fail("the sweep did not reach its second point in 120 s")
    os.killpg(proc.pid, signal.SIGKILL)  # inside point 2's sleep: record written, not journaled
    proc.wait()
    before = journal.read_text().splitlines()
    finished = [json.loads(line) for line in before]
    assert [e["point"] for e in finished] == ["batch_size-1"]
    assert len(RunStore(out / "k" / "batch_size-2").load()) == 1  # the killed attempt's record

    result = sweep.run_sweep({"batch_size": [1, 2, 3]}, nbs, out, "k", progress=False)  # restarted
    after = journal.read_text().splitlines()
    assert after[: len(before)] == before and len(after) == 3 and result.ok
    assert [e["point"] for e in result.skipped] == ["batch_size-1"]
    for b in (1, 2, 3):  # exactly one record per configuration
        assert [r.config["batch_size"] for r in RunStore(out / "k" / f"batch_size-{b}").load()] == [b]
        assert (out / "k" / f"batch_size-{b}" / "01_first.ipynb").exists()
    aside = RunStore(out / "k" / "batch_size-2" / sweep.SET_ASIDE_NAME).load()
    assert [r.config["batch_size"] for r in aside] == [2]  # the interrupted attempt's record, kept aside


def test_run_all_after_a_killed_run_all_sets_the_killed_attempts_records_aside(tmp_path, kernel_env):
    """What a kill -9 inside notebook 01 leaves (its marker, its record, no journal entry): the next run-all moves
    that record aside before measuring again, so the store holds each configuration once and nothing is lost."""
    nbs = stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    folder = out / "default"
    killed = RunRecord(config={"run_name": "default", "label": "01-static", "batch_size": 1, "padding": "static"},
                       notebook="01", metrics={"real_tokens_per_s": 1.0})  # fmt: skip
    RunStore(folder).append(killed)
    sweep.attempt_marker(folder, nbs[0].name).write_text(json.dumps({"store_bytes": 0}))
    sweep.run_all(tmp_path / "nbs", out, progress=False)
    assert [r.config["label"] for r in RunStore(folder).load()] == ["01-static", "02-static"]
    assert killed.record_id not in {r.record_id for r in RunStore(folder).load()}
    assert [r.record_id for r in RunStore(folder / sweep.SET_ASIDE_NAME).load()] == [killed.record_id]
    assert not list(folder.glob(f"{sweep.ATTEMPT_PREFIX}*"))


@pytest.mark.slow
def test_run_all_runs_every_notebook_and_prints_the_report(tmp_path, kernel_env, capsys):
    stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    code = main(["run-all", "--notebooks-dir", str(tmp_path / "nbs"), "--out", str(out), "--no-progress"])
    assert code == 0
    report = out / "default" / "report.html"
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(report)
    assert report.exists()
    labels = [r.config["label"] for r in RunStore(out / "default").load()]
    assert labels == ["01-static", "02-static"]
    text = report.read_text()
    assert "01-static" in text and "02-static" in text


@pytest.mark.slow
def test_sweep_over_the_adapter_runs_notebook_01_with_and_without_lora(tmp_path, kernel_env, capsys):
    """``--grid adapter=none,lora`` reaches the workbook's notebook 01 as ADAPTER (the dense preset, tiny sizes):
    one point trains the whole model, the other LoRA adapters on a frozen base, each in its own run folder."""
    notebooks = Path(__file__).resolve().parents[2] / "notebooks"
    grid = ["adapter=none,lora", "lora_rank=4", "batch_size=2", "max_length=64", "num_samples=4", "steps=1", "warmup=0"]
    code = main(["sweep", "--grid", *grid, "--notebooks", "01", "--notebooks-dir", str(notebooks)]
                + ["--out", str(tmp_path / "runs"), "--name", "lora", "--no-progress", "--no-report"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    sweep_dir = tmp_path / "runs" / "lora"
    points = {}
    for entry in map(json.loads, (sweep_dir / "sweep.jsonl").read_text().splitlines()):
        assert entry["status"] == "ok" and entry["parameters"]["LORA_RANK"] == 4, entry
        points[entry["parameters"]["ADAPTER"]] = entry["point"]
    full, lora = (RunStore(sweep_dir / points[name]).load() for name in ("none", "lora"))
    # notebook 01 measures its baseline, then "without the workbook" (TRL's defaults) beside it
    assert [(r.label, r.config["engine"], r.status) for r in (full[0], lora[0])] == [("baseline", "workbook", "ok")] * 2
    assert [(r.config["engine"], r.status) for r in (full[1], lora[1])] == [("trl_defaults", "ok")] * 2
    assert full[0].config["adapter"] == "none" and full[0].metrics["frozen_parameters"] == 0
    assert lora[0].config["adapter"] == "lora" and lora[0].config["lora_rank"] == 4
    assert 0 < lora[0].metrics["trainable_parameters"] < lora[0].metrics["frozen_parameters"]
    assert lora[0].metrics["trainable_parameters"] < full[0].metrics["trainable_parameters"]
    fit = nbformat.read(sweep_dir / points["lora"] / "01_baseline_profile.ipynb", as_version=4)
    shown = [o for c in fit.cells if c.get("id") == "lora-fit" for o in c.get("outputs", [])]
    assert shown and "qwen3-tiny with LoRA r4" in json.dumps(shown[0])


def test_report_command_writes_html(tmp_path, make_record, capsys):
    run = tmp_path / "r1"
    store = RunStore(run)
    store.append(make_record("base", 1000.0))
    store.append(make_record("liger", 1500.0, kernels="liger"))
    assert main(["report", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "report.html")
    assert "1.50x" in (run / "report.html").read_text()
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_report_command_lists_records_it_cannot_read_instead_of_drawing_them(tmp_path, make_record, capsys):
    """A status that is neither ok nor failed, or a figure or machine name of the wrong type, is not drawn (no
    failure "(no reason recorded)", no machine "5 @ ..."): stderr and the report name its file, line and field."""
    run = tmp_path / "weird"
    store = RunStore(run)
    store.append(make_record("base", 1000.0))
    good = make_record("liger", 1500.0, kernels="liger").to_dict()
    bad = [{**good, "status": "bogus"}, {**good, "metrics": {**good["metrics"], "real_tokens_per_s": "fast"}},
           {**good, "environment": {**good["environment"], "device_name": 5}}]  # fmt: skip
    with open(store.path, "a") as handle:
        handle.write("".join(json.dumps(line) + "\n" for line in bad))
    assert main(["report", str(run), "--output", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"nbhelpers report: {store.path}:2: skipped a torn or corrupt record (status='bogus' is neither 'ok' nor "
        "'failed')",
        f"nbhelpers report: {store.path}:3: skipped a torn or corrupt record (metrics.real_tokens_per_s='fast' is "
        "text, not a number or null)",
        f"nbhelpers report: {store.path}:4: skipped a torn or corrupt record (environment.device_name=5 is a number, "
        "not text)",
    ]
    page = (tmp_path / "r.html").read_text()
    assert "Records left out" in page and f"{store.path}:3: skipped" in page
    assert "no reason recorded" not in page and "5 @ " not in page


def test_a_notebook_runs_without_the_kernels_own_warnings_on_the_console(tmp_path, kernel_env, capfd):
    kernelspec = {"name": "python3", "language": "python", "display_name": "Python 3"}
    notebook = nbformat.v4.new_notebook(metadata={"kernelspec": kernelspec})
    notebook.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
                      nbformat.v4.new_code_cell("print('ran', x)")]  # fmt: skip
    source = tmp_path / "tiny.ipynb"
    nbformat.write(notebook, source)
    sweep.execute_notebook(source, tmp_path / "out.ipynb", {"x": 2})
    captured = capfd.readouterr()
    assert "without encryption" not in captured.err + captured.out  # ipykernel's start-up warning, every kernel
    ran = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert "ran 2" in "".join(o.get("text", "") for o in ran.cells[-1].outputs)


def test_sweep_restart_sets_a_finished_points_records_aside_instead_of_doubling_them(tmp_path, kernel_env):
    """``--restart`` measures every point again: the store keeps the new record of each configuration and the
    earlier one goes to restarted-records.jsonl (kept, not lost); the journal names each attempt's records."""
    nbs = stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    args = ["sweep", "--grid", "batch_size=2,3", "--notebooks", "01", "--notebooks-dir", str(nbs[0].parent),
            "--out", str(out), "--name", "r", "--no-progress", "--no-report"]  # fmt: skip
    assert main(args) == 0
    first = {b: RunStore(out / "r" / f"batch_size-{b}").load() for b in (2, 3)}
    entries = [json.loads(line) for line in (out / "r" / "sweep.jsonl").read_text().splitlines()]
    assert [e["record_ids"] for e in entries] == [[first[b][0].record_id] for b in (2, 3)]
    assert main([*args, "--restart"]) == 0
    for b in (2, 3):
        folder = out / "r" / f"batch_size-{b}"
        now = RunStore(folder).load()
        assert [r.config["batch_size"] for r in now] == [b]  # one record per configuration, not two
        assert now[0].record_id != first[b][0].record_id  # measured again
        aside = RunStore(folder / sweep.RESTARTED_NAME).load()
        assert [r.record_id for r in aside] == [first[b][0].record_id]  # the earlier one, kept


def test_a_taken_sweep_name_with_another_grid_is_refused_before_any_work(tmp_path, kernel_env, capsys):
    """The same --name with another grid would add points beside the sweep's own while its sweep.json and report
    describe the first grid: refused with both grids shown, nothing run or written; the same points in another
    order resume the sweep."""
    nbs = stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    common = ["--notebooks-dir", str(nbs[0].parent), "--out", str(out), "--name", "k0", "--no-progress",
              "--no-report"]  # fmt: skip
    assert main(["sweep", "--grid", "batch_size=2,3", "--notebooks", "01", *common]) == 0
    journal = (out / "k0" / "sweep.jsonl").read_text()
    manifest = (out / "k0" / "sweep.json").read_text()
    capsys.readouterr()

    assert main(["sweep", "--grid", "batch_size=4", "--notebooks", "01", *common]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nbhelpers sweep: name='k0' (--name) is a sweep started with another grid")
    assert "--grid batch_size=2,3 --notebooks 01_first.ipynb" in err
    assert "this call gives --grid batch_size=4 --notebooks 01_first.ipynb" in err and "another --name" in err
    assert main(["sweep", "--grid", "batch_size=2,3", "--notebooks", "01,02", *common]) == 2
    assert "--notebooks 01_first.ipynb,02_second.ipynb" in capsys.readouterr().err
    assert not (out / "k0" / "batch_size-4").exists()
    assert (out / "k0" / "sweep.jsonl").read_text() == journal and (out / "k0" / "sweep.json").read_text() == manifest

    assert main(["sweep", "--grid", "batch_size=3,2", "--notebooks", "01", *common]) == 0  # the same points
    assert "2 skipped as already finished" in capsys.readouterr().out


def test_an_unreadable_sweep_manifest_is_refused(tmp_path):
    folder = tmp_path / "k1"
    folder.mkdir()
    (folder / "sweep.json").write_text('{"name": "k1", "grid": ')
    with pytest.raises(ValueError, match=r"name='k1' \(--name\): .*sweep.json cannot be read"):
        sweep.check_same_sweep(folder / "sweep.json", {"name": "k1", "grid": {}, "notebooks": ["01_first.ipynb"]})


def test_run_all_writes_the_report_last_with_every_notebooks_records_and_04s_baseline(tmp_path, kernel_env):
    """A report notebook (as 04) writes report.html before a later notebook (as 05) measures: run-all writes it again
    at the end, so the later records are in it, with the baseline named to the report notebook."""
    nbs = stand_ins(tmp_path / "nbs")
    early = "from nbhelpers.measure.store import run_dir\n(run_dir(RUN_NAME) / 'report.html').write_text('early')\n"
    run_name = {"RUN_NAME": ': str = "default"  # run folder'}
    write_notebook(tmp_path / "nbs" / "04_report.ipynb", "04",
                   {**run_name, "BASELINE_LABEL": ': str = ""  # baseline'}, source=early)  # fmt: skip
    write_notebook(tmp_path / "nbs" / "05_later.ipynb", "05", {**run_name, "SLEEP_S": ": float = 0.0  # pause",
                   "PADDING": ': str = "static"  # strategy'}, source="BATCH_SIZE = 3\n" + STAND_IN)  # fmt: skip
    out = tmp_path / "runs"
    report, _ = sweep.run_all(nbs[0].parent, out, progress=False, parameters={"04:BASELINE_LABEL": "02-static"})
    text = report.read_text()
    assert text != "early" and all(label in text for label in ("01-static", "02-static", "05-static"))
    assert "over <b>02-static</b>" in text  # the baseline 04 was given, not the default rule's first record


def test_the_report_notebooks_parameters_are_read_as_the_notebooks_see_them():
    assert report_parameter({"BASELINE_LABEL": "a", "04:BASELINE_LABEL": "b"}, "BASELINE_LABEL") == "b"
    assert report_parameter({"baseline_label": "a", "03:BASELINE_LABEL": "c"}, "BASELINE_LABEL") == "a"
    assert report_parameter({}, "BASELINE_LABEL") is None


def test_run_all_again_keeps_one_record_per_configuration(tmp_path, kernel_env):
    nbs = stand_ins(tmp_path / "nbs")
    out = tmp_path / "runs"
    folder = out / "default"
    sweep.run_all(nbs[0].parent, out, progress=False)
    first = [r.record_id for r in RunStore(folder).load()]
    sweep.run_all(nbs[0].parent, out, progress=False)
    assert [r.config["label"] for r in RunStore(folder).load()] == ["01-static", "02-static"]
    assert [r.record_id for r in RunStore(folder / sweep.RESTARTED_NAME).load()] == first


def test_setting_aside_touches_only_the_named_attempts_records(tmp_path):
    """A killed retry of a failed notebook: its marker's records and the failed entry's (by id) go aside; the
    records of the notebooks before it stay, whatever byte offsets the old entry holds."""
    folder = tmp_path / "run"
    store = RunStore(folder)

    def record(label: str) -> RunRecord:
        return store.append(RunRecord(config={"label": label}, metrics={"real_tokens_per_s": 1.0}))

    keep = record("01")
    start = (folder / "records.jsonl").stat().st_size
    failed = record("02 failed")
    entry = {"status": "failed", "store_bytes": [0, 10**6], "record_ids": [failed.record_id]}
    sweep.attempt_marker(folder, "02.ipynb").write_text(json.dumps({"store_bytes": start}))
    killed = record("02 killed")
    sweep.set_aside_earlier_attempt(folder, "02.ipynb", entry)
    assert [r.record_id for r in store.load()] == [keep.record_id]
    aside = RunStore(folder / sweep.SET_ASIDE_NAME).load()
    assert sorted(r.record_id for r in aside) == sorted([failed.record_id, killed.record_id])
    assert not sweep.attempt_marker(folder, "02.ipynb").exists()
    sweep.set_aside_earlier_attempt(folder, "02.ipynb", entry | {"record_ids": None})  # an older entry: spans
    assert [r.record_id for r in store.load()] == [keep.record_id]  # no marker: its span is out of range, kept


def test_a_parameter_the_notebook_does_not_declare_is_refused_before_anything_runs(tmp_path):
    """papermill only warns: a misspelt RUN_NAME would run the notebook into its default run and write its report."""
    from nbhelpers.validation import ConfigError

    nbs = stand_ins(tmp_path / "nbs")
    out = tmp_path / "out" / "01.ipynb"
    with pytest.raises(ConfigError, match=r"RUNNAME='mine' is not allowed: RUNNAME must be a parameter 01_first"):
        sweep.execute_notebook(nbs[0], out, {"RUNNAME": "mine"})
    assert not out.parent.exists()  # nothing ran, nothing was written
