"""Validation shared by every layer: a refused value raises :class:`ConfigError` naming the parameter.

The lowest layer of the package: it imports nothing from nbhelpers, so settings objects anywhere
(RunConfig, the padding settings, the tables) validate the same way with the same messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ConfigError(ValueError):
    """A parameter with a value outside what is allowed."""

    def __init__(self, parameter: str, value: Any, allowed: str) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        super().__init__(f"{parameter}={value!r} is not allowed: {parameter} must be {allowed}")


def check_int(name: str, value: Any, low: int, high: int) -> None:
    """An int (not a bool) from ``low`` to ``high``, else ConfigError."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(name, value, f"an integer from {low} to {high}")


def check_choice(name: str, value: Any, choices: Sequence[str]) -> None:
    """One of ``choices``, else ConfigError listing them."""
    if value not in choices:
        raise ConfigError(name, value, "one of " + ", ".join(repr(c) for c in choices))


def check_text(name: str, value: Any) -> None:
    """A non-empty string, else ConfigError."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, value, "a non-empty string")
