"""The flashqla backend: FlashQLA's chunk gated delta rule (TileLang kernels, ``flash-qla`` on PyPI, the Qwen team's)
in every Gated DeltaNet layer, with fla's fused causal conv1d and gated RMSNorm around it, as the fla backend binds
them. FlashQLA takes fla's arguments (``q, k, v, g, beta``, ``use_qk_l2norm_in_kernel``, ``cu_seqlens``) and
returns the same pair; it runs on sm90 (Hopper), sm100/103 and sm120/121 only (its import raises elsewhere), in
bf16 or fp16. Where it cannot run, the fla backend is the fallback: its refusal says so.

Light at import: torch, flash_qla and fla load inside the functions.
"""

from __future__ import annotations

from typing import Any

from . import hybrid_paths as paths
from .fla import (
    FUSED_GATED_NORM,
    bf16_randn,
    delta_rule_hook,
    delta_rule_inputs,
    environment_facts,
    fla_delta_rule,
    fla_refusal,
    importable,
    use_fla,
    with_qk_norm,
)
from .spec import BackendUnavailable

FLASHQLA_BACKEND = "flashqla"  # the backend's name in the table (nbhelpers.kernels.registry)
FLASHQLA_PACKAGE = "flash_qla"
# The compute capabilities FlashQLA 0.1.3 builds for (flash_qla/ops/gated_delta_rule/chunk/__init__.py).
FLASHQLA_CAPABILITIES = ((9, 0), (10, 0), (10, 3), (12, 0), (12, 1))
FLASHQLA_CHECKS: dict[str, str] = {
    "flashqla_delta_rule": "every Gated DeltaNet layer calls FlashQLA's chunk_gated_delta_rule, which gets the "
    "packed row's cu_seqlens (read off the modeling module's hook)",
}
FALLBACK = "the fla backend (kernels='fla+liger') runs the delta rule in fla's Triton kernels instead"


def flashqla_refusal(facts: dict[str, Any], has_flashqla: bool) -> str:
    """Why FlashQLA cannot run here ('' when it can), from injected facts: fla's own refusal first (FlashQLA runs
    beside fla's convolution and norm), then the package and the GPU's compute capability."""
    if reason := fla_refusal(**facts):
        return reason
    if not has_flashqla:
        return f"missing package: flash-qla is not importable (pip install flash-qla); {FALLBACK}"
    capability = tuple(facts["capability"])
    if capability not in FLASHQLA_CAPABILITIES:
        built = ", ".join(f"sm{major}{minor}" for major, minor in FLASHQLA_CAPABILITIES)
        return f"FlashQLA is built for {built}; this GPU is sm{capability[0]}{capability[1]}: {FALLBACK}"
    return ""


def flashqla_status(device: str) -> str:
    """The backend's status function: '' when FlashQLA can run on ``device``, else why not."""
    return flashqla_refusal(environment_facts(device), importable(FLASHQLA_PACKAGE))


def flashqla_delta_rule() -> Any:
    """FlashQLA's chunk gated delta rule behind the reference's signature; cu_seqlens passed on."""
    from flash_qla import chunk_gated_delta_rule

    return delta_rule_hook(chunk_gated_delta_rule, paths.FLASHQLA_DELTA_RULE)


def use_flashqla(model: Any) -> None:
    """fla's fused convolution and gated RMSNorm bound into a hybrid (:func:`nbhelpers.kernels.fla.use_fla`), then
    FlashQLA's delta rule in place of fla's."""
    use_fla(model)
    paths.bind(paths.hybrid_modeling(model), "torch_chunk_gated_delta_rule", flashqla_delta_rule())


def apply_flashqla(model: Any, switches: tuple[str, ...], device: str) -> None:
    """The backend's apply function: the environment check first, then :func:`use_flashqla`."""
    if reason := flashqla_status(device):
        raise BackendUnavailable(reason)
    use_flashqla(model)


def flashqla_report(model: Any) -> dict[str, bool]:
    """Whether every Gated DeltaNet layer's delta rule is FlashQLA's and keeps a packed row's sequences apart."""
    rows = paths.linear_layers(model)
    return {
        "flashqla_delta_rule": bool(rows) and all(
            r["delta_rule"] == paths.FLASHQLA_DELTA_RULE and r["delta_rule_boundaries"] in paths.HONOURS_BOUNDARIES
            for r in rows
        )
    }  # fmt: skip


def requested_flashqla(switches: tuple[str, ...]) -> tuple[str, ...]:
    """The report keys the backend must see replaced: FlashQLA's delta rule, fla's convolution and gated norm."""
    return (*FLASHQLA_CHECKS, "fused_conv1d", FUSED_GATED_NORM)


def probe_flashqla(device: str) -> list[Any]:
    """FlashQLA's chunk gated delta rule against fla's, forward and backward, bf16, with the q/k L2 norm in the
    kernel as the model calls it (fla's own probe checks fla against transformers' reference)."""
    from .probes import NO_CUDA, compare_kernels, not_runnable

    if device != "cuda":
        return [not_runnable("flashqla chunk_gated_delta_rule", f"{NO_CUDA}: FlashQLA's TileLang kernels need an "
                             "sm90+ GPU")]  # fmt: skip
    if reason := flashqla_status(device):
        return [not_runnable("flashqla chunk_gated_delta_rule", reason)]
    import torch

    inputs = delta_rule_inputs(bf16_randn(device), 256, 128, torch.float32)  # g in fp32, as the model computes it
    ours, theirs = with_qk_norm(flashqla_delta_rule()), with_qk_norm(fla_delta_rule())
    return [compare_kernels("flashqla chunk_gated_delta_rule", ours, theirs, list(inputs), 5e-2, 5e-2)]
