"""Activation checkpointing of decoder layers: its modes (one table), the layers each recomputes, and its offloaded
form, where each recomputed layer's saved input waits in pinned host memory between its forward and its recompute.

Full checkpointing keeps one tensor per layer on the GPU through the step: the layer's input, tokens x hidden x 2
bytes (the 27B hybrid at 4,096 tokens: 64 layers, 2.5 GiB; at 16,384, 10 GiB). Under a small cap that is what bounds
the token budget, and a small budget leaves a 4-bit step host-bound (the 27B at 24 GiB: 29% of its traced step idle
at 4,096 tokens). ``"offload"`` recomputes every layer as ``"full"`` does and moves each layer's saved input to the
host (Unsloth's "unsloth" gradient checkpointing does the same), so the budget can grow into the freed memory.

How: saved-tensor hooks (``torch.autograd.graph.saved_tensors_hooks``) entered around each checkpointed layer's
checkpoint function (the layer's ``_gradient_checkpointing_func``, wrapped), outside the checkpoint. The checkpoint
saves the layer's input through them (torch's own hooks take over inside the checkpointed forward), so they see
exactly the inputs a recompute needs and nothing the layer saves. Not module hooks: transformers up to 5.17
checkpoints a layer's whole ``__call__``, so its module hooks run inside the checkpoint and would see every tensor
the layer saves (on an H100, transformers 5.17: 100 tensors a step of the 2-layer tiny preset, not 2); 5.2x
checkpoints ``forward`` and keeps them outside. The wrap is renewed before each forward of the decoder stack, since
a Trainer sets the checkpoint function again when it turns checkpointing on.
The copy to the host runs on a side stream (the forward does not wait for it). The backward asks for the inputs
in the reverse of the order they were saved, so when one is asked for, the copy back of the one saved before it
starts on a second side stream and runs under this layer's backward; a copy back that was not started so (the first
the backward asks for) runs on the compute stream, which waits for it. (On an H100, with each copy back made when
asked for, the 27B's profiled step at 12,288 tokens spent 291 ms of 4.26 s in copies and memsets, both directions and
all streams together.) So at most two inputs are on the GPU at once: the one being recomputed and the next. Saved
inputs under :data:`OFFLOAD_MIN_BYTES` (position tables, masks) and empty ones stay where they are. On a CPU the
"host copy" is a copy in host memory: the path runs, nothing is saved.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

OFFLOAD_MIN_BYTES = 1 << 20  # smaller saved inputs stay on the device: their copies would cost more than they free
OFFLOADER = "_nbhelpers_checkpoint_offload"  # the model's attribute holding its offloader (its counts)
RESTORED_INPUTS = 2  # offloaded inputs on the device at once: the one being recomputed and the next, prefetched
PREFETCH_VARIABLE = "NBHELPERS_OFFLOAD_PREFETCH"  # "0": each input copied back only when asked for (to compare)
PREFETCH_CHOICES = ("1", "0")


def prefetch_enabled() -> bool:
    """Whether this process prefetches offloaded inputs: ``NBHELPERS_OFFLOAD_PREFETCH``, "1" when unset; a bad value
    names the allowed."""
    import os

    value = os.environ.get(PREFETCH_VARIABLE, PREFETCH_CHOICES[0])
    if value not in PREFETCH_CHOICES:
        raise ValueError(f"{PREFETCH_VARIABLE}={value!r} is not allowed: one of {', '.join(PREFETCH_CHOICES)}")
    return value == "1"


@dataclass(frozen=True)
class Checkpointing:
    """One mode of activation checkpointing: what it recomputes and where it keeps the recomputed layers' inputs."""

    name: str
    description: str
    recomputes: str  # "none", "all" or "every_k" (layers 0, k, 2k, ...)
    offloads: bool = False  # the recomputed layers' inputs kept in host memory, not on the GPU


