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
    assert master.dtype == torch.float32 and master[0].item() == pytest.approx(1 - 40e-4, rel=1e-4)
    assert weight.dtype == torch.bfloat16 and torch.equal(weight.detach(), master.detach().to(torch.bfloat16))
    assert optimizer.inner.state[master]["exp_avg"].dtype == torch.float32
    assert weight.grad is None and master.grad is None


def test_the_setting_picks_its_optimizer_and_bytes():
    params = [torch.nn.Parameter(torch.ones(2))]
    assert isinstance(make_optimizer(params, True, 1e-3, "cpu"), MasterWeightsAdamW)
    assert isinstance(make_optimizer(params, False, 1e-3, "cpu"), torch.optim.AdamW)
    assert PRECISIONS[MASTER_WEIGHTS].bytes_per_parameter == 2 + 4 + 4 + 8


@pytest.mark.parametrize("changes", [{"adapter": "lora"}, {"sharding": "fsdp2"}])
def test_refused_with_an_adapter_or_sharding(changes):
    with pytest.raises(ConfigError, match="dtype"):
        RunConfig(dtype=MASTER_WEIGHTS, **changes)
