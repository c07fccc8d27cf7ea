"""Bad input and faults, one test per class: each gives a clear error naming parameter or file and line,
or a failed record with its reason, and nothing measured is lost."""

from __future__ import annotations

import json
import math
from pathlib import Path

import nbformat
import pytest

from nbhelpers import sweep
from nbhelpers.cli import main
from nbhelpers.data.formats import DataError
from nbhelpers.data.loading import load_examples, load_rows
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.measure import runner
from nbhelpers.measure.advice import MeasurementFailed, advice_for
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.store import RecordNotSaved, RunRecord, RunsFolderError, RunStore
from nbhelpers.planning.sweep_grid import parameters_for
from nbhelpers.validation import ConfigError, check_hub_name, check_run_name, check_timeout

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def _no_nan(text: str) -> None:
    def refuse(constant: str) -> None:
        raise AssertionError(f"bare {constant} in JSON")

    json.loads(text, parse_constant=refuse)


# 1. no loss tokens; NaN never written as bare NaN ---------------------------------------------------------


def test_1_no_loss_tokens_is_a_failed_record_and_nan_is_written_as_null(tmp_path, runs_root):
    data = tmp_path / "long_prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": "word " * 60, "response": "yes"}) + "\n" for _ in range(4)))
    config = RunConfig(run_name="nl", dataset=str(data), batch_size=2, max_length=16, num_samples=4, steps=1,
                       warmup=0, device="cpu")  # fmt: skip
    record = runner.run_config(config, isolate=False)
    assert record.status == "failed" and "no loss tokens" in record.reason and "max_length=16" in record.reason
    assert "MAX_LENGTH" in advice_for(record.reason)

    store = RunStore.for_run("nan")
    store.append(RunRecord(config={"label": "x"}, metrics={"loss": math.nan, "peak": math.inf, "ok": 1.5}))
    line = store.path.read_text().strip()
    _no_nan(line)
    assert store.load()[0].metrics == {"loss": None, "peak": None, "ok": 1.5}
    from nbhelpers.views.report import write_html_report

    html = write_html_report([RunRecord(config={"label": "y"}, metrics={"loss": math.nan})], tmp_path / "r.html")
    assert "NaN" not in html.read_text().split('type="application/json"')[-1].split("</script>")[0]


# 2. a resumed sweep keeps exactly one record per configuration ------------------------------------------------


def test_2_an_interrupted_attempt_is_set_aside_before_the_rerun(tmp_path):
    folder = tmp_path / "point"
    store = RunStore(folder)
    store.append(RunRecord(config={"label": "from 01"}, notebook="01"))
    size = store.path.stat().st_size
    marker = sweep.attempt_marker(folder, "02.ipynb")
    marker.write_text(json.dumps({"store_bytes": size}))
    store.append(RunRecord(config={"label": "from the killed 02"}, notebook="02"))  # written, never journaled
    sweep.set_aside_earlier_attempt(folder, "02.ipynb", None)
    assert [r.label for r in store.load()] == ["from 01"]
    aside = RunStore(folder / sweep.SET_ASIDE_NAME).load()
    assert [r.label for r in aside] == ["from the killed 02"]  # kept, not lost
    assert not marker.exists()


# 3. one bad line is skipped with a warning naming file and line ---------------------------------------------


def test_3_undecodable_and_non_object_lines_are_skipped_with_file_and_line(tmp_path):
    store = RunStore(tmp_path / "run")
    store.append(RunRecord(config={"label": "a"}))
    with open(store.path, "ab") as handle:
        handle.write(b"\xff\xfe not utf-8\n[1, 2]\n\"text\"\n")
    store.append(RunRecord(config={"label": "b"}))
    with pytest.warns(UserWarning) as caught:
        assert [r.label for r in store.load()] == ["a", "b"]
    messages = [str(w.message) for w in caught]
    assert any(f"{store.path}:2:" in m for m in messages) and any(f"{store.path}:3:" in m for m in messages)
    journal = sweep.Journal(tmp_path / "sweep.jsonl")
    journal.append({"point": "p", "notebook": "01", "status": "ok"})
    with open(journal.path, "ab") as handle:
        handle.write(b"{not json\n")
    with pytest.warns(UserWarning, match=r"sweep.jsonl:2: skipped"):
        assert list(journal.finished()) == [("p", "01")]


# 4. strict grid coercion, lists, timeouts, no manifest for a rejected grid ----------------------------------


