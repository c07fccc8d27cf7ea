"""Shared pieces of the real-browser tests: find Chromium, launch it offline, run JupyterLab on loopback.

Chromium is the system one (Debian's package ``chromium``, or ``$CHROMIUM_PATH``), driven by the
``playwright`` Python package through ``executable_path``; Playwright's own browser download is never
used. JupyterLab runs on 127.0.0.1 with a random token, a free port, and its own temporary HOME,
config, data, runtime and settings folders, so nothing of the machine's Jupyter set-up leaks in.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO / "runs" / "browser"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# No GPU, no sandbox (root), and no background traffic: the machine's network is closed.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# JupyterLab user settings: every cell in the DOM (no windowing), no news or update checks.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


def find_chromium() -> str | None:
    """The Chromium executable: ``$CHROMIUM_PATH``, else the first of the usual names on PATH."""
    explicit = os.environ.get("CHROMIUM_PATH")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_or_skip() -> str:
    """The Chromium path, or skip the test saying how to get one."""
    import pytest

    path = find_chromium()
    if path is None:
        explicit = os.environ.get("CHROMIUM_PATH")
        names = ", ".join(CHROMIUM_NAMES)
        looked = f"CHROMIUM_PATH={explicit} is not a file" if explicit else f"none of {names} on PATH"
        pytest.skip(
            f"Chromium not found ({looked}): install it with `apt-get install -y chromium` (.ci/run does) "
            "or set CHROMIUM_PATH to a Chromium executable"
        )
    return path


@contextmanager
def browser_session(executable: str) -> Iterator[Any]:
    """A headless Chromium (Playwright sync API) on a fresh temporary profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_kernel_spec(jupyter_path: Path, python: str = sys.executable) -> Path:
    """A ``python3`` kernel spec that runs ``python`` (this interpreter, with nbhelpers importable)."""
    spec_dir = jupyter_path / "kernels" / "python3"
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (browser test)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    return spec_dir


class JupyterLab:
    """A JupyterLab server on loopback, started by :func:`jupyterlab_server`."""

    def __init__(self, root_dir: Path, port: int, token: str, process: subprocess.Popen, log: Path):
        self.root_dir, self.port, self.token, self.process, self.log = root_dir, port, token, process, log

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """A page URL with the token (``lab/tree/x.ipynb``)."""
        return f"{self.base_url}/{path.lstrip('/')}?token={self.token}"

    def api(self, path: str, method: str = "GET", timeout: float = 10.0) -> Any:
        """A REST call to the server (``api/sessions``); the decoded JSON, or None for an empty body."""
        request = urllib.request.Request(
            f"{self.base_url}/{path.lstrip('/')}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
            data=b"" if method == "POST" else None,
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_states(self) -> list[str]:
        """Execution state of every running kernel (``idle``, ``busy``, ``starting``)."""
        return [k.get("execution_state", "") for k in self.api("api/kernels")]

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@contextmanager
def jupyterlab_server(root_dir: Path, work: Path, env: dict[str, str] | None = None) -> Iterator[JupyterLab]:
    """Start JupyterLab serving ``root_dir``; all its state lives under ``work`` (a temporary folder).

    ``env`` adds variables for the server and, through it, the kernels (``NBHELPERS_RUNS`` ...).
    """
    home = work / "home"
    dirs = {
        "HOME": home,
        "JUPYTER_CONFIG_DIR": home / ".jupyter",
        "JUPYTER_DATA_DIR": home / ".local" / "share" / "jupyter",
        "JUPYTER_RUNTIME_DIR": work / "runtime",
        "JUPYTERLAB_SETTINGS_DIR": home / ".jupyter" / "lab" / "user-settings",
        "JUPYTERLAB_WORKSPACES_DIR": home / ".jupyter" / "lab" / "workspaces",
        "IPYTHONDIR": home / ".ipython",
        "MPLCONFIGDIR": home / ".matplotlib",
        "JUPYTER_PATH": work / "jupyter-path",
    }
    for folder in dirs.values():
        folder.mkdir(parents=True, exist_ok=True)
    for name, settings in LAB_SETTINGS.items():
        target = dirs["JUPYTERLAB_SETTINGS_DIR"] / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(settings))
    write_kernel_spec(dirs["JUPYTER_PATH"])

    full_env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_TOKEN", "JUPYTER_PREFER_ENV_PATH")}
    full_env.setdefault("NBHELPERS_CACHE", str(Path.home() / ".cache" / "nbhelpers"))  # reuse the tokenizer
    full_env.update({k: str(v) for k, v in dirs.items()})
    full_env.update({"PYTHONUNBUFFERED": "1", "JUPYTER_PLATFORM_DIRS": "1", **(env or {})})
    token = secrets.token_hex(16)
    log = work / "jupyterlab.log"
    process = None
    for _attempt in range(3):  # a port taken between free_port() and the bind: try another
        port = free_port()
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
            "--ServerApp.open_browser=False", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",
        ]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")  # CI machines run as root
        with log.open("w") as handle:
            process = subprocess.Popen(
                command, cwd=root_dir, env=full_env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )
        server = JupyterLab(root_dir, port, token, process, log)
        if _wait_ready(server, timeout=90):
            break
        _stop(server)
    else:
        raise RuntimeError(f"JupyterLab did not start on 127.0.0.1; its log:\n{server.log_tail()}")
    try:
        yield server
    finally:
        _stop(server)


