"""Notebook 04 under papermill, on a store this test writes: the table, the recommendation, report.html."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from bs4 import BeautifulSoup
from notebook_helpers import assert_saved_cleanly

from nbhelpers.analysis.references import NOT_MEASURED, VS_REFERENCE, VS_WITHOUT, WITHOUT_WORKBOOK_ENGINE
from nbhelpers.measure.store import RunRecord, RunStore
from nbhelpers.sweep import execute_notebook, notebook_parameters

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_speedup_report.ipynb"


def _outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if "text" in output:
            parts.append(output["text"])
        for key in ("text/plain", "text/markdown", "text/html"):
            if key in output.get("data", {}):
                parts.append(output["data"][key])
    return "\n".join(parts)


def _frame_rows(cell) -> list[dict[str, str]]:
    """The rows of the DataFrame a cell displayed (its text/html output), as {column: text}."""
    html = next(o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
    table = BeautifulSoup(html, "html.parser").find("table")
    columns = [th.get_text() for th in table.select("thead tr")[0].find_all("th")][1:]  # first: the index
    rows = [[td.get_text() for td in tr.find_all("td")] for tr in table.select("tbody tr")]
    return [dict(zip(columns, row)) for row in rows]


def test_notebook_is_committed_clean_and_declares_its_parameters():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# 04")
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            compile(cell.source, NOTEBOOK.name, "exec")  # plain Python, no magics
    params = notebook_parameters(NOTEBOOK)
    assert {name: info["inferred_type_name"] for name, info in params.items()} == {
        "RUN_NAME": "str",
        "RUN_DIRS": "str",
        "BASELINE_LABEL": "str",
        "PEER_ROWS": "str",
        "CONVERGENCE_STEPS": "int",
        "MONITOR_STEPS": "int",
        "ADAPTER": "str",
        "LORA_RANK": "int",
        "LORA_ALPHA": "int",
        "LORA_TARGETS": "str",
        "FROZEN_BASE": "str",
        "JOB_ROWS": "int",
        "JOB_TOKENS": "int",
        "JOB_EPOCHS": "float",
        "JOB_GPUS": "int",
        "GPU_HOUR_PRICE": "float",
    }


# The fast tier's papermill run of this notebook (the other variants are slow: the full tier).
def test_notebook_04_reports_a_store(runs_root, make_record, kernel_env, tmp_path):
    store = RunStore.for_run("nb04")
    for record in [
        make_record("baseline", 1000.0, run_name="nb04", memory_gib=12.0),
        make_record("liger", 1500.0, kernels="liger", run_name="nb04", memory_gib=8.0, parity="pass"),
        make_record("packed", 2250.0, padding="packed", run_name="nb04", memory_gib=9.0, parity="pass"),
        make_record("eager", None, attn="eager", status="failed", reason="out of memory", run_name="nb04"),
        make_record("TRL defaults", 1200.0, engine=WITHOUT_WORKBOOK_ENGINE, run_name="nb04", memory_gib=11.0),
    ]:
        store.append(record)
    for step, launches in ((10, 1200.0), (20, None)):  # what nbhelpers.monitor writes during a training run
        metrics = {"step": step, "real_tokens_per_s": 900.0 + step, "padding_fraction": 0.1, "mfu": 0.2,
                   "launches_per_step": launches, "warnings": []}  # fmt: skip
        environment = store.load()[0].environment  # the machine of the step records
        store.append(RunRecord(config={"run_name": "nb04", "session": "s1"}, kind="monitor", metrics=metrics,
                               environment=environment))
    RunStore.for_run("other").append(
        make_record("cpu", 50.0, run_name="other", device_name="cpu", hostname="laptop", device_type="cpu")
    )

    out = tmp_path / "04.ipynb"
    job = {"JOB_EPOCHS": 3.0, "JOB_GPUS": 2, "GPU_HOUR_PRICE": 4.0}
    execute_notebook(NOTEBOOK, out, {"RUN_NAME": "nb04", "RUN_DIRS": "other", **job})
    assert_saved_cleanly(out)
    executed = nbformat.read(out, as_version=4)
    by_id = {cell.get("id"): cell for cell in executed.cells}

    table = {row["label"]: row for row in _frame_rows(by_id["table"])}
    assert (table["packed"]["real tok/s"], table["packed"]["speedup"], table["packed"]["parity"]) == (
        "2,250",
        "2.25x",
        "pass",
    )
    assert table["eager"]["status"] == "failed" and table["eager"]["reason"] == "out of memory"
    assert table["cpu"]["speedup"] == "1.00x" and table["cpu"]["machine"] == "cpu @ laptop"
    assert table["packed"][VS_WITHOUT] == "1.88x" and table["cpu"][VS_WITHOUT] == "—"
    both = {row["label"]: row for row in _frame_rows(by_id["references"])}
    assert [(both[k][VS_REFERENCE], both[k][VS_WITHOUT]) for k in ("baseline", "packed", "TRL defaults")] == [
        ("1.00x", "0.83x"), ("2.25x", "1.88x"), ("1.20x", "1.00x"),
    ]  # fmt: skip
    assert (both["cpu"][VS_REFERENCE], both["cpu"][VS_WITHOUT]) == ("1.00x", "—")  # the other run has none,
    assert NOT_MEASURED.startswith(both["cpu"]["note"].rstrip(".…"))  # and says so (pandas shortens a long cell)
    waterfall = [(r["stage"], r["label"], r["speedup"]) for r in _frame_rows(by_id["waterfall"])]
    assert waterfall[:4] == [
        ("baseline", "baseline", "1.00x"),
        ("kernels only", "liger", "1.50x"),
        ("padding only", "packed", "2.25x"),
        ("kernels + padding", "not measured", "—"),
    ]
    entries = [(r["run"], r["entry"], r["over baseline kernels"]) for r in _frame_rows(by_id["entries"])]
    assert ("nb04", "eager", "1.00x") in entries  # the fastest padding (packed) measured with eager kernels only
    assert [(r["label"], r["reason"]) for r in _frame_rows(by_id["failed"])] == [("eager", "out of memory")]
    overview = _frame_rows(by_id["records"])
    assert [(r["run"], r["steps ok"], r["steps failed"], r["other records"]) for r in overview] == [
        ("nb04", "4", "1", "0"),
        ("nb04", "0", "0", "2"),  # the monitored training run: another workload, counted apart
        ("other", "1", "0", "0"),
    ]
    assert overview[0]["peak FLOP/s source"] == "table: NVIDIA H200 bf16 dense (989.0 TFLOP/s)"
    plots = [o for o in by_id["plots"].outputs if o["output_type"] == "execute_result"]
    assert "application/vnd.holoviews_exec.v0+json" in plots[0]["data"]  # a HoloViews layout was displayed
    monitored = [o for o in by_id["monitor"].outputs if o["output_type"] == "execute_result"]
    assert "application/vnd.holoviews_exec.v0+json" in monitored[0]["data"]  # the monitor's series over steps
    recommendation = _outputs_text(by_id["recommend"])
    assert "**Recommended:** packed" in recommendation and "padding_free=True" in recommendation
    assert "**Recommended:** cpu" in recommendation  # the other machine gets its own
    projection = _outputs_text(by_id["job"])  # one projection per machine, at the job's parameters
    assert projection.count("**Your job:**") == 2 and "x 3 epoch(s) on 2 GPU(s)" in projection
    assert "scaled linearly to JOB_GPUS=2" in projection and "GPU_HOUR_PRICE=$4.00 per GPU-hour" in projection
    report = runs_root / "nb04" / "report.html"
    assert str(report) in _outputs_text(by_id["report"])
    soup = BeautifulSoup(report.read_text(), "html.parser")
    assert [s["data-machine"] for s in soup.select("section.machine")] == [
        "NVIDIA H200 @ gpu-01",
        "cpu @ laptop",
    ]
    speedups = {
        row.select_one('td[data-col="label"]').get_text(): row.select_one('td[data-col="speedup"]').get_text()
        for row in soup.select("table.records tbody tr")
    }
    assert speedups == {
        "baseline": "1.00x",
        "liger": "1.50x",
        "packed": "2.25x",
        "eager": "—",
        "TRL defaults": "1.20x",
        "cpu": "1.00x",
    }
    over_both = {
        row.select_one('td[data-col="label"]').get_text(): row.select_one(f'td[data-col="{VS_WITHOUT}"]').get_text()
        for row in soup.select("table.both-references tbody tr")
    }
    assert over_both == {"baseline": "0.83x", "liger": "1.25x", "packed": "1.88x", "TRL defaults": "1.00x", "cpu": "—"}
    assert "1.20x the reference path" in soup.select_one("ul.references").get_text()
    job_text = soup.select_one("section.job").get_text()  # the report projects the same job, with its cost
    assert "x 3 epoch(s) on 2 GPU(s)" in job_text and "$" in job_text and "no price given" not in job_text


@pytest.mark.slow
def test_notebook_04_measures_trl_peers_and_convergence_on_the_tiny_preset(runs_root, kernel_env, tmp_path):
    """A real tiny record of this machine is recommended; the notebook runs TRL from its export beside it and the
    convergence pair, and the report shows both."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    from nbhelpers.measure.config import RunConfig
    from nbhelpers.measure.runner import run_configs

    tiny = RunConfig(run_name="nb04trl", num_samples=4, batch_size=2, max_length=128, timing="epoch",
                     padding="packed", extra={"parity_probe_samples": 0})  # fmt: skip
    run_configs([tiny], store=RunStore.for_run("nb04trl"), isolate=False, progress=False)
    out = tmp_path / "04.ipynb"
    execute_notebook(NOTEBOOK, out, {"RUN_NAME": "nb04trl", "PEER_ROWS": "trl", "CONVERGENCE_STEPS": 2})
    assert_saved_cleanly(out)
    by_id = {cell.get("id"): cell for cell in nbformat.read(out, as_version=4).cells}
    rows = {row["label"]: row for row in _frame_rows(by_id["peers"])}
    assert set(rows) == {"TRL from the export of eager/packed/sdpa/b2x128", "eager/packed/sdpa/b2x128"}
    assert rows["TRL from the export of eager/packed/sdpa/b2x128"]["status"] == "ok"
    assert "TRL from its export" in _outputs_text(by_id["peers"]) and "goal" in _outputs_text(by_id["peers"])
    assert "Convergence pass over 3 steps" in _outputs_text(by_id["convergence"])
    soup = BeautifulSoup((runs_root / "nb04trl" / "report.html").read_text(), "html.parser")
    assert soup.select("table.peers tbody tr") and "goal" in soup.select_one("p.export-gap").get_text()
    assert "Convergence pass" in soup.select_one("p.convergence").get_text()


