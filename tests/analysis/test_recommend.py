"""recommend(): chosen from measurements only; its exported code executes and builds TrainingArguments."""

from __future__ import annotations

import ast
import json

import pytest

from nbhelpers.analysis.recommend import recommend, recommend_all, recommendations_markdown
from nbhelpers.analysis.records import CrossMachineError

CPU = {"device_name": "cpu", "hostname": "laptop", "device_type": "cpu"}
NEEDS_ACCELERATE = "TrainingArguments needs accelerate>=1.1 (pip install accelerate)"


@pytest.fixture
def measured(make_record):
    return [
        make_record("baseline", 1000.0, memory_gib=40.0),
        make_record("liger", 1800.0, kernels="liger", memory_gib=20.0, parity="pass"),
        make_record("liger-same-speed-more-memory", 1800.0, kernels="liger", memory_gib=30.0, parity="pass"),
        make_record("compile-broken-parity", 5000.0, kernels="compile", parity="fail"),
        make_record("flex", None, attn="flex_attention", status="failed", reason="CUDA out of memory"),
        make_record("trace-only", 9000.0, kind="trace"),
    ]


def test_fastest_eligible_record_ties_broken_by_memory(measured):
    rec = recommend(measured)
    assert rec.label == "liger"  # 5000 tok/s failed parity, 9000 is not a step record
    assert rec.real_tokens_per_s == 1800.0 and rec.peak_memory_gib == 20.0
    assert rec.speedup == pytest.approx(1.8) and rec.baseline_label == "baseline"
    assert rec.candidates == 3 and rec.excluded == {"failed": 1, "failed parity": 1, "parity not checked": 0}
    assert [p["label"] for p in rec.passed_over] == ["compile-broken-parity"]
    assert "Passed over though faster: compile-broken-parity" in rec.summary()
    data = json.loads(rec.to_json())
    assert data["measured"]["real_tokens_per_s"] == 1800.0
    assert data["training_arguments"] == {
        "output_dir": "outputs",
        "per_device_train_batch_size": 4,
        "use_liger_kernel": True,
        "liger_kernel_config": {
            "rope": True,
            "rms_norm": True,
            "swiglu": True,
            "fused_linear_cross_entropy": True,
            "cross_entropy": False,
        },
        "torch_compile": False,
        "activation_checkpointing": False,  # written out: TRL turns gradient checkpointing on by default
        "learning_rate": 1e-5,
        "lr_scheduler_type": "constant",
        "weight_decay": 0.01,
        "optim": "adamw_torch_fused",
        "max_grad_norm": 0.0,
        "seed": 0,
        "bf16": True,
        "tf32": True,
        "train_sampling_strategy": "sequential",
    }
    assert data["sft_config"]["activation_checkpointing"] is False and data["sft_config"]["bf16"] is True
    assert data["sft_config"]["model_init_kwargs"] == {"attn_implementation": "sdpa"}
    assert data["sft_config"]["pad_to_multiple_of"] == 128  # static padding, as measured
    assert data["from_pretrained"] == {
        "pretrained_model_name_or_path": "Qwen/Qwen3-1.7B",
        "attn_implementation": "sdpa",
    }


def test_refuses_to_compare_machines_and_recommends_per_machine(make_record):
    records = [
        make_record("gpu-base", 1000.0),
        make_record("cpu-base", 50.0, **CPU),
        make_record("cpu-packed", 80.0, padding="packed", parity="pass", **CPU),
    ]
    with pytest.raises(CrossMachineError, match="one machine"):
        recommend(records)
    recs = recommend_all(records)
    assert [(r.machine, r.label) for r in recs] == [
        ("NVIDIA H200 @ gpu-01", "gpu-base"),
        ("cpu @ laptop", "cpu-packed"),
    ]
    cpu = recs[1]
    assert cpu.training_arguments_kwargs()["use_cpu"] is True
    assert cpu.training_arguments_kwargs()["bf16"] is False  # dtype auto on a CPU = fp32
    assert cpu.sft_config_kwargs()["padding_free"] is True and cpu.sft_config_kwargs()["packing"] is False
    assert "cpu-packed" in recommendations_markdown(recs).data


def test_nothing_eligible_is_a_clear_error(make_record):
    records = [
        make_record("a", None, status="failed", reason="OOM"),
        make_record("b", 10.0, parity="fail"),
        make_record("c", 12.0, parity="not checked"),
    ]
    with pytest.raises(ValueError, match="1 failed, 1 failed parity, 1 parity not checked"):
        recommend(records)
    assert recommend_all(records) == []


def _pretend_gpu(monkeypatch) -> None:
    """A GPU record's bf16 and tf32 arguments, built on a CPU."""
    import transformers.training_args as ta

    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda *a, **k: True)
    monkeypatch.setattr(ta, "is_torch_tf32_available", lambda *a, **k: True)
    monkeypatch.setattr(ta, "enable_tf32", lambda *a, **k: None)


def _exec_training_arguments(code: str, tmp_path, monkeypatch):
    pytest.importorskip("accelerate", reason=NEEDS_ACCELERATE)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "<recommended>", "exec"), namespace)
    return namespace["training_args"]


