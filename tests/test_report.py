"""Speedup table, waterfall, the HTML report (numbers parsed back out), cross-machine refusal, nbparams."""

from __future__ import annotations

import json
import math
import re

import pytest
from bs4 import BeautifulSoup

from nbhelpers.measure.store import RunStore
from nbhelpers.nbparams import apply_databricks_widgets
from nbhelpers.views import report
from nbhelpers.views.report import CrossMachineError, build_table, speedup, waterfall_steps

GPU = "NVIDIA H200 @ gpu-01"
CPU = "cpu @ laptop"
OOM = "CUDA out of memory (20 GiB)"


@pytest.fixture
def records(make_record):
    """The DESIGN.md H200 table (a subset) plus a CPU machine: numbers whose ratios are known."""
    cpu = {
        "device_name": "cpu",
        "hostname": "laptop",
        "device_type": "cpu",
        "peak_flops_source": "measured: matmul",
    }
    return [
        make_record(
            "sdpa, pad to 2048",
            6367.0,
            memory_gib=111.0,
            mfu=0.08,
            kernels_per_step=6458,
            padding_fraction=0.75,
        ),
        make_record("eager attention", None, attn="eager", status="failed", reason=OOM),
        make_record(
            "pad to longest",
            4624.0,
            padding="dynamic",
            memory_gib=101.0,
            mfu=0.06,
            padding_fraction=0.61,
        ),
        make_record(
            "packed, flex",
            15059.0,
            padding="packed",
            attn="flex_attention",
            memory_gib=56.0,
            mfu=0.2,
            parity="pass",
        ),
        make_record(
            "liger, static",
            8796.0,
            kernels="liger",
            memory_gib=64.0,
            mfu=0.12,
            kernels_per_step=3742,
        ),
        make_record("liger, bad parity", 20000.0, kernels="liger+compile", memory_gib=30.0, parity="fail"),
        make_record("cpu eager", 210.0, memory_gib=1.5, mfu=0.01, **cpu),
        make_record("cpu packed", 340.5, padding="packed", memory_gib=1.25, mfu=0.02, parity="pass", **cpu),
        make_record("a trace", 1.0, kind="trace"),
    ]


def test_speedup_refuses_other_machines_and_other_runs(make_record):
    gpu = make_record("a", 200.0)
    other_gpu = make_record("b", 100.0, hostname="gpu-02")
    other_run = make_record("c", 100.0, run_name="sweep-point-2")
    assert speedup(gpu, make_record("base", 100.0)) == 2.0
    message = "only a ratio of records from one run on one machine"
    with pytest.raises(CrossMachineError, match=message) as info:
        speedup(gpu, other_gpu)
    assert "NVIDIA H200 @ gpu-02" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(CrossMachineError, match="from run 'sweep-point-2'"):
        speedup(gpu, other_run)
    with pytest.raises(ValueError, match="no measured throughput.*status 'failed': OOM"):
        speedup(make_record("x", None, status="failed", reason="OOM"), gpu)


def test_table_rows_baselines_and_failed_rows(records):
    table = build_table(records)
    assert len(table) == 8  # every step record, the failed one included; the trace is not a step
    rows = table.set_index("label")
    assert rows.loc["eager attention", "status"] == "failed"
    assert rows.loc["eager attention", "reason"] == "CUDA out of memory (20 GiB)"
    assert math.isnan(rows.loc["eager attention", "speedup"])
    assert rows.loc["packed, flex", "speedup"] == pytest.approx(15059 / 6367)
    assert rows.loc["liger, static", "speedup"] == pytest.approx(8796 / 6367)
    assert rows.loc["liger, static", "kernels/step"] == 3742
    assert rows.loc["liger, bad parity", "parity"] == "fail"
    assert rows.loc["cpu packed", "speedup"] == pytest.approx(340.5 / 210.0)  # over the CPU's own baseline
    assert set(rows.loc[["cpu eager", "cpu packed"], "baseline"]) == {"cpu eager"}
    assert list(table["machine"].unique()) == [GPU, CPU]
    # an explicit baseline label
    rows = build_table(records[:6], baseline_label="liger, static").set_index("label")
    assert rows.loc["sdpa, pad to 2048", "speedup"] == pytest.approx(6367 / 8796)
    with pytest.raises(ValueError, match="matches no measured step record"):
        build_table(records, baseline_label="no such label")


def test_default_baseline_falls_back_to_first_ok(make_record):
    recs = [
        make_record("failed static", None, status="failed", reason="x"),
        make_record("dynamic", 100.0, padding="dynamic"),
        make_record("liger", 150.0, kernels="liger", padding="dynamic"),
    ]
    assert set(build_table(recs)["baseline"]) == {"dynamic"}
    assert report.default_baseline(recs).config["label"] == "dynamic"


