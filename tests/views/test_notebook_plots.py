"""Where a notebook's BokehJS comes from: inline when live, from its CDN in a batch run, or as the variable says."""

from __future__ import annotations

import pytest

from nbhelpers.measure.progress import PLAIN_BARS_VARIABLE
from nbhelpers.views.notebook_plots import PLOT_JS_VARIABLE, plot_js_mode


@pytest.mark.parametrize(
    ("batch", "chosen", "expected"),
    [(None, None, "inline"), ("1", None, "cdn"), ("1", "inline", "inline"), (None, "CDN", "cdn"), ("1", " ", "cdn")],
)
def test_mode_follows_the_run_and_the_variable(monkeypatch, batch, chosen, expected):
    for name, value in ((PLAIN_BARS_VARIABLE, batch), (PLOT_JS_VARIABLE, chosen)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert plot_js_mode() == expected


def test_a_bad_mode_names_the_variable_and_what_is_allowed(monkeypatch):
    monkeypatch.setenv(PLOT_JS_VARIABLE, "server")
    with pytest.raises(ValueError, match=r"NBHELPERS_PLOT_JS='server': allowed are inline, cdn"):
        plot_js_mode()
