"""Settings checked against the model they apply to: what RunConfig alone cannot judge (it does not know the shape).

A LoRA rank above the model's hidden size (no adapted layer is wider: the rank adds parameters, not capacity) and a
``checkpoint_every`` above its decoder layers (only layer 0 would be recomputed) are refused before any work, with
the field, the value and what the model allows.
"""

from __future__ import annotations

from typing import Any

from nbhelpers.models.loading import is_local_model, model_config
from nbhelpers.validation import ConfigError

from .config import RunConfig


def text_config(model_config: Any) -> Any:
    """The decoder's config: a multimodal config's ``text_config``, else the config itself."""
    return getattr(model_config, "text_config", None) or model_config


def model_fit_error(config: RunConfig, model_config: Any) -> ConfigError | None:
    """Why ``config`` does not fit the model ``model_config`` describes, or None."""
    decoder = text_config(model_config)
    layers, width = getattr(decoder, "num_hidden_layers", None), getattr(decoder, "hidden_size", None)
    if config.activation_checkpointing == "every_k" and isinstance(layers, int) and config.checkpoint_every > layers:
        allowed = f"at most the model's {layers} decoder layers (every_k recomputes layers 0, k, 2k, ...)"
        return ConfigError("checkpoint_every", config.checkpoint_every, allowed)
    if config.adapter == "lora" and isinstance(width, int) and config.lora_rank > width:
        return ConfigError("lora_rank", config.lora_rank, f"at most the model's hidden size, {width}: no adapted "
                           "layer is wider, so a larger rank adds parameters and no capacity")  # fmt: skip
    return None


def check_local_model_fit(config: RunConfig) -> None:
    """Raise :func:`model_fit_error`'s refusal for a preset or a local folder (their config is read offline, at
    once); a hub model is checked where the measurement resolves it."""
    if not is_local_model(config.model):
        return
    if (error := model_fit_error(config, model_config(config.model))) is not None:
        raise error


__all__ = ["check_local_model_fit", "model_fit_error", "text_config"]
