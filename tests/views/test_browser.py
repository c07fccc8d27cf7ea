"""Notebook 03 in JupyterLab in a real headless Chromium: run all cells, move a slider, see the plots.

A temporary copy of notebooks/03_dynamic_padding.ipynb, with tiny parameters injected the papermill way
(a cell after the ``parameters`` cell), is served by a JupyterLab on 127.0.0.1 with its own token,
port and Jupyter folders. Chromium opens it, runs every cell through the Run menu, waits for the kernel
to go idle, and checks what a user sees: the explorer's sliders, the padding fraction changing when a
slider moves, and HoloViews (Bokeh) plots drawn on a canvas. A screenshot lands in
runs/browser/notebook03.png.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest
from browser_helpers import (
    SCREENSHOTS,
    OfflineRoutes,
    browser_session,
    chromium_or_skip,
    jupyterlab_server,
    printable,
)
from notebook_helpers import TINY_NB03
from papermill.iorw import load_notebook_node
from papermill.parameterize import parameterize_notebook

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOK = NOTEBOOKS / "03_dynamic_padding.ipynb"
TINY = {"RUN_NAME": "browser"} | TINY_NB03
SLIDERS = ("batch size", "max length", "pad to multiple of", "buckets")
RUN_TIMEOUT_S = 600
KEY_PRESSES = 12  # max length 64 -> 160 in steps of 8
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def tiny_copy(source: Path, folder: Path, parameters: dict) -> Path:
    """``source`` copied into ``folder`` with ``parameters`` injected after its parameters cell."""
    nb = load_notebook_node(str(source))  # papermill's reader: every cell gets its tags list
    nb = parameterize_notebook(nb, parameters, kernel_name="python3", language="python")
    target = folder / source.name
    nbformat.write(nb, target)
    return target


def slider(page, description: str):
    """The ipywidgets slider whose description label reads exactly ``description``."""
    label = page.locator(".widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    return page.locator(".widget-slider", has=label)


def cell_prompts(page) -> list[str]:
    """The execution prompt of every code cell, as shown: ``[3]:``, ``[*]:`` or ``[ ]:``."""
    return [t.strip() for t in page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()]


def wait_until_run(page, server, timeout: float = RUN_TIMEOUT_S) -> list[str]:
    """Wait until the kernel is idle and no cell is queued or running; return the prompts."""
    deadline = time.monotonic() + timeout
    idle_since = None
    prompts: list[str] = []
    while time.monotonic() < deadline:
        prompts = cell_prompts(page)
        busy = any("*" in p for p in prompts) or any(s != "idle" for s in server.kernel_states())
        if busy:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 3:  # idle for a while, not between two cells
            return prompts
        page.wait_for_timeout(1000)
    raise AssertionError(f"the notebook did not finish within {timeout} s; prompts: {prompts}")


def _settled(page, locator, quiet_ms: int = 2500, timeout_s: float = 60) -> str:
    """The locator's text once it has not changed for ``quiet_ms`` (the kernel answered every key press)."""
    deadline = time.monotonic() + timeout_s
    text, since = locator.inner_text(), time.monotonic()
    while time.monotonic() < deadline:
        page.wait_for_timeout(500)
        now = locator.inner_text()
        if now != text:
            text, since = now, time.monotonic()
        elif (time.monotonic() - since) * 1000 >= quiet_ms:
            return text
    return text