def _wait_ready(server: JupyterLab, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            server.api("api/status", timeout=2)
            return True
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    return False


def _stop(server: JupyterLab) -> None:
    """Shut the server down through its API (kernels included), then make sure its process group is gone."""
    if server.process.poll() is None:
        try:
            for kernel in server.api("api/kernels", timeout=5):
                server.api(f"api/kernels/{kernel['id']}", method="DELETE", timeout=20)
            server.api("api/shutdown", method="POST", timeout=5)
        except (urllib.error.URLError, OSError, ValueError):
            pass
        try:
            server.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            server.process.wait(timeout=10)
            break
        except subprocess.TimeoutExpired:
            continue


def printable(path: Path) -> str:
    """A path as the test prints it: relative to the repo when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


class OfflineRoutes:
    """Keep a page off the network: loopback and local URLs pass, CDN files are served from disk, the rest aborts.

    HoloViews' ``hv.extension("bokeh")`` loads BokehJS and Panel's JS from their CDNs
    (cdn.bokeh.org, cdn.holoviz.org) unless told ``inline=True``. This machine has no internet, so the
    test answers those requests with the very same files from the installed bokeh and panel packages
    (same versions), as a connected browser would get them; every other outside request is aborted and
    listed in ``blocked``.
    """

    LOCAL_PREFIXES = ("http://127.0.0.1", "http://localhost", "file:", "data:", "blob:", "about:")

    def __init__(self, serve_cdn: bool = True) -> None:
        self.serve_cdn = serve_cdn
        self.served: list[str] = []
        self.blocked: list[str] = []
        self.passed: list[str] = []

    def attach(self, context: Any) -> OfflineRoutes:
        context.route("**/*", self._handle)
        return self

    def local_file(self, url: str) -> Path | None:
        """The installed file that a bokeh / panel CDN URL names, or None."""
        import urllib.parse

        parsed = urllib.parse.urlparse(url)
        parts = urllib.parse.unquote(parsed.path).lstrip("/").split("/")
        if parsed.hostname == "cdn.bokeh.org" and parts[:2] == ["bokeh", "release"] and len(parts) == 3:
            import bokeh

            name = parts[2]
            suffix = f"-{bokeh.__version__}.min.js"
            if name.endswith(suffix):
                path = Path(bokeh.__file__).parent / "server" / "static" / "js" / (name[: -len(suffix)] + ".min.js")
                return path if path.is_file() else None
        if parsed.hostname == "cdn.holoviz.org" and len(parts) > 3 and parts[0] == "panel" and parts[2] == "dist":
            import panel

            if parts[1] == panel.__version__:
                path = Path(panel.__file__).parent / "dist" / Path(*parts[3:])
                return path if path.is_file() else None
        return None

    def _handle(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(self.LOCAL_PREFIXES):
            self.passed.append(url)
            return route.continue_()
        local = self.local_file(url) if self.serve_cdn else None
        if local is not None:
            self.served.append(url)
            content_type = "text/css" if local.suffix == ".css" else "application/javascript"
            return route.fulfill(status=200, body=local.read_bytes(), headers={"Content-Type": content_type})
        self.blocked.append(url)
        return route.abort("internetdisconnected")


# Each h2 section of an exported notebook and what its code cells showed: text, and whether a table or a plot.
# Walked in document order (a markdown cell's h2 opens a section; each output after it belongs to it), so an
# output whose own HTML leaves an element open, and so nests the cells after it inside itself, moves nothing.
SECTIONS_JS = """() => {
  const sections = [];
  let current = null;
  for (const node of document.querySelectorAll('.jp-MarkdownCell h2, .jp-CodeCell .jp-OutputArea-output')) {
    if (node.tagName === 'H2') {
      current = {title: node.innerText.replace(/\\u00b6/g, '').trim(), outputs: []};
      sections.push(current);
      continue;
    }
    if (!current) continue;
    const text = node.innerText.trim();
    const table = !!node.querySelector('table');
    const plot = !!node.querySelector('[data-root-id], .bk-root, canvas, img, svg');
    const error = node.getAttribute('data-mime-type') === 'application/vnd.jupyter.stderr' && /Traceback/.test(text);
    if (text || table || plot) current.outputs.push({text: text.slice(0, 4000), table, plot, error});
  }
  return sections;
}"""
# Cells inside another cell's output: an output's HTML left an element open. The first such output's opening.
NESTED_CELLS_JS = """() => {
  const nested = document.querySelectorAll('.jp-Cell .jp-Cell');
  if (!nested.length) return '';
  const host = nested[0].parentElement.closest('.jp-OutputArea-output') || nested[0].parentElement.closest('.jp-Cell');
  return `${nested.length} cell(s) nested in an output; it begins: ${host.outerHTML.slice(0, 400)}`;
}"""


def notebook_as_html(executed: Path, folder: Path) -> Path:
    """An executed notebook exported to one HTML page (nbconvert's lab template), as a reader without Jupyter
    would open it: BokehJS inline in its outputs (a live run) or loaded from its CDN (a batch run)."""
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter(template_name="lab").from_filename(str(executed))
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / f"{executed.stem}.html"
    page.write_text(html, encoding="utf-8")
    return page


def open_offline(browser: Any, path: Path, errors: list[str], routes: OfflineRoutes | None = None) -> Any:
    """A page of ``path`` (file://) whose other requests go through ``routes``: by default every one is refused;
    ``OfflineRoutes()`` answers BokehJS's CDN from the installed packages. Page errors go into ``errors``."""
    routes = routes or OfflineRoutes(serve_cdn=False)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.on("pageerror", lambda error: errors.append(f"{path.name}: page error: {error}"))
    page.route("**/*", routes._handle)
    page.goto(path.resolve().as_uri(), wait_until="load")
    return page