CHECKPOINTINGS: dict[str, Checkpointing] = {
    c.name: c
    for c in (
        Checkpointing("none", "every layer keeps its activations for backward", "none"),
        Checkpointing("full", "every layer recomputed in backward; each keeps its input on the GPU", "all"),
        Checkpointing("every_k", "layers 0, k, 2k, ... recomputed (k: checkpoint_every)", "every_k"),
        Checkpointing("offload", "every layer recomputed; each layer's input held in pinned host memory between its "
                      "forward and its recompute", "all", offloads=True),
    )
}  # fmt: skip
CHECKPOINTING_NAMES = tuple(CHECKPOINTINGS)


def recomputed_layers(num_layers: int, mode: str, every: int = 2) -> list[int]:
    """Indices of the decoder layers a mode recomputes in backward: none, all, or every ``every``-th (0, k, 2k, ...)."""
    entry = CHECKPOINTINGS.get(mode)
    if entry is None:
        raise ValueError(f"activation_checkpointing={mode!r} is not one of {', '.join(map(repr, CHECKPOINTINGS))}")
    if entry.recomputes == "all":
        return list(range(num_layers))
    if entry.recomputes == "every_k":
        return list(range(0, num_layers, every))
    return []


@dataclass(eq=False)
class _Offloaded:
    """A saved input moved to the host: its copy there, the device it returns to, and its copy back where one was
    started before the backward asked for it (with the event that marks the copy's end on a GPU)."""

    host: Any
    device: Any
    prefetched: Any = None
    ready: Any = None


class CheckpointOffload:
    """Saved-tensor hooks that keep each large saved input of a checkpointed layer in host memory until its
    recompute, and count what they moved."""

    def __init__(self, min_bytes: int = OFFLOAD_MIN_BYTES, prefetch: bool = True) -> None:
        self.min_bytes = min_bytes
        self.prefetch = prefetch
        self.packed_tensors = 0
        self.packed_bytes = 0
        self.prefetched_tensors = 0  # copies back started before the backward asked for them
        self._streams: dict[tuple[Any, str], Any] = {}
        self._saved: list[weakref.ref[_Offloaded]] = []  # in the order saved; a step's backward asks from the end

    def pack(self, tensor: Any) -> Any:
        """Start the tensor's copy to the host (pinned, on a side stream on a GPU); small and empty tensors stay as
        they are (torch up to 2.11 saves an empty placeholder beside each checkpoint's inputs)."""
        import torch

        size = tensor.numel() * tensor.element_size()
        if not size or size < self.min_bytes or tensor.device.type not in ("cuda", "cpu"):
            return tensor
        self.packed_tensors += 1
        self.packed_bytes += size
        if tensor.device.type == "cpu":
            packed = _Offloaded(tensor.detach().clone(), tensor.device)
        else:
            out = self._side_stream(tensor.device, "out")
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            out.wait_stream(torch.cuda.current_stream(tensor.device))  # the tensor is written before it is read
            with torch.cuda.stream(out):
                host.copy_(tensor, non_blocking=True)
            tensor.record_stream(out)  # its memory is not reused until the copy has read it
            packed = _Offloaded(host, tensor.device)
        self._saved = [ref for ref in self._saved if ref() is not None]  # a graph freed without its backward
        self._saved.append(weakref.ref(packed))
        return packed

    def unpack(self, packed: Any) -> Any:
        """The saved input back on its device: the copy started when the input after it was asked for, else one made
        now on the stream that asks; then the copy back of the input saved before it is started."""
        if not isinstance(packed, _Offloaded):
            return packed
        self._saved = [ref for ref in self._saved if ref() is not None and ref() is not packed]
        restored = self._take_prefetched(packed) if packed.prefetched is not None else self._copy_back(packed)
        previous = self._saved[-1]() if self.prefetch and self._saved else None
        if previous is not None and previous.prefetched is None:
            self._prefetch(previous)
        return restored

    def _copy_back(self, packed: _Offloaded) -> Any:
        import torch

        if packed.device.type == "cpu":
            return packed.host
        torch.cuda.current_stream(packed.device).wait_stream(self._side_stream(packed.device, "out"))
        return packed.host.to(packed.device, non_blocking=True)

    def _prefetch(self, packed: _Offloaded) -> None:
        """Start ``packed``'s copy back on the "in" side stream (on a CPU, mark the host copy as restored)."""
        import torch

        self.prefetched_tensors += 1
        if packed.device.type == "cpu":
            packed.prefetched = packed.host
            return
        restore = self._side_stream(packed.device, "in")
        restore.wait_stream(self._side_stream(packed.device, "out"))  # its copy out has ended
        with torch.cuda.stream(restore):
            packed.prefetched = packed.host.to(packed.device, non_blocking=True)
            packed.ready = torch.cuda.Event()
            packed.ready.record(restore)

    @staticmethod
    def _take_prefetched(packed: _Offloaded) -> Any:
        """The prefetched copy, once the compute stream has waited for it; a second unpack copies again."""
        import torch

        restored, ready = packed.prefetched, packed.ready
        packed.prefetched = packed.ready = None
        if ready is not None:
            compute = torch.cuda.current_stream(packed.device)
            compute.wait_event(ready)
            restored.record_stream(compute)  # made on the "in" stream, used and freed on the compute stream
        return restored

    def _side_stream(self, device: Any, direction: str) -> Any:
        import torch

        if (device, direction) not in self._streams:
            self._streams[device, direction] = torch.cuda.Stream(device)
        return self._streams[device, direction]


