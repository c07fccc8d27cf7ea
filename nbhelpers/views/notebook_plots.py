"""HoloViews' Bokeh extension in a notebook, loaded once, with BokehJS where the notebook needs it.

A live notebook gets BokehJS inside it, so its plots render offline. A notebook run in batch (run-all, the sweep,
the tests: :data:`~nbhelpers.measure.progress.PLAIN_BARS_VARIABLE`) is a saved file: inline, it would carry the
3 MB bundle twice (once for JupyterLab's HoloViews renderer, once as plain JavaScript), about 6 MB a notebook, and a
saved notebook is not trusted to run it anyway. There BokehJS comes from its CDN when the notebook is opened and
trusted, and the standalone report keeps every plot offline. ``NBHELPERS_PLOT_JS=inline|cdn`` overrides either.
"""

from __future__ import annotations

import os
from typing import Any

from nbhelpers.measure.progress import plain_bars
from nbhelpers.plotting import holoviews

PLOT_JS_VARIABLE = "NBHELPERS_PLOT_JS"
PLOT_JS_MODES = ("inline", "cdn")


def plot_js_mode() -> str:
    """``inline`` or ``cdn``: :data:`PLOT_JS_VARIABLE` when set, else ``cdn`` in a batch run and ``inline`` live."""
    chosen = os.environ.get(PLOT_JS_VARIABLE, "").strip().lower()
    if chosen and chosen not in PLOT_JS_MODES:
        raise ValueError(f"{PLOT_JS_VARIABLE}={chosen!r}: allowed are {', '.join(PLOT_JS_MODES)} (or unset)")
    return chosen or ("cdn" if plain_bars() else "inline")


def load_plotting() -> Any:
    """Load HoloViews' Bokeh extension into this notebook (BokehJS as :func:`plot_js_mode` says); returns ``hv``."""
    hv = holoviews()
    hv.extension("bokeh", inline=plot_js_mode() == "inline")
    return hv
