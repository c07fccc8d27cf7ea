"""Notebooks 01 -> 02 -> 03 -> 04 on one RUN_NAME and one workload: the waterfall has all four stages measured."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import papermill
import pytest
from browser_helpers import (
    NESTED_CELLS_JS,
    SCREENSHOTS,
    SECTIONS_JS,
    OfflineRoutes,
    browser_session,
    chromium_or_skip,
    notebook_as_html,
    open_offline,
)
from notebook_helpers import execute, outputs_text

from nbhelpers.analysis.records import WORKLOAD_FIELDS, group_key, step_records, workload_of
from nbhelpers.analysis.speedup import WATERFALL_STAGES, waterfall_steps
from nbhelpers.measure.store import RunStore

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ORDER = ("01_baseline_profile", "02_kernel_swap_in", "03_dynamic_padding", "04_speedup_report")
# The workload parameters every one of 01-03 declares, with the same defaults.
SHARED = ("MODEL", "DATASET", "PROMPT_FIELD", "RESPONSE_FIELD", "BATCH_SIZE", "MAX_LENGTH", "NUM_SAMPLES", "STEPS",
          "WARMUP", "TIMING")  # fmt: skip
# One tiny workload; Liger with RoPE only, so Triton's CPU interpreter stays quick.
WORKLOAD = {"BATCH_SIZE": 2, "MAX_LENGTH": 64, "NUM_SAMPLES": 4, "STEPS": 1, "WARMUP": 0}
PER_NOTEBOOK = {
    "01_baseline_profile": {},
    "02_kernel_swap_in": {"KERNELS": "eager,liger", "LIGER_KERNELS": "rope", "MEASURE_STARTUP": False,
                          "DOCTOR_PROBES": False},
    "03_dynamic_padding": {"KERNELS": "eager,liger", "LIGER_KERNELS": "rope", "STRATEGIES": "static,packed",
                           "ATTENTION": "sdpa", "PROFILE": False, "PROOF_SEQUENCES": 2,
                           "TUNE_BUDGET_S": 90},  # fmt: skip
}


def _defaults(name: str) -> dict[str, str]:
    params = papermill.inspect_notebook(str(NOTEBOOKS / f"{name}.ipynb"))
    return {key: info["default"] for key, info in params.items()}


def test_notebooks_01_to_03_share_the_workload_defaults():
    defaults = [_defaults(name) for name in ORDER[:3]]
    for key in SHARED:
        assert len({d[key] for d in defaults}) == 1, (key, [d.get(key) for d in defaults])
    assert defaults[0]["PADDING"] == defaults[1]["PADDING"] == '"static"'  # 02 measures kernels at the baseline's
    assert "fused_linear_cross_entropy" not in defaults[1]["LIGER_KERNELS"]
    assert "fused_linear_cross_entropy" not in defaults[2]["LIGER_KERNELS"]
    assert set(WORKLOAD_FIELDS) >= {"num_samples", "timing", "prompt_field", "steps", "warmup"}


# Notebook 05 after them, on its own run (its FSDP2 rows are no stage of the waterfall): two gloo ranks on a CPU.
NOTEBOOK_05 = ("05_several_gpus", {"RUN_NAME": "chain05", "DEVICE": "cpu", "NUM_SAMPLES": 8, "MAX_LENGTH": 48,
                                   "STEPS": 1, "WARMUP": 0})  # fmt: skip


@dataclass
class Chain:
    """The executed notebooks of one chain (by name) and its runs folder."""

    runs_root: Path
    executed: dict[str, Path]


@pytest.fixture(scope="module")
def chain(kernel_env, tmp_path_factory) -> Iterator[Chain]:
    """Notebooks 01-04 on one RUN_NAME and workload, then notebook 05: executed once for this module's tests."""
    work = tmp_path_factory.mktemp("chain")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("NBHELPERS_RUNS", str(work / "runs"))
        executed = {}
        for name in ORDER:
            parameters = {"RUN_NAME": "chain"} | (WORKLOAD | PER_NOTEBOOK[name] if name in PER_NOTEBOOK else {})
            executed[name] = work / f"{name}.ipynb"
            execute(NOTEBOOKS / f"{name}.ipynb", executed[name], parameters)
        name, parameters = NOTEBOOK_05
        executed[name] = work / f"{name}.ipynb"
        execute(NOTEBOOKS / f"{name}.ipynb", executed[name], parameters)
        yield Chain(work / "runs", executed)


