"""A model built on the host for a device that holds it only with its frozen base quantized (a 27B with an NF4 base
under a 24 GiB cap, :func:`nbhelpers.models.loading.stages_on_host`): the frozen base moves each linear to the device
as it quantizes it, then the rest of the model.

A preset's linear weights (nearly all of a 27B's) are not drawn on the host there: construction runs under
transformers' ``no_init_weights`` (the weights stay unwritten, so the host commits no memory for them), the other
modules (embeddings, norms, the linear-attention gates) are drawn on the host at once, so that a kernel that copies
one before the model moves (fla's fused gated norm) copies drawn values, and each linear is drawn on the device as
it arrives there, by the model's own initialisation (``_init_weights``). On the host, ``normal_`` runs on one core
at about 0.2 billion values a second: a 27B spent over eight minutes building there (and would need 54 GB of host
memory, more than a Colab machine has). A model whose weights were loaded (a folder) is copied over instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# The device a host build was made for (models.loading); the frozen base moves the model there.
STAGED_DEVICE = "_nbhelpers_staged_device"
# Set on a model whose weights were left unwritten at construction: each module's are drawn on the device.
UNDRAWN = "_nbhelpers_undrawn"


def _no_init_weights() -> Any:
    """transformers' context that leaves a model's weights unwritten at construction, None where it has none."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights  # transformers 4
        except ImportError:
            return None
    return no_init_weights


@contextlib.contextmanager
def undrawn_weights() -> Iterator[bool]:
    """Construct a model inside this with its weights left unwritten; yields whether they are (False where
    transformers has no such switch: then they are drawn on the host as usual)."""
    switch = _no_init_weights()
    if switch is None:
        yield False
        return
    with switch():
        yield True


def stage(model: Any, device: str) -> Any:
    """A model built on the host for ``device``: the frozen base moves each linear over as it quantizes it."""
    setattr(model, STAGED_DEVICE, device)
    return model


def mark_undrawn(model: Any, device: str) -> Any:
    """A model constructed inside :func:`undrawn_weights`, staged for ``device``: every module but its plain linears
    drawn here now (children before their parents, as transformers draws them), the linears left for the device."""
    import torch

    for module in model.modules():
        module._is_hf_initialized = False
    with torch.no_grad():
        for module in reversed(list(model.modules())):
            if type(module) is not torch.nn.Linear:
                model._initialize_weights(module)
    setattr(model, UNDRAWN, True)
    return stage(model, device)


def is_undrawn(model: Any) -> bool:
    """Whether the model's weights are still to be drawn (:func:`mark_undrawn`)."""
    return bool(getattr(model, UNDRAWN, False))


def module_to(model: Any, module: Any, device: str) -> Any:
    """``module`` of ``model`` on ``device``: allocated there and its weights drawn by the model's initialisation
    when the model was built undrawn, else copied."""
    import torch

    if not is_undrawn(model):
        return module.to(device)
    module.to_empty(device=device)
    with torch.no_grad():
        for each in module.modules():
            model._initialize_weights(each)
    return module


def linear_slots(model: Any) -> list[tuple[Any, str]]:
    """Where the model's plain ``nn.Linear`` layers sit, but its lm head: (parent module, attribute name) pairs. The
    linears themselves are not held, so a quantizer that swaps them one at a time frees each original as it is
    replaced (a list of the modules would keep every replaced weight alive to the end: 54 GB of bf16 for the 27B on
    a 24 GiB device)."""
    import torch

    head = model.get_output_embeddings()
    return [
        (parent, name) for parent in model.modules() for name, child in parent.named_children()
        if type(child) is torch.nn.Linear and child is not head
    ]  # fmt: skip


def rest_to(model: Any, device: str) -> Any:
    """A staged model, its quantized linears already on ``device``: the rest moved there too. An undrawn model's
    linears the base left as they were (the head, those its format skips) are then drawn there, every module not
    drawn yet (modules made after the build, from drawn ones, count as drawn), and tied weights tied again."""
    import torch

    undrawn = is_undrawn(model)
    for attribute in (STAGED_DEVICE, UNDRAWN):
        if hasattr(model, attribute):
            delattr(model, attribute)
    model = model.to(device)
    if not undrawn:
        return model
    for module in model.modules():
        if "_is_hf_initialized" not in vars(module):  # made after the build, from a drawn layer (a quantized linear)
            module._is_hf_initialized = True
    with torch.no_grad():
        if hasattr(model, "initialize_weights"):
            model.initialize_weights()  # every module not drawn yet (transformers 5)
        else:
            model.apply(model._initialize_weights)
    model.tie_weights()
    return model


__all__ = [
    "STAGED_DEVICE", "UNDRAWN", "is_undrawn", "linear_slots", "mark_undrawn", "module_to", "rest_to", "stage",
    "undrawn_weights",
]
