"""HoloViews with its Bokeh backend, set up once for every plot module (imported lazily: holoviews is heavy)."""

from __future__ import annotations

from typing import Any


def holoviews() -> Any:
    """The ``holoviews`` module with the Bokeh backend registered and current."""
    import holoviews as hv
    import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend)

    if hv.Store.current_backend != "bokeh":
        hv.Store.set_current_backend("bokeh")
    return hv
