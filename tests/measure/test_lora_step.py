"""The LoRA step on a CPU: only adapter weights train, records count trainable and frozen parameters and LoRA-aware
FLOPs, packed and padded rows give the same per-sequence losses, and the kernel reports look through PEFT."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.backends import apply_backend, patch_report
from nbhelpers.kernels.hybrid_paths import TORCH, layer_paths
from nbhelpers.kernels.registry import cpu_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.sequence_parity import run_probe
from nbhelpers.measure.step import build_for, config_examples, make_step, measure
from nbhelpers.models.adapters import AdapterSettings, trainable_parameters, weights_dtype, wrap_model
from nbhelpers.models.families import model_shape
from nbhelpers.models.linears import lora_parameters
from nbhelpers.models.loading import build_model, resolve_model

TOLERANCE = cpu_tolerance("eager").rel  # the baseline's cpu_tolerance: same kernels (spec.SAME_KERNELS_CPU says why)
HYBRID = "qwen3.5-tiny"


def _lora_config(model: str, **changes) -> RunConfig:
    values = {"model": model, "adapter": "lora", "lora_rank": 4, "lora_alpha": 8, "num_samples": 4, "batch_size": 2,
              "max_length": 64, "steps": 1, "warmup": 0, "padding": "packed", "device": "cpu"}  # fmt: skip
    return RunConfig(**(values | changes))


def _adapted(config: RunConfig) -> torch.nn.Module:
    """The model the step trains: built, kernels applied to the plain model, then wrapped."""
    model = build_for(config, resolve_model(config.model), "cpu", "fp32")
    apply_backend(model, config.kernels, config.liger_kernels, "cpu")
    return wrap_model(model, config.adapter_settings)


def _randomize_adapters(model: torch.nn.Module, seed: int = 1) -> None:
    """LoRA's B starts at zero (the adapted model equals its base); random B makes the adapters matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)


@pytest.mark.parametrize(("model", "checkpointing"), [("qwen3-tiny", "none"), (HYBRID, "none"), ("qwen3-tiny", "full")])
def test_only_adapter_weights_change_after_a_step(model, checkpointing):
    from nbhelpers.measure.parallel import apply_checkpointing
    from nbhelpers.measure.step import prepare_batches

    config = _lora_config(model, activation_checkpointing=checkpointing)
    plain = build_for(config, resolve_model(config.model), "cpu", "fp32")
    apply_checkpointing(plain, checkpointing)
    apply_backend(plain, config.kernels, config.liger_kernels, "cpu")
    adapted = wrap_model(plain, config.adapter_settings)
    _randomize_adapters(adapted)
    before = {name: p.detach().clone() for name, p in adapted.named_parameters()}
    trainable = trainable_parameters(adapted)
    assert all("lora_" in name for name, p in adapted.named_parameters() if p.requires_grad)
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    tokenizer = load_tokenizer(resolve_model(config.model).source)
    batch = prepare_batches(config, tokenizer, "cpu")[0]
    loss, grad_norm = make_step(adapted, optimizer, "fp32", "cpu")(batch)
    assert math.isfinite(float(loss)) and float(grad_norm) > 0
    changed = {name for name, p in adapted.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all("lora_A" in name or "lora_B" in name for name in changed), sorted(changed)[:4]
    assert any("lora_A" in name for name in changed) and any("lora_B" in name for name in changed)


@pytest.mark.parametrize("model", ["qwen3-tiny", HYBRID])
def test_a_lora_record_counts_trainable_and_frozen_parameters_and_lora_flops(model):
    config = _lora_config(model)
    record = measure(config)
    metrics = record.metrics
    shape = model_shape(resolve_model(model).config)
    adapter = lora_parameters(shape, 4)
    assert metrics["trainable_parameters"] == metrics["adapter_parameters"] == adapter
    assert metrics["frozen_parameters"] == metrics["num_parameters"] == shape.total_parameters
    assert metrics["model_build_s"] > 0
    assert record.config["adapter"] == "lora" and record.config["label"].endswith("/lora-r4")
    frozen = metrics["frozen_matmul_parameters"]
    assert frozen > 0
    full = measure(config.replace(adapter="none"))  # the same batches, every weight trained
    assert full.metrics["timed_real_tokens"] == metrics["timed_real_tokens"]
    for flops, tokens, whole in zip(metrics["timed_flops"], metrics["timed_real_tokens"], full.metrics["timed_flops"]):
        assert flops == pytest.approx(whole + (6 * adapter - 2 * frozen) * tokens)  # no frozen weight gradients
    assert full.metrics["trainable_parameters"] == shape.total_parameters and full.metrics["frozen_parameters"] == 0
    assert full.metrics["adapter_parameters"] == 0
    # B = 0: the base's loss, its adapters adding exact zeros; 1e-6 = log2(151,936) roundings of 2^-24 in the loss's
    # log-sum-exp, should the adapted model's kernels block a sum otherwise
    assert metrics["loss_first"] == pytest.approx(full.metrics["loss_first"], rel=1e-6)
    assert (len(metrics["layer_paths"]) == 4) == (model == HYBRID)
    assert metrics["layer_paths"] == full.metrics["layer_paths"]


ROWS = [  # six samples of uneven length
    ("Name a colour.", "Blue."),
    ("Explain in a few words why the sky looks blue.", "Air scatters short blue wavelengths more than red ones."),
    ("What is two plus two?", "Four."),
    ("Write one sentence about rivers.", "Rivers carry water, sediment and life from the hills to the sea."),
    ("Translate 'thank you' into French.", "Merci."),
    ("List three prime numbers.", "Two, three and five; a prime has exactly two divisors, one and itself."),
]


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    data = tmp_path_factory.mktemp("lora") / "rows.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": p, "response": r}) for p, r in ROWS) + "\n")
    return str(data)


