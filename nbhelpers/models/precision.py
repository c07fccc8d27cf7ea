"""Weights and optimizer precision: the table of the step's dtype settings (RunConfig.dtype), what each keeps
per trained parameter and how the step applies it. The memory planner reads its bytes; the step its flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """One dtype setting: what it means, bytes per trained parameter by part, and how the step applies it."""

    name: str
    meaning: str
    weight_bytes: int  # the model's parameters
    grad_bytes: int  # gradients at the optimizer step
    master_bytes: int  # an fp32 master copy of the weights (0: none)
    moment_bytes: int  # AdamW's two moments together
    bf16_weights: bool  # the model is built in bf16
    autocast: bool  # the forward runs under bf16 autocast
    applied_by: str

    @property
    def bytes_per_parameter(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.master_bytes + self.moment_bytes


MASTER_WEIGHTS = "bf16-master"
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "fp32 weights, fp32 compute", 4, 4, 0, 8, False, False, "the model as built"),
        Precision("bf16-autocast", "fp32 weights, bf16 compute under autocast (every weight cast each use)",
                  4, 4, 0, 8, False, True, "torch.autocast(dtype=bfloat16) around the forward"),
        Precision("bf16", "pure bf16: bf16 weights, gradients and AdamW moments (no fp32 copy)", 2, 2, 0, 4,
                  True, False, "the model built in bf16; torch.optim.AdamW keeps its moments in bf16"),
        Precision(MASTER_WEIGHTS, "bf16 weights and compute; an fp32 master copy and fp32 AdamW moments take the "
                  "step (each bf16 gradient is copied to fp32 and freed)", 2, 4, 4, 8, True, False,
                  "nbhelpers.measure.master_weights.MasterWeightsAdamW over the bf16 model"),
    )
}  # fmt: skip
