"""bf16 parameters stepped through fp32 master weights: updates too small for bf16 accumulate in the master."""

import pytest
import torch

from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.master_weights import MasterWeightsAdamW, make_optimizer
from nbhelpers.models.precision import MASTER_WEIGHTS, PRECISIONS
from nbhelpers.validation import ConfigError


def test_small_updates_accumulate_in_the_fp32_master():
    weight = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    optimizer = MasterWeightsAdamW([weight], lr=1e-4, weight_decay=0.0)
    for _ in range(40):  # each AdamW step moves by ~lr = 1e-4, below bf16's spacing at 1.0 (7.8e-3)
        weight.grad = torch.ones_like(weight)
        optimizer.step()
        optimizer.zero_grad()
    master = optimizer.masters[0]
    # 40 fp32 additions near 1.0, each rounded by up to 2^-24: 40 * 2^-24 relative (measured 6.7e-7)
    assert master.dtype == torch.float32 and master[0].item() == pytest.approx(1 - 40e-4, rel=40 * 2**-24)
    assert weight.dtype == torch.bfloat16 and torch.equal(weight.detach(), master.detach().to(torch.bfloat16))
    assert optimizer.inner.state[master]["exp_avg"].dtype == torch.float32
    assert weight.grad is None and master.grad is None


def test_every_parameter_gets_its_master_back_in_bf16_whatever_its_shape():
    """The foreach copy-back: parameters of several shapes, one of them without a gradient (left as it was)."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(3, 5), (7,), (2, 2, 2)]
    params = [torch.nn.Parameter(torch.randn(s, generator=generator).bfloat16()) for s in shapes]
    before = [p.detach().clone() for p in params]
    optimizer = MasterWeightsAdamW(params, lr=0.1, weight_decay=0.0)  # moves past bf16's spacing below 8
    params[0].grad, params[2].grad = torch.ones_like(params[0]), -torch.ones_like(params[2])
    optimizer.step()
    for param, master in zip(params, optimizer.masters, strict=True):
        assert param.dtype == torch.bfloat16 and torch.equal(param.detach(), master.detach().to(torch.bfloat16))
    assert torch.equal(params[1].detach(), before[1])
    assert (params[0].detach() < before[0]).all() and (params[2].detach() > before[2]).all()


def test_the_setting_picks_its_optimizer_and_bytes():
    params = [torch.nn.Parameter(torch.ones(2))]
    assert isinstance(make_optimizer(params, True, 1e-3, "cpu"), MasterWeightsAdamW)
    assert isinstance(make_optimizer(params, False, 1e-3, "cpu"), torch.optim.AdamW)
    assert PRECISIONS[MASTER_WEIGHTS].bytes_per_parameter == 2 + 4 + 4 + 8


@pytest.mark.parametrize("changes", [{"adapter": "lora"}, {"sharding": "fsdp2"}])
def test_refused_with_an_adapter_or_sharding(changes):
    with pytest.raises(ConfigError, match="dtype"):
        RunConfig(dtype=MASTER_WEIGHTS, **changes)