def test_waterfall_uses_measured_records_only(records):
    steps = waterfall_steps(records)
    gpu = steps[steps["machine"] == GPU].set_index("stage")
    assert list(gpu.index) == ["baseline", "kernels only", "padding only", "best overall"]
    assert gpu.loc["baseline", "label"] == "sdpa, pad to 2048"
    assert gpu.loc["kernels only", "label"] == "liger, static"  # "bad parity" is faster but failed parity
    assert gpu.loc["padding only", "label"] == "pad to longest"  # packed+flex also changed attention
    assert gpu.loc["padding only", "speedup"] == pytest.approx(4624 / 6367)
    assert gpu.loc["best overall", "label"] == "packed, flex"
    assert gpu.loc["best overall", "real tok/s"] == 15059.0
    assert gpu.loc["best overall", "step gain"] == pytest.approx(15059 / 4624)
    cpu = steps[steps["machine"] == CPU].set_index("stage")
    assert cpu.loc["kernels only", "label"] == "not measured"
    assert math.isnan(cpu.loc["kernels only", "speedup"])
    assert cpu.loc["best overall", "label"] == "cpu packed"


def test_formatting():
    assert report.fmt_rate(15059.4) == "15,059" and report.fmt_rate(34.56) == "34.6"
    assert report.fmt_rate(2.345) == "2.35"
    assert report.fmt_speedup(2.3651) == "2.37x" and report.fmt_percent(0.075) == "7.5%"
    assert report.fmt_gib(float("nan")) == "—" and report.fmt_count(6458.0) == "6,458"


def _number(text: str) -> float:
    return float(re.sub(r"[,x%]", "", text))


def _parse_tables(soup, css_class):
    """{machine: [{column: text}]} from the report's tables of one class."""
    out = {}
    for table in soup.select(f"table.{css_class}"):
        out[table["data-machine"]] = [
            {td["data-col"]: td.get_text() for td in tr.find_all("td")} for tr in table.select("tbody tr")
        ]
    return out


@pytest.mark.slow
def test_html_report_numbers_equal_the_records(records, tmp_path):
    store = RunStore(tmp_path / "run")
    for record in records:
        store.append(record)
    loaded = store.load()
    path = report.write_html_report(loaded, tmp_path / "out" / "report.html")
    text = path.read_text()
    soup = BeautifulSoup(text, "html.parser")

    # offline: bokeh inline, nothing fetched from a CDN
    assert "cdn.bokeh.org" not in text and not soup.select("script[src]") and not soup.select("link[href]")
    assert "Bokeh" in text and len(soup.select("div[data-root-id]")) == 2  # one plot column per machine

    # one section per machine, each table holding only its machine's rows
    sections = soup.select("section.machine")
    assert [s["data-machine"] for s in sections] == [GPU, CPU]
    tables = _parse_tables(soup, "records")
    assert {row["machine"] for row in tables[GPU]} == {GPU}
    assert {row["machine"] for row in tables[CPU]} == {CPU}

    by_label = {r.config["label"]: r for r in loaded if r.kind == "step"}
    baselines = {GPU: by_label["sdpa, pad to 2048"], CPU: by_label["cpu eager"]}
    for machine, rows in tables.items():
        for row in rows:
            record = by_label[row["label"]]
            if not record.ok:
                assert (row["status"], row["reason"], row["real tok/s"]) == ("failed", record.reason, "—")
                continue
            m = record.metrics
            assert _number(row["real tok/s"]) == pytest.approx(m["real_tokens_per_s"], abs=0.5)
            assert _number(row["speedup"]) == round(
                m["real_tokens_per_s"] / baselines[machine].metrics["real_tokens_per_s"], 2
            )
            assert _number(row["MFU"]) == pytest.approx(100 * m["mfu"])
            assert _number(row["peak memory GiB"]) == pytest.approx(m["peak_memory_gib"])
            assert _number(row["padding fraction"]) == pytest.approx(100 * m["padding_fraction"])
            assert row["parity"] == (m["parity"]["status"] if "parity" in m else "not checked")
    # the same strings as the notebook's table
    expected = report.format_table(build_table(loaded))
    html_rows = tables[GPU] + tables[CPU]
    assert [list(r.values()) for r in html_rows] == expected.astype(str).values.tolist()

    # waterfall, failed configurations, peak FLOP/s source, recommendation
    waterfall = _parse_tables(soup, "waterfall")
    assert [(r["stage"], r["label"], r["speedup"]) for r in waterfall[GPU]] == [
        ("baseline", "sdpa, pad to 2048", "1.00x"),
        ("kernels only", "liger, static", "1.38x"),
        ("padding only", "pad to longest", "0.73x"),
        ("best overall", "packed, flex", "2.37x"),
    ]
    failed = sections[0].select("ul.failed-list li")
    assert len(failed) == 1 and "eager attention" in failed[0].get_text()
    assert "CUDA out of memory (20 GiB)" in failed[0].get_text()
    assert sections[1].select("ul.failed-list") == []
    assert "table: NVIDIA H200 bf16 dense (989.0 TFLOP/s)" in sections[0].select_one(".peak-flops").get_text()
    assert "measured: matmul" in sections[1].select_one(".peak-flops").get_text()
    recommendation = sections[0].select_one("pre.python").get_text()
    assert "# Recommended by nbhelpers from measurements: 'packed, flex'" in recommendation
    assert 'model_init_kwargs={"attn_implementation": "flex_attention"}' in recommendation
    assert json.loads(sections[1].select_one("pre.json").get_text())["label"] == "cpu packed"