@pytest.mark.slow
def test_chain_01_to_04_measures_every_waterfall_stage_in_one_workload(chain, monkeypatch):
    monkeypatch.setenv("NBHELPERS_RUNS", str(chain.runs_root))
    runs_root = chain.runs_root
    records = RunStore.for_run("chain").load()
    # notebook 04 on its defaults measures TRL from the export beside the recommendation and a loss-curve pair
    trl = [r for r in step_records(records) if r.notebook.startswith("04")]
    assert [r.config["engine"] for r in trl] == ["trl"] and trl[0].ok, [r.reason for r in trl]
    curves = [r for r in records if r.kind == "convergence"]
    assert len(curves) == 2 and all(r.ok and len(r.metrics["losses"]) >= 10 for r in curves)
    watched = [r for r in records if r.kind == "monitor"]  # its watched TRL run: a record every 4 of 10 steps
    assert [r.metrics["step"] for r in watched] == [4, 8, 10]
    assert watched[2].metrics.get("launches_per_step") is not None  # the profiler window at steps 8-9
    records = [r for r in records if not r.notebook.startswith("04")]  # the waterfall's: 01-03
    steps = step_records(records)
    assert {r.notebook.split(".")[0] for r in steps} == set(ORDER[:3])
    assert len({workload_of(r) for r in steps}) == 1 and len({group_key(r) for r in steps}) == 1
    waterfall = waterfall_steps(records).set_index("stage")
    assert waterfall.index.tolist() == list(WATERFALL_STAGES)
    assert waterfall["real tok/s"].notna().all(), waterfall[["label", "note"]].to_dict()
    by_id = {r.record_id: r for r in steps}
    stage = {name: by_id[waterfall.loc[name, "record_id"]] for name in WATERFALL_STAGES}
    assert stage["baseline"].notebook.startswith("01") and stage["baseline"].label == "baseline"
    assert (stage["kernels only"].config["kernels"], stage["kernels only"].config["padding"]) == ("liger", "static")
    assert (stage["padding only"].config["kernels"], stage["padding only"].config["padding"]) == ("eager", "packed")
    both = stage["kernels + padding"]
    assert (both.config["kernels"], both.config["padding"]) == ("liger", "packed")
    assert both.notebook.startswith("03")
    assert both.config["liger_kernels"] == ["rope"]
    assert chain.executed["04_speedup_report"].is_file() and (runs_root / "chain" / "report.html").is_file()
    # Notebook 03's tuner searched the same space within its budget and left its winner for notebook 04.
    tuned = json.loads((runs_root / "chain" / "tuned.json").read_text())
    assert tuned["record_id"] in by_id or tuned["record_id"] == stage["baseline"].record_id
    assert (runs_root / "chain" / "tuner.jsonl").read_text().count("\n") >= 2
    executed = nbformat.read(chain.executed["03_dynamic_padding"], as_version=4)
    assert any("Winner: " in outputs_text(cell) for cell in executed.cells)


# What a reader must find in each executed notebook, by section: a piece of text its outputs show.
MUST_SHOW = {
    "04_speedup_report": {
        "2. Every configuration, measured": "real tok/s",
        "3. The waterfall": "kernels + padding",
        "6. The recommended configuration": "Recommended:",
        "7. Against TRL": "TRL from the export",
        "8. Convergence": "Convergence pass",
    },
    "03_dynamic_padding": {"3. The waste explorer": "padding fraction", "8. The tuner": "Winner: "},
    "02_kernel_swap_in": {"1. The kernel doctor": "verdict"},
}
# The sections whose outputs must hold a drawn plot.
MUST_PLOT = {
    "01_baseline_profile": ("4. Plots",),
    "03_dynamic_padding": ("1. The length distribution", "5. Padding, positions"),
    "04_speedup_report": ("4. Plots", "8. Convergence", "9. A real training run, watched"),
}


def _section(sections: list[dict], title: str) -> dict:
    return next(s for s in sections if s["title"].startswith(title))


@pytest.mark.slow
@pytest.mark.browser
def test_every_executed_notebook_and_the_report_render_every_section_in_chromium(chain):
    """Each executed notebook, exported to HTML, and the report open offline in headless Chromium: every h2
    section shows an output (text, a table or a plot), none a traceback, the plots draw, and the sections a user
    must see say what they are for. Screenshots go to runs/browser/."""
    executable = chromium_or_skip()
    pages = {name: notebook_as_html(path, SCREENSHOTS / "chain") for name, path in chain.executed.items()}
    pages["report"] = chain.runs_root / "chain" / "report.html"
    errors: list[str] = []
    report_requests = OfflineRoutes(serve_cdn=False)  # the report opens offline: it asks for nothing
    with browser_session(executable) as browser:
        for name, path in pages.items():
            # A batch run's notebooks load BokehJS from its CDN: served from the installed packages, as online.
            page = open_offline(browser, path, errors, report_requests if name == "report" else OfflineRoutes())
            if name in MUST_PLOT or name == "report":  # drawn: canvases the size of a plot (legends are 20 x 20)
                page.locator(".bk-Canvas canvas").first.wait_for(timeout=60_000)
                sizes = page.locator(".bk-Canvas canvas").evaluate_all("cs => cs.map(c => [c.width, c.height])")
                drawn = [(w, h) for w, h in sizes if w > 100 and h > 100]
                assert len(drawn) >= len(MUST_PLOT.get(name, ("waterfall",))), (name, sizes)
            page.screenshot(path=str(SCREENSHOTS / f"chain-{name}.png"), full_page=True)
            if name == "report":
                text = page.locator("body").inner_text()
                for expected in ("Waterfall", "Recommended", "real tok/s"):
                    assert expected in text, (name, expected)
                continue
            sections = page.evaluate(SECTIONS_JS)
            assert sections, name
            empty = [s["title"] for s in sections if not s["outputs"]]
            assert not empty, f"{name}: sections that show nothing: {empty} {page.evaluate(NESTED_CELLS_JS)}"
            tracebacks = [s["title"] for s in sections if any(o["error"] for o in s["outputs"])]
            assert not tracebacks, f"{name}: sections showing a traceback: {tracebacks}"
            for title in MUST_PLOT.get(name, ()):
                assert any(o["plot"] for o in _section(sections, title)["outputs"]), f"{name} / {title}: no plot"
            for title, expected in MUST_SHOW.get(name, {}).items():
                shown = " ".join(o["text"] for o in _section(sections, title)["outputs"])
                assert expected in shown, f"{name} / {title}: {expected!r} not in {shown[:300]!r}"
    assert not errors, errors
    assert not report_requests.blocked, f"the report asked the network for {report_requests.blocked}"
