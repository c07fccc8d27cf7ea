"""LoRA outside the workbook's own step: TRL's SFTTrainer as a peer row with the same adapter, and the monitor
counting a PEFT model's FLOPs with the formula the step records use."""

from __future__ import annotations

import pytest
import torch

from nbhelpers.analysis.records import group_key
from nbhelpers.kernels.registry import cpu_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.metrics import model_flops
from nbhelpers.models.adapters import AdapterSettings, shape_counts, wrap_model
from nbhelpers.models.families import model_shape
from nbhelpers.models.linears import lora_parameters
from nbhelpers.models.loading import build_model
from nbhelpers.monitor import Monitor

TINY_LORA = RunConfig(
    run_name="lora-peers", num_samples=4, batch_size=2, max_length=128, timing="epoch", padding="packed",
    adapter="lora", lora_rank=4, lora_alpha=8, extra={"parity_probe_samples": 0},
)  # fmt: skip


def _padded(lengths: list[int], width: int) -> dict:
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.arange(1, n + 1)
        mask[row, :n] = 1
        labels[row, 1:n] = ids[row, 1:n]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def test_the_monitor_counts_a_peft_model_as_the_step_records_do(runs_root):
    model = wrap_model(build_model("qwen3-tiny", "sdpa", seed=0), AdapterSettings("lora", 4, 8))
    shape = model_shape(model.config)
    counts = shape_counts(shape, AdapterSettings("lora", 4, 8))
    monitor = Monitor("lora-monitor", model=model, log_every=1, peak_flops=1e12)
    batch = _padded([20, 32], 32)
    with monitor.step(batch) as step:
        model(**batch).loss.backward()
    assert step.logs["frozen_parameters"] == counts.frozen_matmul
    assert step.logs["adapter_parameters"] == counts.adapter_matmul == lora_parameters(shape, 4)
    want = model_flops(shape, [20, 32], counts.frozen_matmul, counts.adapter_matmul)
    assert step.logs["model_flops"] == pytest.approx(want)
    assert want < model_flops(shape, [20, 32])  # the frozen base's weight gradients are not done


@pytest.mark.slow
def test_a_trl_peer_row_trains_the_same_adapter(runs_root):
    """SFTTrainer given the adapter's peft_config: the same workload as the workbook's LoRA step, adapters only."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    from nbhelpers.measure.runner import run_configs

    workbook, trl = run_configs(
        [TINY_LORA, TINY_LORA.replace(engine="trl", label="trl lora")], isolate=False, progress=False
    )
    assert workbook.ok and trl.ok, trl.reason
    assert group_key(workbook) == group_key(trl)
    for record in (workbook, trl):
        assert record.metrics["trainable_parameters"] == record.metrics["adapter_parameters"] > 0
        assert record.metrics["frozen_matmul_parameters"] > 0
    assert trl.metrics["trainable_parameters"] == workbook.metrics["trainable_parameters"]
    assert trl.metrics["timed_real_tokens"] == workbook.metrics["timed_real_tokens"]
    assert trl.metrics["model_flops_per_step"] == pytest.approx(workbook.metrics["model_flops_per_step"])
    # the same first step through another loop: the baseline's cpu_tolerance (spec.SAME_KERNELS_CPU says why)
    assert trl.metrics["losses"][0] == pytest.approx(workbook.metrics["losses"][0], rel=cpu_tolerance("eager").rel)
