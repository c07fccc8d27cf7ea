"""A configuration's padding setting as its step collates it: the strategy's fields and the kernels' token
multiple (float8's matmuls take token counts in multiples of 16)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.kernels.registry import BASELINE_BACKEND, token_multiple


def padding_settings_of(config: Mapping[str, Any]) -> PaddingSettings:
    """The padding setting of a configuration (a RunConfig's fields or a stored record's config), with the
    token multiple its kernel backend needs (:func:`~nbhelpers.kernels.registry.token_multiple`)."""
    settings = PaddingSettings.from_config(config)
    return settings.replace(token_multiple=token_multiple(str(config.get("kernels") or BASELINE_BACKEND)))


__all__ = ["padding_settings_of"]
