"""Regional torch.compile: every decoder layer compiled on its own, one compiled graph shared by all of them.

As torchtune's ``compile_model`` and torchtitan's ``apply_compile`` do, each decoder layer's call is compiled
(``layer.compile``) instead of the whole model's. The layers run the same code on parameters of the same shapes,
so Dynamo compiles the first layer once and every other layer reuses that graph (parameters are graph inputs);
the embedding, the final norm, the lm head and the loss stay eager. Liger's patches (RoPE, RMSNorm, SwiGLU inside
the layers; the cross-entropy outside) are applied first and run inside the compiled layers (between graph pieces,
see below), which is how the two compose where compiling the whole model does not.

Shapes: the layers compile with ``dynamic=True``. The number of tokens (a packed row's length, a padded batch's
length), the number of packed sequences and the longest sequence are symbolic from the first compile, so a batch
of another length reuses the graph instead of recompiling (a size of 1, such as a packed batch's single row, is
specialized, as Dynamo always does; duck sizing is off, so sizes that happen to match are not tied together).
Liger 0.8.5 runs some kernels (RoPE, cross-entropy) through a dispatcher wrapped in ``torch.compiler.disable``, but
its RMSNorm and SwiGLU modules call their autograd Functions directly, and Dynamo cannot trace those (on an H200,
torch 2.11: ``AssertionError`` in ``overwrite_tensor_vt_proxy`` at the first RMSNorm; on a CPU it traces into the
Triton interpreter): :func:`opaque_kernel_functions` makes each of them, and fla's, a call Dynamo leaves to eager
autograd. So with Liger each layer's graph breaks around every Liger kernel (the pieces between are compiled and
shared by the layers the same way).

A hybrid (Qwen3.5/3.8: Gated DeltaNet and gated attention layers) has two kinds of decoder layer, so two graphs,
each shared by every layer of its kind. Its linear-attention core and causal convolution, the modeling module's
kernel hooks (fla's kernels, or the PyTorch reference that runs a packed row sequence by sequence), stay outside
the graphs (:func:`keep_hooks_eager`), as fla marks its own chunk function; what compiles is everything around them:
the projections with their LoRA scale and add, the gates, norms, residuals and the MLP.

With ``torch_varlen``, a packed row's boundaries are worked out once per
forward pass, outside the compiled layers (:func:`nbhelpers.kernels.varlen_attention.install_boundaries_hook`),
and reach the attention as ``cu_seq_lens_q``/``max_length_q``, so the layer's graph has no data-dependent step.
"""

from __future__ import annotations

from typing import Any

REGIONAL_BACKEND = "regional_compile"  # the backend's name in the table (nbhelpers.kernels.registry)
REGIONAL_CHECKS = {
    "regional_compile": "every decoder layer's layer.compile() set its compiled call (layer._compiled_call_impl) "
    "and the model itself is not compiled as a whole",
}
COMPILE_OPTIONS: dict[str, Any] = {"dynamic": True}  # lengths symbolic from the first compile: no recompile per batch


def decoder_layers_of(model: Any) -> list[Any]:
    """The decoder layers of a transformers causal LM (``model.model.layers``); [] when it has none."""
    inner = getattr(model, getattr(model, "base_model_prefix", "model"), model)
    return list(getattr(inner, "layers", []) or [])


class OpaqueFunction:
    """An autograd Function whose ``apply`` Dynamo does not trace (``torch.compiler.disable``): a graph break, the
    Function's own forward and backward kernels run as in eager mode. Other attributes are the Function's."""

    def __init__(self, function: Any) -> None:
        import torch

        self.function = function
        self.apply = torch.compiler.disable(function.apply)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.function, name)


# The modules whose globals the kernels' modules call: Liger's patched modules, fla's layers and ops.
KERNEL_MODULES = ("liger_kernel.transformers.", "fla.modules.", "fla.ops.")


def opaque_kernel_functions() -> list[str]:
    """Replace every autograd Function that an imported module of :data:`KERNEL_MODULES` holds as a global with an
    :class:`OpaqueFunction` (process-wide: every configuration runs in its own process); the names replaced."""
    import sys

    import torch

    replaced = []
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith(KERNEL_MODULES) or module is None:
            continue
        for name, value in list(vars(module).items()):
            if isinstance(value, type) and issubclass(value, torch.autograd.Function):
                setattr(module, name, OpaqueFunction(value))
                replaced.append(f"{module_name}.{name}")
    return replaced


