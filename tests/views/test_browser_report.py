"""The HTML report in a real headless Chromium with the network cut: it asks for nothing, and its plots draw.

The report is built by ``nbhelpers.views.report.write_html_report`` from a store of records made here (two
machines, a failed configuration), opened from ``file://`` with every non-file request aborted, and
checked for: no request that left file://, no page or console error (BokehJS missing would be one),
BokehJS loaded, and one drawn Bokeh canvas per machine section.
"""

from __future__ import annotations

import time

import pytest
from browser_helpers import SCREENSHOTS, browser_session, chromium_or_skip, printable

from nbhelpers.measure.store import RunStore
from nbhelpers.views import report

pytestmark = pytest.mark.browser
# Every Bokeh figure of the page: its title, y range, and the largest bar/line value it draws.
FIGURES_JS = """() => {
  const figures = [];
  for (const doc of Bokeh.documents) {
    for (const model of doc.all_models) {
      if (!(model.y_range && model.renderers && model.title)) continue;
      let top = -Infinity;
      for (const r of model.renderers) {
        const field = r.glyph && ((r.glyph.top && r.glyph.top.field) || (r.glyph.y && r.glyph.y.field));
        const data = r.data_source && r.data_source.data;
        if (field && data && data[field]) top = Math.max(top, ...Array.from(data[field]).map(Number));
      }
      figures.push({title: model.title.text, start: model.y_range.start, end: model.y_range.end, top});
    }
  }
  return figures;
}"""


def _report(make_record, tmp_path):
    """A report of five records on two machines (one configuration failed), written by nbhelpers."""
    store = RunStore(tmp_path / "runs" / "demo" / "records.jsonl")
    for record in [
        make_record("baseline", 1000.0, run_name="demo", memory_gib=12.0, kernels_per_step=6400),
        make_record("liger", 1500.0, kernels="liger", run_name="demo", memory_gib=8.0, parity="pass"),
        make_record("packed", 2250.0, padding="packed", run_name="demo", memory_gib=9.0, parity="pass"),
        make_record("eager attention", None, attn="eager", status="failed", reason="out of memory", run_name="demo"),
        make_record("cpu", 50.0, run_name="demo", device_name="cpu", hostname="laptop", device_type="cpu"),
    ]:
        store.append(record)
    return report.write_html_report(store.load(), tmp_path / "report.html")


def test_report_opens_offline_and_draws_its_plots(make_record, tmp_path):
    executable = chromium_or_skip()
    url = _report(make_record, tmp_path).resolve().as_uri()

    requests: list[str] = []
    aborted: list[str] = []
    errors: list[str] = []
    with browser_session(executable) as browser:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})

        def only_files(route) -> None:
            requests.append(route.request.url)
            if route.request.url.startswith("file://"):
                route.continue_()
            else:
                aborted.append(route.request.url)
                route.abort("internetdisconnected")

        context.route("**/*", only_files)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
        page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}") if r.url not in aborted else None)
        started = time.perf_counter()
        page.goto(url, wait_until="load")

        sections = page.locator("section.machine")
        assert sections.count() == 2
        # Bokeh renders each plot into a canvas, inside its components' shadow roots (Playwright pierces them).
        for i in range(sections.count()):
            sections.nth(i).locator(".bk-Canvas canvas, div.bk-root canvas").first.wait_for(timeout=30_000)
        drawn_s = time.perf_counter() - started
        assert page.evaluate("() => typeof window.Bokeh !== 'undefined' && window.Bokeh.version") == _bokeh_version()
        # The canvases hold pixels: a drawn plot is wider and taller than an empty placeholder.
        sizes = page.locator(".bk-Canvas canvas").evaluate_all("cs => cs.map(c => [c.width, c.height])")
        assert sizes and all(w > 100 and h > 100 for w, h in sizes), sizes
        assert page.locator("table.records tbody tr").count() == 5
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        screenshot = SCREENSHOTS / "report.png"
        page.screenshot(path=str(screenshot), full_page=True)

    assert requests and all(u.startswith("file://") for u in requests) and not aborted, aborted
    assert not errors, errors
    print(f"\nreport drawn offline in {drawn_s:.1f} s: {len(sizes)} canvases; screenshot {printable(screenshot)}")


def test_report_plots_scale_to_their_own_data(make_record, tmp_path):
    executable = chromium_or_skip()
    url = _report(make_record, tmp_path).resolve().as_uri()
    with browser_session(executable) as browser:
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
        page.goto(url, wait_until="load")
        page.locator(".bk-Canvas canvas").first.wait_for(timeout=30_000)
        figures = page.evaluate(FIGURES_JS)
    assert len(figures) >= 4, figures
    # A plot whose tallest bar fills less than a fifth of its axis shows nothing readable.
    squashed = [f for f in figures if f["top"] > 0 and f["top"] < 0.2 * (f["end"] - f["start"])]
    assert not squashed, f"plots drawn on an axis far larger than their data: {squashed}"


def _bokeh_version() -> str:
    import bokeh

    return bokeh.__version__
