"""The Cut Cross-Entropy backend: the lm head and the loss fused by ``cut_cross_entropy.linear_cross_entropy``.

CCE computes each position's log-sum-exp over the vocabulary in on-chip memory and the correct token's logit by
an indexed dot product, so neither the logits nor their gradient is ever stored whole. Unlike Liger's fused linear
cross-entropy it does not add into the whole output-weight gradient once per chunk.

Its gradient filter is off here (``filter_eps=None``, ``CCE_FILTER_EPS``): by default CCE's backward skips the
vocabulary blocks whose softmax entries all lie below 2^-12 (bf16's precision / 32). At random initialisation,
the presets' case, every entry of a 152k vocabulary is about 7e-6, so the filter drops all but the correct token's
term.

Even with the filter off, the published wheel's backward adds each vocabulary block's share of the hidden-state
gradient into a buffer of the hidden states' dtype (bf16): at a near-uniform softmax the small terms round away,
as the filter would have dropped them. Each token's gradient stays within about 2%, but the final norm's weight,
which sums them over every token, does not: on an H200 (2026-12-03) the Qwen3-1.7B shape's final-norm gradient
read 10.1% off eager's at the first step with the filter on and 10.1% with it off (8.7e-4 with Liger's
cross-entropy in the same compiled model), and the doctor's probe, which puts a norm weight before the head
(:func:`cce_probe_inputs`), reads 19.7% off and marks the path broken. With the filter on, CCE + regional compile's
loss over 50 steps on new batches ended 9.3% above eager's.

The published wheel (25.1.1) ships no transformers patch, so the causal LM's forward is replaced on the model
instance, in the manner of Liger's fused linear cross-entropy: in training, with labels, the base model's last
hidden states and the lm head's weight go to CCE and no logits are returned; otherwise the model's own forward
runs. It works for any causal LM with a base model and an lm head (Qwen3 and the Qwen3.5 hybrids alike). On a
CUDA GPU CCE runs its Triton kernels (``impl="cce"``); on a CPU, where Triton has no driver, its
``impl="torch_compile"`` reference (logits computed whole by Inductor): the CPU proves the patched loss path, not
the kernel's speed. Liger's cross-entropy switches must be off beside it (both replace the loss).
"""

from __future__ import annotations

import importlib.util
import types
from typing import Any

from .spec import BackendUnavailable

CCE_BACKEND = "cce"  # the backend's name in the table (nbhelpers.kernels.registry)
CCE_IMPLEMENTATIONS = {"cuda": "cce", "cpu": "torch_compile"}  # device type -> CCE's implementation
CCE_CHECKS = {
    "cut_cross_entropy": "model.forward is the workbook's Cut Cross-Entropy forward (lm head and loss fused by "
    "cut_cross_entropy.linear_cross_entropy; no logits in training)"
}
REPLACED_LIGER_SWITCHES = ("cross_entropy", "fused_linear_cross_entropy")  # Liger's loss kernels: off beside CCE
IGNORE_INDEX = -100  # the label of prompt and padding positions, as transformers' loss ignores them
CCE_FILTER_EPS = None  # CCE's gradient filter off (see the module's docstring)


def cce_status(device: str) -> str:
    """'' when Cut Cross-Entropy can run on ``device``, else why not (its package, or Triton on a GPU, missing)."""
    if importlib.util.find_spec("cut_cross_entropy") is None:
        return "missing package: cut-cross-entropy is not installed"
    if device not in CCE_IMPLEMENTATIONS:
        return f"Cut Cross-Entropy runs on {', '.join(CCE_IMPLEMENTATIONS)}, not {device}"
    if device == "cuda" and importlib.util.find_spec("triton") is None:
        return "missing package: triton is not installed, and Cut Cross-Entropy's kernels are Triton"
    return ""


def cut_loss(hidden: Any, weight: Any, labels: Any, shift_labels: Any, num_items: Any, impl: str) -> Any:
    """transformers' causal-LM loss (labels shifted, -100 ignored, mean or sum / ``num_items``) computed by CCE.

    Under autocast the hidden states and weight are cast to the autocast dtype, as the lm head's matmul would be.
    """
    import torch
    from cut_cross_entropy import linear_cross_entropy

    if shift_labels is None:
        shift_labels = torch.nn.functional.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    reduction = "mean" if num_items is None else "sum"
    targets = shift_labels.to(hidden.device).contiguous()
    loss = linear_cross_entropy(
        hidden, weight, targets, ignore_index=IGNORE_INDEX, reduction=reduction, filter_eps=CCE_FILTER_EPS, impl=impl
    )
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
    return loss


