"""The Unsloth peer engine on a CPU: what it hands Unsloth for a workload, and its failed record, with the reason,
decided before any work when Unsloth is absent, on a CPU, for a model it does not load or for too little disk."""

from __future__ import annotations

import json
import os

import pytest

from nbhelpers.analysis.peers import parse_peers, peers_of
from nbhelpers.bench.frozen_bases import BUDGET_STEP, CAPS_GIB, MAX_BUDGET
from nbhelpers.bench.table import suite_named
from nbhelpers.measure import unsloth_loop, unsloth_setup
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import ENGINES, PEER_ENGINES, UNSLOTH_SITE_VARIABLE, EngineRefusal, site_env
from nbhelpers.measure.runner import run_config
from nbhelpers.measure.worker import failure_reason
from nbhelpers.validation import ConfigError

LORA = RunConfig(model="qwen3-tiny", adapter="lora", lora_rank=8, lora_alpha=24, lora_targets="all-linear",
                 batch_size=2, max_length=64, num_samples=4, padding="token_budget", token_budget=256, seed=7,
                 engine="unsloth", device="cpu")  # fmt: skip
QWEN3_LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def plan_of(config: RunConfig) -> unsloth_setup.UnslothPlan:
    return unsloth_setup.unsloth_plan(config.to_dict(), unsloth_setup.preset_shape(config.model))


def test_the_plan_keeps_the_workload_s_rank_alpha_targets_seed_and_bf16_base():
    plan = plan_of(LORA)
    assert (plan.peft["r"], plan.peft["lora_alpha"], plan.peft["random_state"]) == (8, 24, 7)
    assert sorted(plan.peft["target_modules"]) == sorted(QWEN3_LINEARS)
    assert plan.from_pretrained["load_in_16bit"] and not plan.from_pretrained["load_in_4bit"]
    assert plan.from_pretrained["dtype"] == "bfloat16" and not plan.from_pretrained["full_finetuning"]
    assert plan.from_pretrained["max_seq_length"] == plan.sft["max_length"] == 256  # the token budget, packed
    assert plan.sft["packing"] and plan.sft["optim"] == "adamw_8bit"
    assert plan.peft["use_gradient_checkpointing"] == plan.from_pretrained["use_gradient_checkpointing"] == "unsloth"
    assert (plan.peft["lora_dropout"], plan.peft["bias"]) == (0.0, "none")  # Unsloth's "optimized" settings
    assert set(plan.sources) <= set(plan.from_pretrained) | set(plan.peft) | set(plan.sft)


def test_the_plan_names_only_the_workload_s_targets_and_loads_4_bit_only_for_an_nf4_base():
    plan = plan_of(LORA.replace(lora_targets="q_proj,v_proj"))
    assert plan.peft["target_modules"] == ["q_proj", "v_proj"]
    nf4 = unsloth_setup.unsloth_plan(LORA.to_dict() | {"frozen_base": "nf4"}, unsloth_setup.preset_shape("qwen3-tiny"))
    assert nf4.from_pretrained["load_in_4bit"] and not nf4.from_pretrained["load_in_16bit"]


@pytest.mark.parametrize(
    ("changes", "model_type", "words"),
    [
        ({"adapter": "none"}, "qwen3", "adapter='none'"),
        ({"lora_targets": "q_proj,lm_head"}, "qwen3", "modules_to_save"),
        ({"dtype": "fp32"}, "qwen3", "dtype='fp32'"),
        ({"frozen_base": "float8"}, "qwen3", "frozen_base='float8'"),
        ({}, "gpt2", "model_type 'gpt2'"),
    ],
)
def test_a_workload_it_does_not_run_is_refused_with_the_setting_named(changes, model_type, words):
    assert words in unsloth_setup.workload_refusal(LORA.to_dict() | changes, model_type)


def test_both_model_families_are_ones_it_loads():
    for preset in ("qwen3-8b", "qwen3.5-2b", "qwen3.8-27b"):
        model_type = unsloth_loop.model_type_of_workload(preset)
        assert model_type in unsloth_setup.LOADERS
        assert not unsloth_setup.workload_refusal(LORA.replace(model=preset).to_dict(), model_type)


def test_a_folder_of_another_model_type_is_refused_before_unsloth_is_imported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    reason = unsloth_loop.refusal(LORA.replace(model=str(tmp_path)))
    assert "model_type 'llama'" in reason and "qwen3" in reason


def test_without_unsloth_the_reason_names_the_packages_and_the_site_variable():
    missing = unsloth_setup.missing_packages(lambda name: None if name in ("unsloth", "bitsandbytes") else object())
    assert missing == ["unsloth", "bitsandbytes"]
    reason = unsloth_setup.missing_refusal(missing, "")
    assert reason.startswith("missing package: unsloth, bitsandbytes") and UNSLOTH_SITE_VARIABLE in reason
    assert unsloth_setup.WHEELS_SCRIPT in reason and not unsloth_setup.missing_refusal([], "")


def test_broken_pins_are_named_with_what_unsloth_needs():
    needs = ["trl!=0.19.0,<=1.15.0,>=0.18.2", "transformers<=5.17.0,>=4.52.4", "mlx==0.32.4; sys_platform == 'darwin'"]
    found = unsloth_setup.pin_conflicts(needs, {"trl": "1.16.0", "transformers": "5.17.0"})
    assert len(found) == 1 and found[0].startswith("trl 1.16.0 (needs") and "<=1.15.0" in found[0]
    assert not unsloth_setup.pin_conflicts(needs, {"trl": "1.15.0", "transformers": "5.17.0"})