def test_html_report_without_records(tmp_path):
    path = report.write_html_report([], tmp_path / "empty.html")
    assert "No step records found" in path.read_text()


def test_load_report_records_dedupes_and_resolves_names(runs_root, make_record):
    a = RunStore.for_run("a")
    first = a.append(make_record("base", 100.0, run_name="a"))
    RunStore.for_run("b").append(make_record("base", 200.0, run_name="b"))
    loaded = report.load_report_records("a", f"b, {runs_root / 'a'}")
    assert [r.record_id for r in loaded][0] == first.record_id and len(loaded) == 2
    with pytest.raises(FileNotFoundError, match="no run folder"):
        report.load_report_records("a", "nope")
    overview = report.records_overview(loaded)
    assert overview[["run", "steps ok"]].values.tolist() == [["a", 1], ["b", 1]]


class FakeWidgets:
    def __init__(self, values):
        self.values = dict(values)
        self.created = {}

    def text(self, name, default, label=None):
        self.created[name] = default
        self.values.setdefault(name, default)

    def get(self, name):
        if name not in self.values:
            raise ValueError(f"InputWidgetNotDefined: {name}")
        return self.values[name]


class FakeDbutils:
    def __init__(self, values):
        self.widgets = FakeWidgets(values)


def test_databricks_widgets_override_typed_parameters():
    namespace = {"RUN_NAME": "default", "BATCH_SIZE": 4, "LR": 1e-5, "PROFILE": False, "OTHER": "x"}
    assert apply_databricks_widgets(namespace, ["RUN_NAME"]) == {}  # no dbutils: no-op
    widgets = {"RUN_NAME": "job-7", "BATCH_SIZE": "16", "PROFILE": "true", "LR": "0.001"}
    namespace["dbutils"] = FakeDbutils(widgets)
    changed = apply_databricks_widgets(namespace, ["RUN_NAME", "BATCH_SIZE", "LR", "PROFILE"])
    assert changed == {"RUN_NAME": "job-7", "BATCH_SIZE": 16, "LR": 0.001, "PROFILE": True}
    assert namespace["BATCH_SIZE"] == 16 and namespace["OTHER"] == "x"
    assert namespace["dbutils"].widgets.created["RUN_NAME"] == "default"
    namespace["dbutils"] = FakeDbutils({"BATCH_SIZE": "many"})
    with pytest.raises(ValueError, match="BATCH_SIZE='many' is not a valid int"):
        apply_databricks_widgets(namespace, ["BATCH_SIZE"])
    with pytest.raises(KeyError, match="MISSING"):
        apply_databricks_widgets(namespace, ["MISSING"])


def test_speedups_only_divide_one_workload(make_record):
    from nbhelpers.views.report import build_table, speedup, waterfall_steps

    small = [make_record("eager small", 100.0), make_record("liger small", 150.0, kernels="liger")]
    large = [
        make_record("eager large", 400.0, padding="dynamic", batch_size=8),
        make_record("liger large", 1000.0, kernels="liger", padding="dynamic", batch_size=8),
    ]
    with pytest.raises(ValueError, match="a speedup compares one workload"):
        speedup(large[1], small[0])
    table = build_table(small + large).set_index("label")
    assert table.loc["liger small", "speedup"] == pytest.approx(1.5)
    assert table.loc["eager large", "speedup"] == pytest.approx(1.0)  # its own workload's baseline
    assert table.loc["liger large", "speedup"] == pytest.approx(2.5)
    steps = waterfall_steps(small + large)
    assert set(steps["workload"].str.contains("b8x128")) == {True, False}
    best = steps[steps["stage"] == "best overall"].set_index("workload")["speedup"]
    assert sorted(best.round(3)) == [1.5, 2.5]