@pytest.mark.parametrize("model", ["qwen3-tiny", HYBRID])
def test_packed_and_padded_per_sequence_losses_are_equal_under_lora(model, rows_file):
    config = _lora_config(model, dataset=rows_file, num_samples=6, max_length=40)
    adapted = _adapted(config)
    _randomize_adapters(adapted)
    tokenizer = load_tokenizer(resolve_model(model).source)
    examples = config_examples(config, tokenizer, num_samples=6, min_rows=0)
    boundaries = resolve_model(model).boundaries
    probes = {
        padding: run_probe(
            adapted, examples, config.replace(padding=padding, token_budget=64 if padding == "token_budget" else 0)
            .padding_settings, tokenizer.pad_token_id, "fp32", "cpu", "", boundaries,
        )
        for padding in ("static", "packed") + (() if model == HYBRID else ("token_budget",))
    }  # fmt: skip
    reference = probes["static"]
    assert all(tokens > 0 for tokens in reference["sequence_loss_tokens"])
    assert all("lora_" in name for name in reference["param_grad_norms"])  # only the adapters get gradients
    for name, probe in list(probes.items())[1:]:
        assert name == "packed" or probe["batches"] != reference["batches"]  # packed: the same pairs, one row each
        assert probe["sequence_loss_tokens"] == reference["sequence_loss_tokens"]
        for got, want in zip(probe["sequence_loss_sums"], reference["sequence_loss_sums"]):
            assert abs(got - want) <= TOLERANCE * abs(want), name
        assert probe["grad_norm"] == pytest.approx(reference["grad_norm"], rel=TOLERANCE)
    first = next(iter(reference["param_grad_norms"]))  # the first adapter's A: a gradient only where B is not 0
    assert "lora_A" in first and reference["param_grad_norms"][first] > 0  # the adapters take part


def test_the_hybrid_reference_path_report_reads_through_peft():
    config = _lora_config(HYBRID)
    plain = build_for(config, resolve_model(HYBRID), "cpu", "fp32")
    report = apply_backend(plain, "eager", (), "cpu")
    paths = layer_paths(plain)
    adapted = wrap_model(plain, config.adapter_settings)
    assert report["reference_linear_attention"]
    assert patch_report(adapted) == report
    assert layer_paths(adapted) == paths and len(paths) == 4
    assert {row["delta_rule"] for row in paths if row["delta_rule"]} == {TORCH}


def test_a_frozen_base_is_bf16_on_cuda_and_fp32_on_a_cpu():
    lora, none = AdapterSettings("lora"), AdapterSettings()
    assert weights_dtype(lora, "bf16-autocast", "cuda") is torch.bfloat16
    assert weights_dtype(lora, "bf16", "cuda") is torch.bfloat16
    assert weights_dtype(lora, "fp32", "cuda") is None
    assert weights_dtype(lora, "fp32", "cpu") is None
    assert weights_dtype(none, "bf16-autocast", "cuda") is None
    assert weights_dtype(none, "bf16", "cpu") is torch.bfloat16
    model = build_model("qwen3-tiny", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32  # created in bf16, not cast: buffers keep fp32
    adapted = wrap_model(model, lora)
    assert {p.dtype for p in adapted.parameters() if p.requires_grad} == {torch.float32}  # fp32 adapters
    assert {p.dtype for p in adapted.parameters() if not p.requires_grad} == {torch.bfloat16}


# Liger's patches rebind module-level names for the whole process: the kernels run in a child process.
KERNELS_THROUGH_PEFT = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
from nbhelpers.kernels.backends import apply_backend, patch_report
from nbhelpers.models.adapters import AdapterSettings, wrap_model
from nbhelpers.models.loading import build_model
kernels, switches = sys.argv[1], tuple(s for s in sys.argv[2].split(",") if s)
ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(0))
reference = build_model("qwen3-tiny")
want = float(reference(input_ids=ids, labels=ids).loss)
model = build_model("qwen3-tiny")
before = apply_backend(model, kernels, switches, "cpu")
adapted = wrap_model(model, AdapterSettings("lora", 4, 8))
loss = adapted(input_ids=ids, labels=ids).loss
loss.backward()
grads = sorted({n.split(".")[-3] for n, p in adapted.named_parameters() if p.grad is not None})
print(json.dumps({"before": before, "after": patch_report(adapted), "loss": float(loss), "want": want, "grads": grads}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kernels", "switches"), [("liger", "rope,cross_entropy"), ("liger", "fused_linear_cross_entropy"), ("compile", "")]
)
def test_liger_and_compile_still_run_inside_the_peft_model(kernels, switches):
    done = subprocess.run(
        [sys.executable, "-c", KERNELS_THROUGH_PEFT, kernels, switches],
        capture_output=True, text=True, timeout=1800, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["after"] == result["before"]
    wanted = switches.split(",") if switches else [kernels]
    assert all(result["after"][key] for key in wanted), result["after"]
    # B = 0: the kernels' loss is the base's, within the backend table's cpu_tolerance (its basis says why)
    assert result["loss"] == pytest.approx(result["want"], rel=cpu_tolerance(kernels).rel)
    assert result["grads"] == ["lora_A", "lora_B"]
