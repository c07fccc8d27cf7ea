"""The HTML report (``views.report``): numbers parsed back out equal the records, one section per machine."""

from __future__ import annotations

import json
import re

import pytest
from bs4 import BeautifulSoup

from nbhelpers.analysis.entry_gains import entry_gains
from nbhelpers.analysis.speedup import build_table
from nbhelpers.formatting import format_table
from nbhelpers.measure.store import RunStore
from nbhelpers.views import report

GPU = "NVIDIA H200 @ gpu-01"
CPU = "cpu @ laptop"


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
def test_html_report_numbers_equal_the_records(h200_and_cpu_records, tmp_path):
    store = RunStore(tmp_path / "run")
    for record in h200_and_cpu_records:
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
            # the table prints tok/s to whole tokens (fmt_rate): a display rounding of at most 0.5 tok/s
            assert _number(row["real tok/s"]) == pytest.approx(m["real_tokens_per_s"], abs=0.5)
            assert _number(row["speedup"]) == round(
                m["real_tokens_per_s"] / baselines[machine].metrics["real_tokens_per_s"], 2
            )
            assert _number(row["MFU"]) == pytest.approx(100 * m["mfu"])
            assert _number(row["peak memory GiB"]) == pytest.approx(m["peak_memory_gib"])
            assert _number(row["padding fraction"]) == pytest.approx(100 * m["padding_fraction"])
            unchecked = "baseline" if record is baselines[machine] else "not checked"  # the reference itself
            assert row["parity"] == (m["parity"]["status"] if "parity" in m else unchecked)
    # the same strings as the notebook's table
    expected = format_table(build_table(loaded))
    html_rows = tables[GPU] + tables[CPU]
    assert [list(r.values()) for r in html_rows] == expected.astype(str).values.tolist()

    # waterfall, failed configurations, peak FLOP/s source, recommendation
    waterfall = _parse_tables(soup, "waterfall")
    assert [(r["stage"], r["label"], r["speedup"]) for r in waterfall[GPU]] == [
        ("baseline", "sdpa, pad to 2048", "1.00x"),
        ("kernels only", "liger, static", "1.38x"),
        ("padding only", "pad to longest", "0.73x"),
        ("kernels + padding", "packed, flex", "2.37x"),
    ]
    entries = _parse_tables(soup, "entries")  # what each kernel entry bought at the fastest padding
    assert [(r["entry"], r["attention"], r["speedup"], r["over baseline kernels"]) for r in entries[GPU]] == [
        ("eager", "flex_attention", "2.37x", "1.00x"),
    ]
    shown = format_table(entry_gains(loaded)).astype(str).values.tolist()
    assert [list(r.values()) for r in entries[GPU] + entries[CPU]] == shown
    failed = sections[0].select("ul.failed-list li")
    assert len(failed) == 1 and "eager attention" in failed[0].get_text()
    assert "CUDA out of memory (20 GiB)" in failed[0].get_text()
    assert sections[1].select("ul.failed-list") == []
    assert "table: NVIDIA H200 bf16 dense (989.0 TFLOP/s)" in sections[0].select_one(".peak-flops").get_text()
    assert "measured: matmul" in sections[1].select_one(".peak-flops").get_text()
    assert "bootstrap 95%" in sections[0].select_one(".spread").get_text()  # how far each figure may move
    recommendation = sections[0].select_one("pre.python").get_text()
    assert "# Recommended by nbhelpers from measurements: 'packed, flex'" in recommendation
    assert 'model_init_kwargs={"attn_implementation": "flex_attention"}' in recommendation
    assert json.loads(sections[1].select_one("pre.json").get_text())["label"] == "cpu packed"


def test_html_report_without_records(tmp_path):
    path = report.write_html_report([], tmp_path / "empty.html")
    assert "No step records found" in path.read_text()


