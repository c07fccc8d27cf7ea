"""The one parser of comma lists: notebook parameters, CLI options and grid values that name several things.

``"eager, liger"``, ``"[eager,liger]"`` (a bracketed value, as a sweep grid writes a list) and ``["eager", "liger"]``
all read as ``("eager", "liger")``. A refused value raises :class:`~nbhelpers.validation.ConfigError` naming the
parameter and what is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nbhelpers.validation import ConfigError


def _items(value: Any) -> list[str] | None:
    """The stripped, non-empty items of a comma list or a sequence, in order; None when ``value`` is neither."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]") and not any(c in text[1:-1] for c in "[]"):
            text = text[1:-1]  # one bracketed list, as a sweep grid writes it
        return [item.strip() for item in text.split(",") if item.strip()]
    if isinstance(value, (list, tuple)):
        return [str(item).strip() for item in value if str(item).strip()]
    return None


def parse_list(
    value: str | Sequence[Any], allowed: Sequence[str] | None = None, parameter: str = "value", *, empty: bool = False
) -> tuple[str, ...]:
    """``value`` as a tuple of names, each once, in the order given.

    ``allowed``: the names it may hold (None: any). ``empty``: whether no name at all is accepted. Anything else is
    a ConfigError naming ``parameter``, what it may hold and the names it does not know.
    """
    items = _items(value)
    names = tuple(dict.fromkeys(items or ()))
    unknown = [n for n in names if allowed is not None and n not in allowed]
    if items is None or unknown or not (names or empty):
        drawn = f" drawn from {', '.join(allowed)}" if allowed is not None else " of names"
        rule = ("'' or " if empty else "") + "a comma-separated list" + drawn
        if unknown:
            rule += f" (unknown: {', '.join(unknown)})"
        raise ConfigError(parameter, value, rule)
    return names