def checkpointing_layers(model: Any) -> list[Any]:
    """The modules transformers checkpoints (``GradientCheckpointingLayer``: decoder layers), under any wrapper."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def offload_checkpoints(model: Any, min_bytes: int = OFFLOAD_MIN_BYTES) -> CheckpointOffload:
    """Keep the saved input of each checkpointed layer of ``model`` in host memory from its forward to its recompute.

    Works on a model whose checkpointing is turned on before or after this call (a Trainer turns it on when it
    trains); a layer that is not checkpointing when it runs (evaluation, no gradients) is left alone. Returns the
    offloader (its counts), also kept on the model. Calling it again returns the same one."""
    if (existing := getattr(model, OFFLOADER, None)) is not None:
        return existing
    layers = checkpointing_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no transformers decoder layer (GradientCheckpointingLayer): "
                         "activation_checkpointing='offload' has nothing to offload")  # fmt: skip
    offload = CheckpointOffload(min_bytes, prefetch_enabled())

    def wrap_checkpoint_functions(*_: Any) -> None:
        for layer in layers:
            function = getattr(layer, "_gradient_checkpointing_func", None)
            if function is not None and getattr(function, OFFLOADER, None) is not offload:
                layer._gradient_checkpointing_func = _offloading(function, offload)

    wrap_checkpoint_functions()
    for stack in layer_stacks(model, layers):
        stack.register_forward_pre_hook(wrap_checkpoint_functions)
    setattr(model, OFFLOADER, offload)
    return offload


def _offloading(function: Any, offload: CheckpointOffload) -> Any:
    """``function`` (a checkpoint function) called with ``offload``'s saved-tensor hooks entered around it."""
    import functools

    import torch

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():  # nothing is saved for a backward that will not run
            return function(*args, **kwargs)
        with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
            return function(*args, **kwargs)

    setattr(call, OFFLOADER, offload)
    return call


def layer_stacks(model: Any, layers: list[Any]) -> list[Any]:
    """The modules that hold the decoder layers in a ``ModuleList`` child (the decoder stack, called each forward)."""
    import torch

    held = {id(layer) for layer in layers}
    return [module for module in model.modules()
            if any(isinstance(child, torch.nn.ModuleList) and any(id(m) in held for m in child)
                   for child in module.children())]  # fmt: skip


def offloaded_bytes(model: Any) -> int:
    """Bytes the model's offloader has moved to the host so far (0 without one)."""
    offload = getattr(model, OFFLOADER, None)
    return offload.packed_bytes if offload is not None else 0


def offload_prefetches(model: Any) -> int:
    """Copies back the model's offloader started before the backward asked for them so far (0 without one)."""
    offload = getattr(model, OFFLOADER, None)
    return offload.prefetched_tensors if offload is not None else 0