def test_4_grid_values_are_coerced_strictly(tmp_path):
    declared = {
        "RUN_NAME": {"inferred_type_name": "str"}, "BATCH_SIZE": {"inferred_type_name": "int"},
        "PROFILE": {"inferred_type_name": "bool"}, "LR": {"inferred_type_name": "float"},
        "KERNELS": {"inferred_type_name": "list[str]"},
    }  # fmt: skip
    nb = Path("01_x.ipynb")
    for key, value, allowed in [
        ("batch_size", 1.5, "an integer"), ("batch_size", math.inf, "an integer"), ("profile", 1, "true or false"),
        ("profile", "yes", "true or false"), ("profile", "maybe", "true or false"), ("lr", "inf", "finite"),
        ("kernels", "rope", "a list"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match=allowed) as caught:
            parameters_for(nb, declared, {key: value}, "p")
        assert caught.value.parameter == key.upper() and "01_x.ipynb declares" in str(caught.value)
    good = parameters_for(nb, declared, {"batch_size": "4", "profile": True, "lr": 1, "kernels": ["a", "b"]}, "p")
    assert good == {"RUN_NAME": "p", "BATCH_SIZE": 4, "PROFILE": True, "LR": 1.0, "KERNELS": ["a", "b"]}
    grid = sweep.parse_grid(["kernels=[rope,swiglu],[rms_norm]", "batch_size=2,4"])
    assert grid == {"kernels": [["rope", "swiglu"], ["rms_norm"]], "batch_size": [2, 4]}
    with pytest.raises(ValueError, match="without its"):
        sweep.parse_grid(["kernels=[rope"])
    for bad in (0, -1, 2.5, math.inf, True):
        with pytest.raises(ConfigError, match="whole number of seconds"):
            check_timeout(bad)
    assert check_timeout(None) is None and check_timeout(30.0) == 30
    out = tmp_path / "runs"
    with pytest.raises(ConfigError, match="BATCH_SIZE"):
        sweep.run_sweep({"batch_size": [1.5]}, [NOTEBOOKS / "01_baseline_profile.ipynb"], out, "s", progress=False)
    with pytest.raises(ConfigError, match="timeout"):
        sweep.run_sweep({"batch_size": [2]}, [NOTEBOOKS / "01_baseline_profile.ipynb"], out, "t", timeout=0)
    with pytest.raises(ConfigError, match="RUN_NAME"):
        sweep.run_sweep({"RUN_NAME": ["x"]}, [NOTEBOOKS / "01_baseline_profile.ipynb"], out, "u")
    assert not out.exists() or not list(out.rglob("sweep.json"))  # nothing written for a rejected grid


# 5. a model or dataset name that is nothing known fails at once ------------------------------------------


def test_5_unknown_model_and_dataset_names_fail_at_once(monkeypatch, tmp_path):
    from nbhelpers.models.loading import model_source

    def no_network(*args, **kwargs):
        raise AssertionError("the hub must not be asked")

    monkeypatch.setattr("nbhelpers.validation.hub_lookup", no_network)
    with pytest.raises(ConfigError, match="nearest preset: 'qwen3-tiny'"):
        model_source("qwen3-tinny")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        model_source("./no/such/checkpoint")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    with pytest.raises(ConfigError, match="offline .HF_HUB_OFFLINE. and not in the hub cache"):
        model_source("someone/unknown-model")
    with pytest.raises(ConfigError, match="dataset='someone/absent'.*offline"):
        load_rows("someone/absent")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_rows(str(tmp_path / "typo" / "data.jsonl"))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr("nbhelpers.validation.hub_lookup", lambda *a, **k: "not found on the hub")
    with pytest.raises(ConfigError, match="looked for model 'someone/unknown-model' on the hub: not found"):
        check_hub_name("model", "someone/unknown-model", ["qwen3-tiny"])


# 6. RUN_NAME validated everywhere ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "/abs/x", "a/b", "name\n", "", ".hidden"])
def test_6_run_names_that_leave_the_runs_folder_are_refused(name, runs_root, capsys):
    with pytest.raises(ConfigError, match="RUN_NAME"):
        check_run_name(name)
    with pytest.raises(ConfigError):
        RunStore.for_run(name)
    assert main(["run-all", "--run-name", name, "--notebooks-dir", str(NOTEBOOKS), "--out", str(runs_root)]) == 2
    assert "is not allowed" in capsys.readouterr().err
    if name and not Path(name).exists():
        assert main(["report", name]) == 2
    with pytest.raises(ConfigError, match="name"):
        sweep.run_sweep({}, [NOTEBOOKS / "04_speedup_report.ipynb"], runs_root, name)
    assert not any(p.name == "report.html" for p in runs_root.parent.rglob("*"))


def test_6_notebook_04_checks_its_run_name():
    nb = nbformat.read(NOTEBOOKS / "04_speedup_report.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.get("id") == "setup")
    assert "validation.check_run_name(RUN_NAME)" in setup.source


# 7. read-only or vanished runs folder: checked before measuring, a finished record never dropped ------------


def test_7_unwritable_runs_folder_fails_before_measuring_and_records_are_kept(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the runs folder should be")
    store = RunStore(blocker / "run" / "records.jsonl")
    monkeypatch.setattr(runner, "run_config", lambda *a, **k: pytest.fail("measured on an unwritable folder"))
    with pytest.raises(RunsFolderError, match="not writable.*NBHELPERS_RUNS"):
        runner.run_configs([RunConfig(run_name="r")], store=store, progress=False)
    record = RunRecord(config={"label": "finished"}, metrics={"real_tokens_per_s": 123.0})
    with pytest.raises(RecordNotSaved) as caught:
        store.append(record)
    assert caught.value.record is record and '"real_tokens_per_s": 123.0' in str(caught.value)
    # the run folder's file is unwritable but the runs folder is not: the record lands beside it
    run = tmp_path / "runs" / "r2"
    (run / "records.jsonl").mkdir(parents=True)
    with pytest.warns(UserWarning, match="saved to"):
        RunStore(run / "records.jsonl").append(record)
    saved = RunStore(tmp_path / "runs" / f"unsaved-r2-{record.record_id}.jsonl").load()
    assert [r.metrics for r in saved] == [{"real_tokens_per_s": 123.0}]


# 8. notebook 01 fails visibly, with advice by cause ------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        ("out of memory: CUDA out of memory", "lower BATCH_SIZE"),
        ("missing package: No module named 'liger_kernel'", "install the package"),
        ("timed out after 60 s", "longer timeout"),
        ("DataError: dataset='x': no loss tokens: max_length=16 cuts off every response", "raise MAX_LENGTH"),
    ],
)
def test_8_a_failed_baseline_is_written_then_raised_with_advice(reason, advice, runs_root):
    from nbhelpers.analysis import baseline

    config = baseline.baseline_config("f", "qwen3-tiny", "default", 2, 64, "static", 2, 1, device="cpu")
    plan = baseline.plan_trace("run", config, runs_root / "absent.gz")
    failed = RunRecord.failed(config.to_dict() | {"label": "baseline"}, reason)
    with pytest.raises(MeasurementFailed, match=advice):
        baseline.write_records("f", plan, failed, None)
    assert [r.reason for r in RunStore.for_run("f").load()] == [reason]  # written before raising
    assert dict(zip(*baseline.key_metrics(failed).to_dict("list").values(), strict=True))["what to do"]


# 9. the install cell passes NBHELPERS_SOURCE as one argument, never to a shell -------------------------------


@pytest.mark.parametrize("notebook", sorted(NOTEBOOKS.glob("0*.ipynb")), ids=lambda p: p.name[:2])
def test_9_install_cell_takes_the_source_as_one_argument(notebook, monkeypatch):
    import importlib.util
    import subprocess

    source = nbformat.read(notebook, as_version=4).cells[1].source
    calls = []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(subprocess, "run", lambda args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setenv("NBHELPERS_SOURCE", "x; touch /tmp/pwned")
    exec(compile(source, str(notebook), "exec"), {})  # noqa: S102 - the notebook's own cell
    assert calls[0][0][-1] == "x; touch /tmp/pwned" and calls[0][0][1:5] == ["-m", "pip", "install", "-q"]
    assert not calls[0][1].get("shell")
    monkeypatch.setenv("NBHELPERS_SOURCE", "--index-url=http://elsewhere")
    with pytest.raises(RuntimeError, match="not a pip option"):
        exec(compile(source, str(notebook), "exec"), {})  # noqa: S102


# 10. smaller ones ------------------------------------------------------------------------------------------


def test_10_smaller_cases(tmp_path, tokenizer):
    path = tmp_path / "few.jsonl"
    path.write_text(json.dumps({"prompt": "p", "response": "r"}) + "\n")
    with pytest.raises(DataError, match=r"gives 1 row\(s\).*fewer than one batch \(4\)"):
        load_examples(str(path), tokenizer, 16, 64, min_rows=4)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "p", "response": "r"}\n{"prompt": \n')
    with pytest.raises(DataError, match=rf"{broken} line 2: not valid JSON"):
        load_rows(str(broken))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "p", "response": "r"}\n{"prompt": "caf\xe9", "response": "r"}\n')
    with pytest.raises(DataError, match=rf"{latin} line 2: not UTF-8 text \(byte 15 of the line\)"):
        load_rows(str(latin))
    (tmp_path / "s.json").write_text(json.dumps("just a string"))
    with pytest.raises(DataError, match="must hold a list of objects.*holds a str"):
        load_rows(str(tmp_path / "s.json"))
    bars = "\r".join(f"steps: {i}0%|###| {i}/10 [00:01<00:02, 3.1it/s]" for i in range(9))
    stderr = "Traceback\nRuntimeError: boom\n" + bars
    assert runner.stderr_tail(stderr) == "Traceback | RuntimeError: boom"


def test_10_max_length_beyond_the_models_positions_is_a_failed_record(runs_root, tmp_path):
    from nbhelpers.models.families import preset_config
    from nbhelpers.models.loading import check_positions, model_config

    limit = preset_config("qwen3-tiny").max_position_embeddings
    check_positions(preset_config("qwen3-tiny"), limit)  # the limit itself is allowed
    config = RunConfig(run_name="pos", batch_size=2, max_length=limit + 1, num_samples=2, steps=1, warmup=0,
                       device="cpu")  # fmt: skip
    record = runner.run_config(config, isolate=False)
    assert record.status == "failed" and f"max_length={limit + 1}" in record.reason
    assert f"at most the model's {limit} positions" in record.reason
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    preset_config("qwen3-tiny", max_position_embeddings=128).save_pretrained(folder)
    with pytest.raises(ConfigError, match="at most the model's 128 positions"):
        check_positions(model_config(str(folder)), 256)
