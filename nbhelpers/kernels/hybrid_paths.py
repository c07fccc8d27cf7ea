"""What a hybrid (Gated DeltaNet) layer really calls: the kernel hooks of its modeling module, read and rebound.

transformers' hybrid modeling modules (Qwen3.5: ``modeling_qwen3_5``) call four module-level functions from
the Gated DeltaNet forward: ``torch_chunk_gated_delta_rule``, ``torch_recurrent_gated_delta_rule``,
``causal_conv1d_fn`` and ``causal_conv1d_update``. At import, ``use_kernel_func_from_hub_with_fallback``
binds each to a wrapper that calls flash-linear-attention / causal-conv1d when importable and the PyTorch
reference otherwise (only a warning says which); ``use_kernelized_func`` merely lists them for the hub's
``kernelize``. Where the ``kernels`` package is installed (a dependency of transformers from 5.25), that
wrapper is itself wrapped in a callable ``nn.Module`` the hub can replace; from 5.25 the wrapper also refuses
a packed row's boundaries when it would fall back to the reference. The forward looks the names up at call
time, so rebinding the module globals changes what every layer runs; :func:`layer_paths` reads it back off the
live module, layer by layer.

The reference path (:func:`use_reference`) is transformers' PyTorch code, which knows no sequence boundaries;
here it runs the delta rule and the convolution once per sequence when a packed row carries its boundaries
(``cu_seq_lens_q`` or ``seq_idx``): slow, but correct on any device. fla's kernels do not run in Triton's CPU
interpreter (fla 0.6.0's autotuner asks the Triton driver for the device and finds none), so this is the
CPU-correct path the contamination proof passes on.

Light at import: torch is imported inside the functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from nbhelpers.models.adapters import base_model_of
from nbhelpers.models.loading import modeling_module

DELTA_RULE_HOOKS = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
CONV_HOOKS = ("causal_conv1d_fn", "causal_conv1d_update")
HYBRID_HOOKS = DELTA_RULE_HOOKS + CONV_HOOKS
LINEAR_LAYER = "linear_attention"  # config.layer_types value of a Gated DeltaNet layer

# Implementation labels of the per-layer report.
TORCH = "torch reference"
FLA_DELTA_RULE = "fla chunk_gated_delta_rule"
FLASHQLA_DELTA_RULE = "FlashQLA chunk_gated_delta_rule"
FLA_CONV = "fla causal_conv1d"
CAUSAL_CONV1D_PACKAGE = "causal_conv1d package"
FLA_GATED_NORM = "fla FusedRMSNormGated"
OTHER = "other"
FLA_PACKAGE, CONV_PACKAGE = "fla", "causal_conv1d"  # top-level package names of the fused kernels
# How an implementation treats the boundaries of a packed row.
KEEPS_APART = "cu_seqlens"  # a fused kernel given the boundaries
PER_SEQUENCE = "one call per sequence"  # the reference run sequence by sequence
SEQ_IDX = "seq_idx"  # the causal-conv1d package, given seq_idx
IGNORES = "ignored"  # the boundaries never reach it, or it drops them: a packed row mixes
HONOURS_BOUNDARIES = (KEEPS_APART, PER_SEQUENCE, SEQ_IDX)

_ORIGINALS: dict[tuple[str, str], Any] = {}  # (modeling module, hook) -> what transformers bound at import


def hybrid_modeling(model: Any) -> Any | None:
    """The modeling module of a hybrid model (the one holding the four kernel hooks), or None."""
    module = modeling_module(model)
    return module if module is not None and all(hasattr(module, h) for h in HYBRID_HOOKS) else None


def original(modeling: Any, hook: str) -> Any:
    """What transformers bound to ``hook`` at import (remembered before the first rebinding)."""
    return _ORIGINALS.setdefault((modeling.__name__, hook), getattr(modeling, hook))


def bind(modeling: Any, hook: str, function: Any) -> None:
    """Rebind one hook of the modeling module for the whole process (the original is remembered)."""
    original(modeling, hook)
    setattr(modeling, hook, function)


def _closure_value(function: Any, name: str) -> Any | None:
    """The callable a function closes over under ``name``, or None."""
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    for free, cell in zip(names, getattr(function, "__closure__", None) or ()):
        if free == name and callable(cell.cell_contents):
            return cell.cell_contents
    return None


def hub_function(hook_object: Any) -> Any:
    """The function a ``kernels`` hub module made from a function calls (its class's ``forward`` closes over
    it); any other object as it is."""
    return _closure_value(getattr(type(hook_object), "forward", None), "func") or hook_object


def reference_function(modeling: Any, hook: str) -> Callable[..., Any]:
    """transformers' PyTorch reference behind a hook (the function its import-time wrappers wrap)."""
    return inspect.unwrap(hub_function(original(modeling, hook)))