def _cce_forward_for(impl: str) -> Any:
    def cce_forward(self: Any, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        """The causal LM's forward with its loss computed by Cut Cross-Entropy in training (no logits)."""
        shift_labels = kwargs.pop("shift_labels", None)
        num_items = kwargs.pop("num_items_in_batch", None)
        if not self.training or (labels is None and shift_labels is None):
            given = (("shift_labels", shift_labels), ("num_items_in_batch", num_items))
            own = {key: value for key, value in given if value is not None}
            return type(self).forward(self, input_ids=input_ids, labels=labels, **kwargs, **own)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        kwargs.pop("logits_to_keep", None)
        outputs = getattr(self, self.base_model_prefix)(input_ids=input_ids, **kwargs)
        head = self.get_output_embeddings()
        loss = cut_loss(outputs.last_hidden_state, head.weight, labels, shift_labels, num_items, impl)
        return CausalLMOutputWithPast(
            loss=loss, logits=None, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )

    return cce_forward


def apply_cce(model: Any, switches: tuple[str, ...], device: str) -> None:
    """Bind the Cut Cross-Entropy forward to a model instance (CCE's Triton kernels on a GPU, its compiled
    reference on a CPU); refused where it cannot run, or where the lm head is not a plain linear layer (an
    adapter on it would be skipped: CCE reads its weight)."""
    import torch

    if why := cce_status(device):
        raise BackendUnavailable(why)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or not hasattr(model, getattr(model, "base_model_prefix", "")):
        raise BackendUnavailable(
            f"Cut Cross-Entropy needs a causal LM whose lm head is a plain nn.Linear (found {type(head).__name__}): "
            "it reads the head's weight, so an adapter on it would be skipped"
        )
    model.forward = types.MethodType(_cce_forward_for(CCE_IMPLEMENTATIONS[device]), model)


def cce_report(model: Any) -> dict[str, bool]:
    """Whether the model's forward is the Cut Cross-Entropy forward (see CCE_CHECKS)."""
    function = getattr(getattr(model, "forward", None), "__func__", None)
    patched = getattr(function, "__module__", "") == __name__ and getattr(function, "__name__", "") == "cce_forward"
    return {"cut_cross_entropy": patched}


def requested_cce(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report key Cut Cross-Entropy must see replaced."""
    return tuple(CCE_CHECKS)


PROBE_SHAPE = (2048, 256, 16384)  # tokens, hidden size, vocabulary of the doctor's probe
PROBE_HEAD_STD = 0.02  # a fresh lm head's scale: Qwen's initializer_range
PROBE_TOLERANCE = {"cuda": (2e-2, 2e-2, 2e-2), "cpu": (1e-4, 1e-5, 1e-4)}  # rtol, atol, norm_rtol (bf16 / fp32)
PROBE_INPUTS = ("the hidden states", "the final norm's weight", "the lm head", "the labels")  # as failures name them


def cce_probe_inputs(device: str, dtype: Any) -> list[Any]:
    """Hidden states, the final norm's weight, the lm head and labels in the presets' regime.

    The head is scaled like a fresh model's, so the softmax over 16,384 entries is near-uniform (each about 6e-5):
    a gradient filter would drop every entry. The norm weight's gradient sums each token's hidden-state gradient
    times its hidden state over 2,048 tokens, as the model's final norm does; the many small softmax terms add up
    there instead of cancelling, so a kernel that loses them (a filter, or sums in bf16 that round them away)
    shows in that gradient even where each token's own gradient is within 2%."""
    import torch

    tokens, hidden, vocab = PROBE_SHAPE
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(tokens, hidden, generator=generator).to(device, dtype)
    norm_weight = torch.ones(hidden).to(device, dtype)
    head = (torch.randn(vocab, hidden, generator=generator) * PROBE_HEAD_STD).to(device, dtype)
    labels = torch.randint(0, vocab, (tokens,), generator=generator).to(device)
    labels[:8] = IGNORE_INDEX  # prompt tokens: ignored by the loss
    return [x, norm_weight, head, labels]


def after_final_norm(loss: Any) -> Any:
    """``loss(hidden, weight, labels)`` fed the hidden states times the final norm's weight: the probe's function
    of (hidden, norm weight, head, labels)."""

    def probed(x: Any, norm_weight: Any, head: Any, labels: Any) -> Any:
        return loss(x * norm_weight, head, labels)

    return probed


def linear_cross_entropy_reference(hidden: Any, weight: Any, labels: Any) -> Any:
    """The lm head's matmul and PyTorch's cross-entropy: what CCE must equal, gradients included."""
    from .probes import cross_entropy_reference

    return cross_entropy_reference(hidden @ weight.t(), labels)


def probe_cce(device: str) -> list[Any]:
    """CCE's linear cross-entropy after a final norm's weight against the lm head's matmul and PyTorch's
    cross-entropy, forward and backward, each gradient also by its norm (:func:`cce_probe_inputs`): its Triton
    kernels in bf16 on a GPU, its torch.compile reference in fp32 on a CPU."""
    import torch
    from cut_cross_entropy import linear_cross_entropy

    from .probes import compare_kernels, not_runnable

    if why := cce_status(device):
        return [not_runnable("linear_cross_entropy", why)]
    impl = CCE_IMPLEMENTATIONS[device]
    inputs = cce_probe_inputs(device, torch.bfloat16 if device == "cuda" else torch.float32)

    def fused(h: Any, w: Any, y: Any) -> Any:
        return linear_cross_entropy(h, w, y, ignore_index=IGNORE_INDEX, filter_eps=CCE_FILTER_EPS, impl=impl)

    rtol, atol, norm_rtol = PROBE_TOLERANCE[device]
    name = f"linear_cross_entropy ({impl})"
    reference = after_final_norm(linear_cross_entropy_reference)
    return [compare_kernels(name, after_final_norm(fused), reference, inputs, rtol, atol, norm_rtol=norm_rtol,
                            input_names=PROBE_INPUTS)]  # fmt: skip
