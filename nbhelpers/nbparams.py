"""Notebook parameters on Databricks: let job / widget values override the papermill-style constants.

A notebook's ``parameters`` cell holds typed constants (``RUN_NAME: str = "default"``). Papermill
overrides them by injecting a cell; Databricks passes job parameters as widgets instead. Calling
``apply_databricks_widgets(globals(), ["RUN_NAME", ...])`` right after the parameters cell creates a
text widget per name (default: the current value) and copies each widget's value back, converted to
the constant's type. Elsewhere (no ``dbutils``) it does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _convert(name: str, text: str, current: Any) -> Any:
    """A widget's text as the type of the parameter's current value."""
    try:
        if isinstance(current, bool):
            low = text.strip().lower()
            if low not in _TRUE | _FALSE:
                raise ValueError(text)
            return low in _TRUE
        if isinstance(current, int):
            return int(text)
        if isinstance(current, float):
            return float(text)
    except ValueError:
        kind = type(current).__name__
        raise ValueError(f"widget {name}={text!r} is not a valid {kind} (the parameter's type)") from None
    return text


def find_dbutils(globals_dict: MutableMapping[str, Any]) -> Any | None:
    """Databricks' ``dbutils`` from the notebook's globals, or None when not on Databricks."""
    dbutils = globals_dict.get("dbutils")
    return dbutils if dbutils is not None and hasattr(dbutils, "widgets") else None


def apply_databricks_widgets(
    globals_dict: MutableMapping[str, Any], names: Iterable[str], create: bool = True
) -> dict[str, Any]:
    """Override parameters from Databricks widgets; return the ones that changed (empty elsewhere).

    ``create`` makes a text widget for each name (default: the current value) so that a job's
    parameters and the notebook UI can set it.
    """
    dbutils = find_dbutils(globals_dict)
    if dbutils is None:
        return {}
    changed: dict[str, Any] = {}
    for name in names:
        if name not in globals_dict:
            raise KeyError(f"{name} is not a parameter of this notebook (not defined in its globals)")
        current = globals_dict[name]
        if create:
            try:
                dbutils.widgets.text(name, str(current), name)
            except Exception:  # the widget exists already (created by a job or an earlier run)
                pass
        try:
            text = dbutils.widgets.get(name)
        except Exception:  # no such widget: keep the notebook's value
            continue
        if text is None:
            continue
        value = _convert(name, str(text), current)
        if value != current:
            globals_dict[name] = value
            changed[name] = value
    return changed