@pytest.mark.parametrize("padding", ["static", "packed", "bucketed", "token_budget"])
def test_exported_code_builds_training_arguments(make_record, tmp_path, monkeypatch, padding):
    records = [
        make_record("base", 100.0, device_name="cpu", hostname="ci", device_type="cpu"),
        make_record(
            "best",
            300.0,
            kernels="liger+compile",
            padding=padding,
            device_name="cpu",
            hostname="ci",
            device_type="cpu",
            parity="pass",
        ),
    ]
    rec = recommend(records)
    assert rec.label == "best"
    full = rec.to_python()
    tree = ast.parse(full)  # the whole snippet (TRL part and from_pretrained line included) is valid Python
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"TrainingArguments", "SFTConfig"} <= calls
    assert 'AutoModelForCausalLM.from_pretrained(MODEL_ID, attn_implementation="sdpa")' in full
    assert ("model.config.use_cache = False" in full) == (padding in ("packed", "token_budget"))

    args = _exec_training_arguments(rec.training_arguments_code(), tmp_path, monkeypatch)
    assert args.per_device_train_batch_size == 4
    assert args.use_liger_kernel is True and args.torch_compile is True and args.bf16 is False
    assert args.use_cpu is True
    assert args.liger_kernel_config["fused_linear_cross_entropy"] is True
    if padding == "bucketed":
        grouped = getattr(args, "group_by_length", None) or getattr(args, "train_sampling_strategy", "")
        assert grouped in (True, "group_by_length")


def test_exported_code_bf16_on_a_gpu_record(make_record, tmp_path, monkeypatch):
    rec = recommend([make_record("base", 100.0, dtype="bf16")])
    assert rec.training_arguments_kwargs()["bf16"] is True
    assert rec.from_pretrained_kwargs() == {"attn_implementation": "sdpa", "dtype": "bfloat16"}
    pytest.importorskip("accelerate", reason=NEEDS_ACCELERATE)
    _pretend_gpu(monkeypatch)
    args = _exec_training_arguments(rec.training_arguments_code(), tmp_path, monkeypatch)
    assert args.bf16 is True and args.use_liger_kernel is False


def test_sft_config_code(make_record, tmp_path, monkeypatch):
    record = make_record("base", 100.0, padding="token_budget", token_budget=4096, attn="flash_attention_2")
    rec = recommend([record])
    code = rec.sft_config_code()
    tree = ast.parse(code)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    call = next(n for n in calls if getattr(n.func, "id", "") == "SFTConfig")
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kwargs["packing"] is True and kwargs["padding_free"] is True
    assert kwargs["packing_strategy"] == "bfd"
    assert kwargs["max_length"] == 4096 and kwargs["per_device_train_batch_size"] == 1
    assert kwargs["model_init_kwargs"] == {"attn_implementation": "flash_attention_2"}
    try:
        import trl  # noqa: F401
    except ImportError:
        pytest.skip("TRL is not installed: SFTConfig code checked with ast only (pip install trl)")
    pytest.importorskip("accelerate", reason="SFTConfig needs accelerate>=1.1")
    _pretend_gpu(monkeypatch)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "<sft>", "exec"), namespace)
    config = namespace["sft_config"]
    assert config.packing is True and config.gradient_checkpointing is False  # TRL's default True, turned off


def test_model_code_registers_torch_varlen_before_loading(make_record):
    rec = recommend([make_record("best", 100.0, padding="packed", attn="torch_varlen")])
    code = rec.model_code()
    ast.parse(code)
    assert code.index("register()") < code.index("from_pretrained(")
    namespace: dict = {}
    exec(compile(code[: code.index("MODEL_ID")], "<recommended>", "exec"), namespace)  # imports + register()
    from transformers import AttentionInterface

    assert "torch_varlen" in AttentionInterface._global_mapping
    assert "register()" not in recommend([make_record("sdpa", 100.0, padding="packed")]).model_code()


def test_only_a_parity_pass_is_recommended_faster_unverified_ones_are_named(make_record):
    """Static baseline, a packed record that passed, a faster token-budget record never checked and a
    fastest bucketed one that failed: the packed one is recommended, the other two are passed over."""
    base = make_record("static", 100.0)
    base.metrics["parity"] = {"status": "baseline"}
    records = [
        base,
        make_record("packed", 300.0, padding="packed", parity="pass"),
        make_record("token budget", 400.0, padding="token_budget", parity="not checked"),
        make_record("bucketed", 500.0, padding="bucketed", parity="fail"),
        make_record("dynamic, no verdict", 350.0, padding="dynamic"),
    ]
    records[3].metrics["parity"]["note"] = "9 sequences compared one by one"
    rec = recommend(records)
    assert rec.label == "packed" and rec.parity == "pass" and rec.candidates == 2
    assert [(p["label"], p["parity"]) for p in rec.passed_over] == [
        ("bucketed", "fail"),
        ("token budget", "not checked"),
        ("dynamic, no verdict", "not checked"),
    ]
    assert rec.excluded == {"failed": 0, "failed parity": 1, "parity not checked": 2}
    summary = rec.summary()
    assert "bucketed (500 real tok/s, parity fail (9 sequences compared one by one))" in summary
    assert "token budget (400 real tok/s, parity not checked)" in summary
    assert json.loads(rec.to_json())["measured"]["passed_over"][0]["label"] == "bucketed"


def test_the_baseline_itself_needs_no_verdict(make_record):
    """A group's baseline (no parity key at all) is eligible; nothing faster passed, so it is the answer."""
    records = [make_record("static", 100.0), make_record("packed", 300.0, padding="packed")]
    rec = recommend(records)
    assert rec.label == "static" and rec.parity == "baseline" and rec.speedup == pytest.approx(1.0)
    assert [p["label"] for p in rec.passed_over] == ["packed"]