def ready(monkeypatch):
    """Unsloth's packages present and their pins kept (as on the GPU machine with its site folder)."""
    monkeypatch.setattr(unsloth_loop, "missing_packages", lambda: [])
    monkeypatch.setattr(unsloth_loop, "pin_refusal", lambda: "")


def test_on_a_cpu_it_is_refused_even_with_unsloth_present(monkeypatch):
    ready(monkeypatch)
    assert "CUDA GPU" in unsloth_loop.refusal(LORA)
    assert "CUDA GPU" in unsloth_setup.device_refusal("cpu") and not unsloth_setup.device_refusal("cuda")


def test_too_little_disk_for_the_preset_s_weights_is_refused(monkeypatch, tmp_path):
    ready(monkeypatch)
    monkeypatch.setenv("NBHELPERS_UNSLOTH_MODELS", str(tmp_path))
    monkeypatch.setattr("nbhelpers.machine.resolve_device", lambda device: "cuda")
    monkeypatch.setattr(unsloth_loop, "free_bytes", lambda folder: 2**30)
    reason = unsloth_loop.refusal(LORA.replace(model="qwen3-8b", device="auto"))
    need = unsloth_setup.save_need_bytes(unsloth_setup.preset_shape("qwen3-8b"))
    assert reason.startswith("disk:") and f"{need / 2**30:,.1f} GiB" in reason and str(tmp_path) in reason
    monkeypatch.setattr(unsloth_loop, "free_bytes", lambda folder: need)
    assert unsloth_loop.refusal(LORA.replace(model="qwen3-8b", device="auto")) == ""


def test_a_refusal_is_raised_before_unsloth_or_transformers_is_imported(monkeypatch):
    ready(monkeypatch)
    monkeypatch.setattr(unsloth_loop, "import_unsloth", lambda folder: pytest.fail("imported after a refusal"))
    with pytest.raises(EngineRefusal) as caught:
        unsloth_loop.measure_unsloth(LORA)
    assert failure_reason(caught.value) == str(caught.value).splitlines()[0]


def test_its_record_without_unsloth_is_failed_with_the_reason_in_a_fresh_process(runs_root):
    record = run_config(LORA)  # always its own process: Unsloth must be imported before transformers
    assert not record.ok and record.config["engine"] == "unsloth"
    assert record.reason.startswith("missing package: unsloth") and UNSLOTH_SITE_VARIABLE in record.reason


def test_its_site_folder_goes_first_on_its_own_pythonpath_only():
    unsloth, workbook = ENGINES["unsloth"], ENGINES["workbook"]
    assert unsloth.needs_fresh_process and not workbook.needs_fresh_process
    env = {UNSLOTH_SITE_VARIABLE: "/tmp/u", "PYTHONPATH": os.pathsep.join(["/tmp/site", "/tmp/u"])}
    assert site_env(unsloth, env) == {"PYTHONPATH": os.pathsep.join(["/tmp/u", "/tmp/site"])}
    assert site_env(workbook, env) == {} and site_env(unsloth, {"PYTHONPATH": "/tmp/site"}) == {}


def test_peer_rows_accept_unsloth_and_name_what_is_allowed():
    assert "unsloth" in PEER_ENGINES and "workbook" not in PEER_ENGINES
    assert parse_peers("trl_defaults, unsloth") == ["trl_defaults", "unsloth"]
    with pytest.raises(ConfigError, match="unsloth"):
        parse_peers("unsloht")
    (row,) = peers_of(LORA.replace(engine="workbook"), "pick", "unsloth", on_gpu=True)
    assert row.engine == "unsloth" and (row.num_samples, row.seed, row.lora_rank) == (4, 7, 8)


def test_a_peer_rows_label_says_how_that_tool_batches():
    # Unsloth and TRL's packing pack one row of the token budget a step; TRL's defaults pad batch x max_length rows
    workload = LORA.replace(engine="workbook")
    rows = {row.engine: row.label for row in peers_of(workload, "pick", "unsloth,trl_packing,trl_defaults", True)}
    assert rows["unsloth"].endswith(", budget 256") and rows["trl_packing"].endswith(", budget 256")
    assert rows["trl_defaults"].endswith(", b2x64")
    assert LORA.replace(label="").name.endswith(", budget 256/lora-r8-a24")


def test_the_8b_rehearsal_suite_puts_unsloth_beside_trl_and_the_pick_on_the_same_samples():
    rows = suite_named("qwen3-8b/lora-peers/unsloth").rows(None)
    assert [r.engine for r in rows] == ["workbook", "unsloth", "trl_defaults", "trl_best"]
    fields = ("model", "num_samples", "seed", "adapter", "lora_rank", "lora_targets", "token_budget", "gpu_memory_gib")
    workload = {tuple(getattr(r, name) for name in fields) for r in rows}
    pick = rows[0]
    assert workload == {("qwen3-8b", pick.num_samples, pick.seed, "lora", 16, "all-linear", pick.token_budget,
                         CAPS_GIB[0])}  # fmt: skip
    # the pick on an 80 GB card: a token budget the planner fits under its cap, a multiple of the budget step, at
    # least one full-length row and at most the uncapped row's 16k
    assert pick.max_length <= pick.token_budget <= MAX_BUDGET and pick.token_budget % BUDGET_STEP == 0
