"""TRL's peers on a quantized frozen base: QLoRA as TRL's docs set it up (a 4-bit NF4 load in bf16: NF4 linears, the
rest as loaded), refused for bases TRL does not load; the export's row takes the base the export writes."""

from __future__ import annotations

import dataclasses

import pytest

import nbhelpers.models.frozen_base as frozen_base
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import ENGINES, TRL_ENGINES
from nbhelpers.models.frozen_base import FROZEN_BASE_NAMES
from nbhelpers.validation import ConfigError


@pytest.mark.parametrize("engine", ["trl_defaults", "trl_best", "trl_packing"])
def test_the_trl_peers_take_qloras_base_and_nothing_else_quantized(engine):
    assert RunConfig(adapter="lora", engine=engine, frozen_base="nf4_bf16").frozen_base == "nf4_bf16"
    for base in ("nf4", "float8"):  # PEFT's k-bit upcast (TRL runs none) and float8 are not what TRL loads
        with pytest.raises(ConfigError, match=f"frozen_base='{base}'.*bf16, nf4_bf16 with engine='{engine}'"):
            RunConfig(adapter="lora", engine=engine, frozen_base=base)


def test_the_export_row_takes_every_base_the_export_writes():
    for base in FROZEN_BASE_NAMES:
        assert RunConfig(adapter="lora", engine="trl", frozen_base=base).frozen_base == base
    assert set(ENGINES["unsloth"].frozen_bases) == {"bf16", "nf4", "nf4_bf16"}
    assert all("bf16" in ENGINES[name].frozen_bases for name in TRL_ENGINES)


@pytest.mark.slow
def test_a_trl_peer_trains_on_the_quantized_base(monkeypatch, tmp_path):
    """NF4 stood in for (bitsandbytes may be missing here): the base is applied to the model SFTTrainer gets."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    from nbhelpers.measure import trl_loop

    applied = []

    def apply(model, device):
        applied.append(device)
        model.is_loaded_in_4bit = False  # a stand-in: SFTTrainer need not prepare a k-bit model here
        return model

    entry = dataclasses.replace(frozen_base.FROZEN_BASES["nf4_bf16"], status=lambda device: "", apply=apply)
    monkeypatch.setitem(frozen_base.FROZEN_BASES, "nf4_bf16", entry)
    config = RunConfig(adapter="lora", engine="trl_defaults", frozen_base="nf4_bf16", num_samples=4, batch_size=2,
                       max_length=64, device="cpu")  # fmt: skip
    tokenizer, rows = trl_loop.sft_rows(config)
    built = trl_loop.build_sft_trainer(config, str(tmp_path), tokenizer, rows, epochs=1)
    assert applied == ["cpu"]
    assert any("lora_A" in name for name, _ in built.trainer.model.named_parameters())


@pytest.mark.parametrize("base", FROZEN_BASE_NAMES)
def test_every_peer_row_of_a_workload_loads_the_base_its_tool_loads(base):
    """A workload on any base has its peers and its row without the workbook: the same base where the tool loads
    it, the same NF4 weights without PEFT's upcast for TRL, the base as built where the tool has no such format."""
    from nbhelpers.analysis.peers import peers_of
    from nbhelpers.analysis.references import without_workbook_config
    from nbhelpers.measure.engines import PEER_ENGINES, peer_base

    workload = RunConfig(adapter="lora", frozen_base=base)
    rows = [*peers_of(workload, "pick", ",".join(PEER_ENGINES), on_gpu=False), without_workbook_config(workload)]
    for row in rows:
        assert row.frozen_base in ENGINES[row.engine].frozen_bases
        assert row.frozen_base == peer_base(row.engine, base)
        assert (row.frozen_base == base) is (f"{row.frozen_base} base" not in row.label)  # a changed base is named
    expected = {"bf16": "bf16", "nf4": "nf4_bf16", "nf4_bf16": "nf4_bf16", "float8": "bf16"}
    assert peer_base("trl_defaults", base) == expected[base]


def test_only_the_workbook_and_its_export_run_the_fused_lora_forward():
    """A workload with LoRA's product in the GEMM: TRL from its export sets the model up so; TRL's defaults, its best
    flags and Unsloth run their own forward, and their records say PEFT's."""
    from nbhelpers.analysis.peers import peers_of
    from nbhelpers.analysis.references import without_workbook_config
    from nbhelpers.measure.engines import PEER_ENGINES

    workload = RunConfig(adapter="lora", lora_epilogue="fused")
    rows = [*peers_of(workload, "pick", ",".join(PEER_ENGINES), on_gpu=False), without_workbook_config(workload)]
    forwards = {row.engine: row.lora_epilogue for row in rows}
    assert forwards == {name: "fused" if name == "trl" else "peft" for name in PEER_ENGINES}
    assert {row.lora_epilogue for row in peers_of(RunConfig(adapter="lora"), "pick", "trl", on_gpu=False)} == {"peft"}
