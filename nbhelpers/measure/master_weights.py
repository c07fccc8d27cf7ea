"""bf16 parameters stepped through fp32 master weights: AdamW on an fp32 copy, the result copied back in bf16.

PyTorch has no single-process master-weights optimizer; FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16)`` keeps
fp32 parameters as the master for its sharded path (``sharding="fsdp2"``), and torchao's bf16 optimizers use
stochastic rounding instead of a master copy. This wrapper is the single-process step's equivalent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class MasterWeightsAdamW:
    """AdamW (torch's own, fp32 moments) on fp32 master copies of bf16 parameters.

    ``step``: each bf16 gradient becomes the master's fp32 gradient (the bf16 one is freed at once), AdamW steps
    the masters, and the masters are copied back into the bf16 parameters by one foreach copy (a few
    multi-tensor kernels on a GPU instead of one per parameter).
    """

    def __init__(self, params: Iterable[Any], **adamw: Any) -> None:
        import torch

        self.params = [p for p in params if p.requires_grad]
        self.masters = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        self.inner = torch.optim.AdamW(self.masters, **adamw)

    def step(self) -> None:
        import torch

        with torch.no_grad():
            for param, master in zip(self.params, self.masters, strict=True):
                master.grad = None if param.grad is None else param.grad.float()
                param.grad = None
            self.inner.step()
            torch._foreach_copy_(self.params, self.masters)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for tensor in (*self.params, *self.masters):
            tensor.grad = None


def make_optimizer(params: Iterable[Any], master_weights: bool, lr: float, device: str) -> Any:
    """AdamW over the trained parameters, through fp32 master weights when the precision setting keeps them."""
    import torch

    options = {"lr": lr, "fused": device == "cuda", "foreach": device != "cuda"}
    return MasterWeightsAdamW(params, **options) if master_weights else torch.optim.AdamW(params, **options)
