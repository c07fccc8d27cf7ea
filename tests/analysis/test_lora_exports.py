"""A LoRA recommendation exports PEFT's LoraConfig: the Trainer export wraps the model with get_peft_model, the TRL
export hands SFTTrainer ``peft_config=``; both are built on a CPU from the exported code and train adapters only."""

from __future__ import annotations

import pytest

from nbhelpers.analysis.recommend import recommend
from nbhelpers.data.loading import load_examples
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.models.loading import build_model, model_source

pytest.importorskip("accelerate", reason="Trainer needs accelerate>=1.1")
datasets = pytest.importorskip("datasets", reason="the exports' train_dataset is a datasets.Dataset")
peft = pytest.importorskip("peft")
torch = pytest.importorskip("torch")

CPU = {"device_name": "cpu", "hostname": "ci", "device_type": "cpu"}
LORA = {"adapter": "lora", "lora_rank": 4, "lora_alpha": 8, "lora_targets": "q_proj,v_proj,mlp.down_proj"}
MAX_LENGTH = 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A saved tiny model with its tokenizer, and 6 tokenized samples of the default data."""
    folder = tmp_path_factory.mktemp("tiny-lora-model")
    tokenizer = load_tokenizer(model_source("qwen3-tiny"))
    build_model("qwen3-tiny", "sdpa", 0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    examples = load_examples("default", tokenizer, 6, MAX_LENGTH)
    return folder, [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples]


def _recommendation(make_record, padding: str = "packed"):
    record = make_record(
        "lora best", 300.0, padding=padding, batch_size=2, max_length=MAX_LENGTH, model="qwen3-tiny",
        liger_kernels=[], **LORA, **CPU,
    )  # fmt: skip
    return recommend([record])


def _namespace(rec, folder, rows, tmp_path, monkeypatch) -> dict:
    """The exported model code, run with the model id pointed at the saved tiny model."""
    monkeypatch.chdir(tmp_path)  # output_dir="outputs" lands here
    code = rec.model_code()
    line = next(x for x in code.splitlines() if x.startswith("MODEL_ID = "))
    namespace: dict = {}
    exec(compile(code.replace(line, f"MODEL_ID = {str(folder)!r}"), "<model>", "exec"), namespace)
    namespace["train_dataset"] = datasets.Dataset.from_list(rows)
    return namespace


def _run(code: str, namespace: dict) -> None:
    exec(compile(code, "<exported>", "exec"), namespace)


def _trains_adapters_only(trainer) -> None:
    model = trainer.model
    assert isinstance(model, peft.PeftModel)
    trained = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trained and all("lora_A" in name or "lora_B" in name for name in trained)
    assert {name.split(".")[-4] for name in trained} == {"q_proj", "v_proj", "down_proj"}
    assert model.peft_config["default"].r == 4 and model.peft_config["default"].lora_alpha == 8
    batch = next(iter(trainer.get_train_dataloader()))
    loss = model(**{k: v for k, v in batch.items() if k != "num_items_in_batch"}).loss
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_the_trainer_export_wraps_the_model_with_get_peft_model(make_record, tiny, tmp_path, monkeypatch):
    folder, rows = tiny
    rec = _recommendation(make_record)
    assert "get_peft_model(model, peft_config" in rec.trainer_code()
    namespace = _namespace(rec, folder, rows, tmp_path, monkeypatch)
    _run(rec.training_arguments_code(), namespace)
    _run(rec.trainer_code(), namespace)
    _trains_adapters_only(namespace["trainer"])


def test_the_trl_export_passes_peft_config_to_sft_trainer(make_record, tiny, tmp_path, monkeypatch):
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    folder, rows = tiny
    rec = _recommendation(make_record)
    assert "peft_config=peft_config" in rec.sft_trainer_code()
    namespace = _namespace(rec, folder, rows, tmp_path, monkeypatch)
    _run(rec.sft_config_code(), namespace)
    _run(rec.sft_trainer_code(), namespace)
    _trains_adapters_only(namespace["trainer"])


def test_the_recommendation_names_its_adapter(make_record):
    rec = _recommendation(make_record)
    assert rec.peft_config_kwargs() == {
        "r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "mlp.down_proj"], "lora_dropout": 0.0,
        "bias": "none", "task_type": "CAUSAL_LM",
    }  # fmt: skip
    assert rec.to_dict()["peft_config"] == rec.peft_config_kwargs()
    assert "# Or with TRL (pip install trl), on a freshly loaded model:" in rec.to_python()
    full = recommend([make_record("full", 300.0, model="qwen3-tiny", **CPU)])
    assert full.peft_config_kwargs() is None and "peft" not in full.to_python()
    assert "freshly loaded" not in full.to_python()


def test_a_lora_export_loads_a_bf16_base_on_a_gpu(make_record):
    gpu = {"device_name": "NVIDIA H200", "hostname": "gpu-01", "device_type": "cuda"}
    lora = recommend([make_record("lora", 300.0, model="qwen3-tiny", **LORA, **gpu)])
    assert lora.from_pretrained_kwargs()["dtype"] == "bfloat16"  # the frozen base, as measured
    assert lora.training_arguments_kwargs()["bf16"] is True  # autocast over the fp32 adapters
    full = recommend([make_record("full", 300.0, model="qwen3-tiny", **gpu)])
    assert "dtype" not in full.from_pretrained_kwargs()  # fp32 weights under bf16 autocast
    cpu = recommend([make_record("lora", 300.0, model="qwen3-tiny", **LORA, **CPU)])
    assert "dtype" not in cpu.from_pretrained_kwargs()


@pytest.mark.parametrize(("targets", "parsed"), [("all-linear", "all-linear"), ("q_proj,v_proj", ["q_proj", "v_proj"])])
def test_the_multi_gpu_command_names_the_adapter_as_trl_s_script_reads_it(targets, parsed):
    import shlex

    trl = pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    from nbhelpers.analysis.multi_gpu_export import trl_command
    from nbhelpers.measure.config import RunConfig

    parts = shlex.split(trl_command(RunConfig(adapter="lora", lora_rank=8, lora_alpha=16, lora_targets=targets)))
    arguments = parts[parts.index("trl.scripts.sft") + 1 :]
    model, _ = trl.TrlParser((trl.ModelConfig,)).parse_args_into_dataclasses(arguments, return_remaining_strings=True)
    assert (model.use_peft, model.lora_r, model.lora_alpha, model.lora_dropout) == (True, 8, 16, 0.0)
    assert model.lora_target_modules == parsed and model.dtype == "bfloat16"
    assert "use_peft" not in trl_command(RunConfig())