def test_notebook_03_in_jupyterlab(tmp_path):
    executable = chromium_or_skip()
    root = tmp_path / "lab"
    root.mkdir()
    copy = tiny_copy(NOTEBOOK, root, TINY)
    code_cells = sum(1 for c in nbformat.read(copy, as_version=4).cells if c.cell_type == "code")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot = SCREENSHOTS / "notebook03.png"
    env = {"NBHELPERS_RUNS": str(tmp_path / "runs")}

    with jupyterlab_server(root, tmp_path / "jupyter", env) as server, browser_session(executable) as browser:
        context = browser.new_context(viewport={"width": 1500, "height": 1100})
        network = OfflineRoutes().attach(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        try:
            result = _drive(page, server, code_cells, screenshot)
        except BaseException:
            failure = SCREENSHOTS / "notebook03-failure.png"
            page.screenshot(path=str(failure))
            print(f"failure screenshot: {printable(failure)}; console errors: {errors[-10:]}")
            print(f"JupyterLab log tail:\n{server.log_tail(3000)}")
            raise
    assert not network.blocked, f"requests left the machine: {network.blocked}"
    assert not [e for e in errors if "bokeh" in e.lower() or "panel" in e.lower()], errors
    print(f"\nscreenshot: {printable(screenshot)}; {result}; CDN files served from disk: {len(network.served)}")
    assert screenshot.stat().st_size > 10_000


def _drive(page, server, code_cells: int, screenshot: Path) -> str:
    """Open the notebook, run it, check the explorer and the plots, take the screenshot."""
    page.goto(server.url(f"lab/tree/{NOTEBOOK.name}"), wait_until="domcontentloaded", timeout=120_000)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
    deadline = time.monotonic() + 120
    while not (server.api("api/sessions") and all(s == "idle" for s in server.kernel_states())):
        assert time.monotonic() < deadline, "the kernel did not start"
        page.wait_for_timeout(500)

    # Run > Run All Cells, as a user would.
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    prompts = wait_until_run(page, server)
    if len(prompts) != code_cells or not all(re.fullmatch(r"\[\d+\]:", p) for p in prompts):
        shown = [t for t in page.locator(".jp-OutputArea-output").all_inner_texts() if "Error" in t]
        raise AssertionError(f"not every cell ran: prompts {prompts}; last error shown: {shown[-1:]}")

    # The explorer: four sliders with their descriptions, and the padding fraction they drive.
    for description in SLIDERS:
        assert slider(page, description).count() == 1, f"no slider described {description!r}"
    fraction = page.locator(".nbh-padding-fraction")
    assert fraction.count() == 1, "no element of class nbh-padding-fraction"
    fraction.scroll_into_view_if_needed()
    before = fraction.inner_text()
    assert re.search(r"padding fraction: \d+\.\d%", before), before
    # Lengths are long-tailed and MAX_LENGTH is tiny here: most rows are cut to it, so padding barely
    # moves with the batch size; a longer max length lets the rows differ, and padding appears.
    moved = slider(page, "max length")
    start_value = moved.locator(".widget-readout").inner_text().strip()
    handle = moved.locator(".noUi-handle")
    handle.focus()
    for _ in range(KEY_PRESSES):
        page.keyboard.press("ArrowRight")  # noUiSlider's keyboard support: one step per press
    page.wait_for_function(
        "([sel, old]) => document.querySelector(sel).innerText !== old",
        arg=[".nbh-padding-fraction", before],
        timeout=60_000,
    )
    end_value = moved.locator(".widget-readout").inner_text().strip()
    assert int(end_value) > int(start_value), (start_value, end_value)
    after = _settled(page, fraction)
    assert after != before and re.search(r"padding fraction: \d+\.\d%", after), (before, after)

    # HoloViews plots drew on Bokeh canvases: in cell outputs and inside the explorer's output widget.
    canvases = page.locator(".bk-Canvas canvas, div.bk-root canvas")
    canvases.first.wait_for(timeout=60_000)
    explorer = page.locator(".widget-output .bk-Canvas canvas")
    explorer.first.wait_for(state="visible", timeout=60_000)
    moved.evaluate("e => e.closest('.jp-Cell').scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1500)
    page.screenshot(path=str(screenshot))
    return (
        f"max length {start_value} -> {end_value}: {before!r} -> {after!r}; "
        f"{canvases.count()} Bokeh canvases ({explorer.count()} in the explorer)"
    )