def _accepted(function: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``function`` declares (all of them when it takes ``**kwargs``)."""
    parameters = inspect.signature(function).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in parameters}


def tag(function: Any, implementation: str, boundaries: str) -> Any:
    """Mark a function bound to a hook with what it is and how it treats a packed row's boundaries."""
    function.hybrid_implementation = implementation
    function.hybrid_boundaries = boundaries
    return function


def boundaries_of(cu_seqlens: Any = None, seq_idx: Any = None) -> list[int] | None:
    """Sequence start offsets plus the end ([0, a, a+b, ...]) from cu_seqlens or seq_idx; None without either."""
    if cu_seqlens is not None:
        return [int(x) for x in cu_seqlens.reshape(-1).tolist()]
    if seq_idx is not None:
        ids = seq_idx.reshape(-1).tolist()
        starts = [i for i in range(len(ids)) if i == 0 or ids[i] != ids[i - 1]]
        return starts + [len(ids)]
    return None


def _single_row(tensor: Any, what: str) -> None:
    if tensor.shape[0] != 1:
        raise ValueError(f"{what}: sequence boundaries need one packed row (batch size 1), got {tensor.shape[0]}")


def segmented_delta_rule(torch_rule: Callable[..., Any]) -> Callable[..., Any]:
    """The reference delta rule, run once per sequence of a packed row when ``cu_seqlens`` is given."""

    def delta_rule(query: Any, key: Any, value: Any, g: Any, beta: Any, *args: Any, cu_seqlens: Any = None,
                   initial_state: Any = None, output_final_state: bool = False, **kwargs: Any) -> Any:  # fmt: skip
        import torch

        options = _accepted(torch_rule, kwargs)
        if cu_seqlens is None:
            return torch_rule(query, key, value, g, beta, *args, initial_state=initial_state,
                              output_final_state=output_final_state, **options)  # fmt: skip
        _single_row(query, "delta rule")
        bounds = boundaries_of(cu_seqlens)
        outputs, states = [], []
        for index, (start, end) in enumerate(zip(bounds, bounds[1:])):
            state = initial_state[index : index + 1] if initial_state is not None else None
            out, last = torch_rule(
                *(t[:, start:end] for t in (query, key, value, g, beta)), *args,
                initial_state=state, output_final_state=output_final_state, **options,
            )  # fmt: skip
            outputs.append(out)
            states.append(last)
        final = torch.cat(states) if output_final_state and all(s is not None for s in states) else None
        return torch.cat(outputs, dim=1), final

    delta_rule.__wrapped__ = torch_rule  # type: ignore[attr-defined]
    return tag(delta_rule, TORCH, PER_SEQUENCE)


def segmented_conv(torch_conv: Callable[..., Any]) -> Callable[..., Any]:
    """The reference causal conv1d ([B, D, T]), run once per sequence when the row carries its boundaries."""

    def conv(hidden_states: Any, weight: Any, bias: Any = None, activation: str | None = None,
             cu_seq_lens_q: Any = None, seq_idx: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        import torch

        bounds = boundaries_of(cu_seq_lens_q, seq_idx)
        if bounds is None:
            return torch_conv(hidden_states, weight, bias, activation=activation)
        _single_row(hidden_states, "causal conv1d")
        pieces = [
            torch_conv(hidden_states[..., start:end], weight, bias, activation=activation)
            for start, end in zip(bounds, bounds[1:])
        ]
        return torch.cat(pieces, dim=-1)

    conv.__wrapped__ = torch_conv  # type: ignore[attr-defined]
    return tag(conv, TORCH, PER_SEQUENCE)


def use_reference(model: Any, keep_apart: tuple[str, ...] = ("delta_rule", "conv")) -> bool:
    """Bind transformers' PyTorch reference to every hook, even where it picked fla at import; False when the
    model is no hybrid (nothing to do).

    ``keep_apart`` names the parts ("delta_rule", "conv") that run a packed row sequence by sequence; a part
    left out gets the bare reference, which mixes the sequences of a packed row (a path for the contamination
    proof to catch, never for training).
    """
    modeling = hybrid_modeling(model)
    if modeling is None:
        return False
    unknown = set(keep_apart) - {"delta_rule", "conv"}
    if unknown:
        raise ValueError(f"keep_apart={keep_apart!r}: parts are 'delta_rule' and 'conv'")
    for hook in HYBRID_HOOKS:
        torch_function = reference_function(modeling, hook)
        if hook == "torch_chunk_gated_delta_rule" and "delta_rule" in keep_apart:
            function = segmented_delta_rule(torch_function)
        elif hook == "causal_conv1d_fn" and "conv" in keep_apart:
            function = segmented_conv(torch_function)
        else:
            function = tag(_bare(torch_function), TORCH, IGNORES)
        bind(modeling, hook, function)
    return True


def _bare(function: Callable[..., Any]) -> Callable[..., Any]:
    """The reference called with the keyword arguments it declares (boundaries dropped, as transformers does)."""

    def bare(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **_accepted(function, {k: v for k, v in kwargs.items() if k != "cu_seqlens"}))

    bare.__wrapped__ = function  # type: ignore[attr-defined]
    return bare


def _package_implementation(function: Any) -> Any:
    """The function a transformers kernel-hook wrapper calls (found in its closure), else the function."""
    function = hub_function(function)
    return _closure_value(function, "implementation") or function


def describe_hook(function: Any, part: str) -> tuple[str, str]:
    """(implementation, boundaries) of the function bound to a hook; ``part`` is "delta_rule" or "conv"."""
    if hasattr(function, "hybrid_implementation"):
        return function.hybrid_implementation, function.hybrid_boundaries
    target = _package_implementation(function)
    module = getattr(target, "__module__", "") or ""
    root = module.split(".")[0]
    if root == FLA_PACKAGE:
        return (FLA_DELTA_RULE, KEEPS_APART) if part == "delta_rule" else (FLA_CONV, KEEPS_APART)
    if root == CONV_PACKAGE:
        return CAUSAL_CONV1D_PACKAGE, SEQ_IDX  # given seq_idx by the packed row's collator
    if root == "transformers":
        return TORCH, IGNORES
    return f"{OTHER}: {module}.{getattr(target, '__qualname__', target)}", IGNORES


def _base_model(model: Any) -> Any:
    return getattr(model, getattr(model, "base_model_prefix", "model"), model)


def layer_paths(model: Any) -> list[dict[str, Any]]:
    """One row per decoder layer: its type, and what its delta rule, convolution and attention really run.

    Read off the live modeling module and each layer's modules, so a fallback transformers chose silently
    (or a hub kernel that replaced a layer's forward) shows; an adapter's wrapper (PEFT) is looked through.
    [] for a model that is no hybrid.
    """
    model = base_model_of(model)
    modeling = hybrid_modeling(model)
    if modeling is None:
        return []
    attention = getattr(model.config, "_attn_implementation", None) or "default"
    rule, rule_bounds = describe_hook(modeling.torch_chunk_gated_delta_rule, "delta_rule")
    conv, conv_bounds = describe_hook(modeling.causal_conv1d_fn, "conv")
    rows = []
    for index, layer in enumerate(getattr(_base_model(model), "layers", [])):
        row = {"layer": index, "type": getattr(layer, "block_type", ""), "delta_rule": "", "delta_rule_boundaries": "",
               "conv": "", "conv_boundaries": "", "gated_norm": "", "attention": ""}  # fmt: skip
        linear = getattr(layer, "linear_attn", None)
        if linear is not None:
            row["gated_norm"] = describe_norm(getattr(linear, "norm", None), modeling.__name__)
            forward = getattr(type(linear).forward, "__module__", "")
            if forward != modeling.__name__:  # a hub kernel replaced the whole layer
                row.update(delta_rule=f"{OTHER}: {forward}", conv=f"{OTHER}: {forward}")
                row.update(delta_rule_boundaries=IGNORES, conv_boundaries=IGNORES)
            else:
                row.update(delta_rule=rule, delta_rule_boundaries=rule_bounds, conv=conv, conv_boundaries=conv_bounds)
        if getattr(layer, "self_attn", None) is not None:
            config = getattr(layer.self_attn, "config", model.config)
            row["attention"] = getattr(config, "_attn_implementation", None) or attention
        rows.append(row)
    return rows


def describe_norm(norm: Any, modeling_name: str) -> str:
    """What a Gated DeltaNet layer's gated RMSNorm runs: transformers' PyTorch module, fla's fused one, other."""
    where = getattr(type(norm), "__module__", "")
    if where == modeling_name:
        return TORCH
    if where.split(".")[0] == FLA_PACKAGE:
        return FLA_GATED_NORM
    return f"{OTHER}: {where or type(norm).__name__}"


def linear_layers(model: Any) -> list[dict[str, Any]]:
    """The rows of :func:`layer_paths` for the Gated DeltaNet layers."""
    return [row for row in layer_paths(model) if row["delta_rule"]]


def layer_paths_frame(source: Any) -> Any:
    """:func:`layer_paths` as a DataFrame (notebook 02): one row per decoder layer. ``source`` is a model, a
    RunRecord (its ``metrics["layer_paths"]``, as the measured step stores them) or the rows themselves."""
    import pandas as pd

    if hasattr(source, "metrics"):
        rows = source.metrics.get("layer_paths") or []
    elif isinstance(source, list):
        rows = source
    else:
        rows = layer_paths(source)
    columns = ["layer", "type", "delta_rule", "delta_rule_boundaries", "conv", "conv_boundaries", "gated_norm",
               "attention"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def runs_reference(model: Any) -> bool:
    """Every Gated DeltaNet layer runs transformers' PyTorch reference (delta rule and convolution), keeping
    packed sequences apart."""
    rows = linear_layers(model)
    return bool(rows) and all(
        r["delta_rule"] == TORCH and r["conv"] == TORCH
        and r["delta_rule_boundaries"] in HONOURS_BOUNDARIES and r["conv_boundaries"] in HONOURS_BOUNDARIES
        for r in rows
    )  # fmt: skip


REFERENCE_CHECKS = {
    "reference_linear_attention": "every Gated DeltaNet layer calls transformers' PyTorch delta rule and causal "
    "conv1d, one call per sequence of a packed row (read off the modeling module's hooks)",
}


def reference_report(model: Any) -> dict[str, bool]:
    """The baseline's report key: whether the reference path really runs (False for a model that is no hybrid)."""
    return {"reference_linear_attention": runs_reference(model)}


def apply_reference(model: Any, switches: tuple[str, ...], device: str) -> None:
    """The baseline's apply function: a hybrid runs transformers' PyTorch reference whatever it picked at
    import (packed rows sequence by sequence); any other model is left as it is."""
    from .spec import BackendUnavailable

    if use_reference(model) and not runs_reference(model):
        raise BackendUnavailable("the reference path did not bind: " + repr(layer_paths(model)[:1]))