@pytest.mark.slow
def test_notebook_04_recommends_the_lora_workload_and_measures_its_convergence(
    runs_root, make_record, kernel_env, tmp_path
):
    """ADAPTER="lora": the recommendation comes from the LoRA records only (a note names the full fine-tuning one
    left out), and the convergence pair trains the same adapters."""
    from notebook_helpers import LORA, assert_lora

    from nbhelpers.measure.config import RunConfig
    from nbhelpers.measure.runner import run_configs

    store = RunStore.for_run("nb04lora")
    lora = {"adapter": "lora", "lora_rank": LORA["LORA_RANK"], "lora_alpha": LORA["LORA_ALPHA"]}
    tiny = RunConfig(run_name="nb04lora", num_samples=4, batch_size=2, max_length=64, timing="epoch",
                     padding="packed", extra={"parity_probe_samples": 0}, **lora)  # fmt: skip
    run_configs([tiny], store=store, isolate=False, progress=False)
    store.append(make_record("full fine-tuning", 99999.0, run_name="nb04lora"))  # another machine's, no adapter
    out = tmp_path / "04.ipynb"
    execute_notebook(NOTEBOOK, out, {"RUN_NAME": "nb04lora", "CONVERGENCE_STEPS": 2, **LORA})
    assert_saved_cleanly(out)
    by_id = {cell.get("id"): cell for cell in nbformat.read(out, as_version=4).cells}
    recommendation = _outputs_text(by_id["recommend"])
    assert "**Recommended:** eager/packed/sdpa/b2x64/lora-r4" in recommendation and "LoraConfig" in recommendation
    assert "Left out: 1 measured step record(s) of another adapter (none (full fine-tuning): 1)" in recommendation
    assert "Convergence pass over 3 steps" in _outputs_text(by_id["convergence"])
    curves = [r for r in store.load() if r.kind == "convergence"]
    assert len(curves) == 2 and all(r.ok for r in curves), [r.reason for r in curves]
    assert_lora(curves)