def keep_hooks_eager(model: Any) -> list[str]:
    """Bind each kernel hook of a hybrid's modeling module to itself under ``torch.compiler.disable``, so that the
    compiled layers call it eagerly (a graph break); the hooks wrapped now ([] for a model that is no hybrid, or
    when they are wrapped already). What the per-layer report reads off each hook is kept (``functools.wraps``)."""
    import torch

    from .hybrid_paths import HYBRID_HOOKS, bind, hybrid_modeling

    modeling = hybrid_modeling(model)
    if modeling is None:
        return []
    wrapped = []
    for hook in HYBRID_HOOKS:
        function = getattr(modeling, hook)
        if not getattr(function, "_torchdynamo_disable", False):
            bind(modeling, hook, torch.compiler.disable(function))
            wrapped.append(hook)
    return wrapped


def compile_layers(model: Any) -> int:
    """Compile every decoder layer's call in place (``nn.Module.compile``, dynamic shapes); how many layers."""
    from .varlen_attention import install_boundaries_hook

    layers = decoder_layers_of(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} has no model.layers: regional compile needs its decoder layers")
    install_boundaries_hook(model)  # torch_varlen only: packed-row boundaries once per forward, outside the layers
    # No "duck sizing": a size that happens to equal another (sequences + 1 == heads) must not be assumed equal, or
    # the next batch recompiles. Process-wide; every configuration runs in its own process.
    from torch.fx.experimental import _config as shape_config

    shape_config.use_duck_shape = False
    opaque_kernel_functions()  # with Liger and fla applied first: their kernels run between the compiled pieces
    keep_hooks_eager(model)
    for layer in layers:
        layer.compile(**COMPILE_OPTIONS)
    return len(layers)


def apply_regional_compile(model: Any, switches: tuple[str, ...], device: str) -> None:
    """The table's apply function: every decoder layer compiled (on the first step), the rest eager."""
    compile_layers(model)


def regional_compile_report(model: Any) -> dict[str, bool]:
    """Whether every decoder layer has its compiled call set and the whole model has none."""
    layers = decoder_layers_of(model)
    every = bool(layers) and all(getattr(layer, "_compiled_call_impl", None) is not None for layer in layers)
    return {"regional_compile": every and getattr(model, "_compiled_call_impl", None) is None}


def requested_regional_compile(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report key regional compile must see set."""
    return tuple(REGIONAL_CHECKS)


def probe_regional_compile(device: str) -> list[Any]:
    """Two blocks of the same class compiled one by one (dynamic shapes) against eager on two lengths, forward and
    backward (fp32); fails when the second block or the second length compiled a graph of its own."""
    import torch
    import torch._dynamo.utils as dynamo_utils

    from .probes import FAIL, ProbeResult, compare_kernels, rms_norm_reference

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(64, generator=generator))
            self.proj = torch.nn.Linear(64, 64)

        def forward(self, x: Any) -> Any:
            return x + self.proj(rms_norm_reference(x, self.weight))

    generator = torch.Generator(device="cpu").manual_seed(0)
    blocks = [Block().to(device) for _ in range(2)]
    compiled = [Block().to(device) for _ in range(2)]
    for block, twin in zip(blocks, compiled):
        twin.load_state_dict(block.state_dict())
        twin.compile(**COMPILE_OPTIONS)
    before = dynamo_utils.counters["stats"]["unique_graphs"]
    results = []
    for length in (24, 40):
        x = torch.randn(1, length, 64, generator=generator).to(device)
        results.append(compare_kernels(f"regional compile, {length} tokens", lambda a: compiled[1](compiled[0](a)),
                                       lambda a: blocks[1](blocks[0](a)), [x], 1e-4, 1e-5))  # fmt: skip
    graphs = dynamo_utils.counters["stats"]["unique_graphs"] - before
    if graphs > 1:
        results.append(ProbeResult("regional compile reuse", FAIL, f"{graphs} graphs for 2 blocks x 2 lengths"))
    return results
