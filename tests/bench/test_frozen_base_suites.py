"""The frozen-base suites: Qwen3-8B LoRA r16 once per base of the table, the bf16 base first (the parity reference),
the same samples and adapter in every row, and each row planned to fit one H200 with the quantized bases smaller."""

from __future__ import annotations

from nbhelpers.analysis.memory_plan import plan_memory, settings_from_config
from nbhelpers.bench.table import suites_under
from nbhelpers.models.families import model_shape, preset_config
from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES

SAME = ("model", "adapter", "lora_rank", "lora_targets", "num_samples", "seed", "batch_size", "max_length", "kernels")


def test_each_suite_runs_every_base_of_the_table_on_one_workload(tmp_path):
    suites = suites_under("qwen3-8b/frozen-base")
    assert [s.name.rsplit("/", 1)[-1] for s in suites] == ["plain", "best", "parity"]
    shape = model_shape(preset_config("qwen3-8b"))
    for suite in suites:
        rows = suite.rows(tmp_path)
        assert tuple(r.frozen_base for r in rows) == FROZEN_BASE_NAMES and FROZEN_BASE_NAMES[0] == "bf16"
        assert suite.parity == (suite.name != "qwen3-8b/frozen-base/best")  # best: judged by the parity suite
        first = rows[0].to_dict()
        assert all({k: r.to_dict()[k] for k in SAME} == {k: first[k] for k in SAME} for r in rows)
        planned = [plan_memory(shape, settings_from_config(r)) for r in rows]
        assert all(p.fits for p in planned)
        bf16, nf4, float8 = (p.parameters for p in planned)
        assert nf4 < float8 < bf16  # the stored base; NF4's fp32 activations can cost more than it saves
        assert planned[2].total < planned[0].total  # float8 keeps the bf16 activations