def test_html_report_has_a_doctor_section_when_a_doctor_record_is_present(tmp_path):
    from test_doctor import _fake_path, _WrongBackward

    from nbhelpers.kernels.doctor import BROKEN_PATH, check_path, run_doctor
    from nbhelpers.measure.doctor_records import doctor_record

    plain = report.write_html_report([], tmp_path / "plain.html")
    assert "Kernel doctor" not in plain.read_text()
    doctor = run_doctor("cpu", run_probes=False)
    doctor.paths.append(check_path(_fake_path(_WrongBackward.apply), "cpu", {}, []))
    doctor.paths[-1].notes.append("slow-one: slower; fix: do this (source: NOTES.md)")
    record = doctor_record(doctor, "doc")
    path = report.write_html_report([record], tmp_path / "doctor.html")
    soup = BeautifulSoup(path.read_text(), "html.parser")
    (section,) = soup.select("section.doctor")
    assert section["data-machine"] == record.machine and "no CUDA GPU" in section.get_text()
    rows = {tr.find("td").get_text(): {td["data-col"]: td.get_text() for td in tr.find_all("td")}
            for tr in section.select("table.doctor tbody tr")}  # fmt: skip
    assert set(rows) == {p.path for p in doctor.paths}
    assert rows["kernels fake"]["verdict"] == BROKEN_PATH and "probe failed" in rows["kernels fake"]["reason"]
    assert "skipped by notebooks 02 and 03: kernels fake" in section.select_one("p.doctor-verdict").get_text()
    assert [li.get_text() for li in section.select("ul.doctor-notes li")] == [doctor.paths[-1].notes[0]]


def test_the_report_opens_on_what_was_found_and_holds_notebook_05_and_the_watched_run(make_record, tmp_path):
    """The first screen's three lines, notebook 05's scaling rows, and the monitored run's summary; each section
    without records says which notebook or parameter fills it."""
    from nbhelpers.measure.store import RunRecord

    base = make_record("eager, static", 500.0)
    best = make_record("liger, packed", 1500.0, kernels="liger", padding="packed", parity="pass")
    bare = BeautifulSoup(report.write_html_report([base, best], tmp_path / "bare.html").read_text(), "html.parser")
    first = bare.select_one("body > section")
    assert "findings" in first["class"]
    lines = [li.get_text() for li in first.select("ol.findings li")]
    assert len(lines) == 3 and "liger, packed" in lines[0] and "3.00x the reference path" in lines[0]
    job = bare.select_one("section.job")  # the job at its defaults: the dataset's full size, one epoch, one GPU
    rows = {
        tr.find_all("td")[0].get_text(): [td.get_text() for td in tr.find_all("td")] for tr in job.select("tbody tr")
    }
    assert set(rows) == {"baseline", "recommendation"} and rows["recommendation"][1] == "liger, packed"
    assert all(row[5] == "no price given" for row in rows.values())
    assert "3.00x" in job.get_text() and "Assumptions:" in job.get_text()
    assert "notebook 05 measures" in bare.select_one("section.scaling").get_text()
    assert "MONITOR_STEPS" in bare.select_one("section.monitor").get_text()

    one = make_record("fsdp2", 800.0, gpus=1, sharding="fsdp2")
    two = make_record("fsdp2", 1500.0, gpus=2, sharding="fsdp2")
    for record in (one, two):
        record.notebook = "05_several_gpus.ipynb"
    watched = [
        RunRecord(config={"label": "watched", "session": "sft-1"}, kind="monitor",
                  metrics={"step": step, "real_tokens_per_s": rate, "mfu": 0.3, "padding_fraction": 0.1,
                           "peak_memory_gib": 12.0, "launches_per_step": None},
                  environment=dict(base.environment))
        for step, rate in ((4, 1000.0), (8, 1200.0), (12, 1100.0))
    ]  # fmt: skip
    records = [base, best, one, two, *watched]
    soup = BeautifulSoup(report.write_html_report(records, tmp_path / "whole.html").read_text(), "html.parser")
    scaling = soup.select_one("section.scaling")
    rows = _parse_tables(scaling, "scaling")[""]
    assert [row["gpus"] for row in rows] == ["1", "2"]
    assert rows[1]["scaling_efficiency"] == "93.8%"  # 1500 / 2 per GPU over 800 on one GPU
    monitor = soup.select_one("section.monitor")
    (summary,) = _parse_tables(monitor, "monitor")[""]
    assert summary["run"] == "sft-1" and summary["last step"] == "12"
    assert summary["real tok/s (median)"] == "1,100" and summary["MFU (median)"] == "30.0%"
    assert monitor.select_one("div") is not None  # the plot over the steps, embedded
