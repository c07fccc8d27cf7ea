"""Notebook parameters overridden by Databricks widgets (``nbparams``)."""

from __future__ import annotations

import pytest

from nbhelpers.nbparams import apply_databricks_widgets


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
