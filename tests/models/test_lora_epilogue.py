"""LoRA's scale and add inside the GEMM (nbhelpers.models.lora_epilogue): the same loss and gradients as PEFT's
forward within rounding, fewer elementwise ops over the output, PEFT's forward wherever the layer is not plain
LoRA, and the setting's rule in RunConfig, the computation key, the record's model and the exports."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nbhelpers.analysis.exports import FUSED_EPILOGUES, sft_trainer_code, trainer_code
from nbhelpers.analysis.identity import computation_key
from nbhelpers.measure.config import RunConfig, fuses_lora_epilogue
from nbhelpers.models.adapters import wrap_model
from nbhelpers.models.loading import build_model, resolve_model
from nbhelpers.models.lora_epilogue import fuse_lora_epilogues, fused_layers
from nbhelpers.validation import ConfigError

ELEMENTWISE = ("add", "mul")
COPIES = ("clone", "copy_")  # what autograd's CopySlices runs for an in-place op on a view


class OpCounter(TorchDispatchMode):
    """Counts the ops the calls under it run, by name, and the elements the elementwise ones write."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.elementwise = 0
        self.copied = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.counts[name] = self.counts.get(name, 0) + 1
        out = func(*args, **(kwargs or {}))
        if name in ELEMENTWISE and isinstance(out, torch.Tensor):
            self.elementwise += out.numel()
        if name in COPIES and isinstance(out, torch.Tensor):
            self.copied += out.numel()
        return out


HAS_BNB = importlib.util.find_spec("bitsandbytes") is not None


def _adapted(
    fuse: bool, dtype: torch.dtype = torch.float32, alpha: int = 8, frozen_base: str = "bf16"
) -> torch.nn.Module:
    """qwen3-tiny with LoRA r4 on every linear, B random so the adapters matter; ``frozen_base`` "nf4": QLoRA's
    4-bit base (bitsandbytes' CPU backend)."""
    config = RunConfig(
        model="qwen3-tiny", adapter="lora", lora_rank=4, lora_alpha=alpha, device="cpu", frozen_base=frozen_base
    )
    model = build_model(resolve_model(config.model).source, "sdpa", 0, dtype, "cpu")
    model.train()
    adapted = wrap_model(model, dataclasses.replace(config.adapter_settings, fuse_epilogue=fuse))
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return adapted


TOKENS = 2 * 24  # the batch of _step


def _step(model: torch.nn.Module, autocast: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor], OpCounter]:
    ids = torch.randint(0, 1000, (2, TOKENS // 2), generator=torch.Generator().manual_seed(5))
    counter = OpCounter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast), counter:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads, counter


def _close(grads: dict[str, torch.Tensor], reference: dict[str, torch.Tensor], rel: float) -> list[str]:
    """Names of the gradients further from the reference than ``rel`` of its norm."""
    return [n for n in reference if (grads[n] - reference[n]).norm() > rel * reference[n].norm() + 1e-12]


def test_the_fused_epilogue_matches_peft_and_runs_fewer_elementwise_ops():
    loss_peft, grads_peft, ops_peft = _step(_adapted(fuse=False))
    fused = _adapted(fuse=True)
    loss, grads, ops = _step(fused)
    layers = fused_layers(fused)
    assert layers == sum(1 for n, _ in fused.named_modules() if n.endswith("lora_A")) > 0
    torch.testing.assert_close(loss, loss_peft, rtol=1e-5, atol=0)  # fp32: the same sums in another order
    assert grads.keys() == grads_peft.keys() and not _close(grads, grads_peft, 1e-4)
    # per layer PEFT multiplies the product by the scale (forward and backward) and adds it: the fused forward does
    # neither over the output (a scalar multiply of the rank-wide gradients stays)
    assert ops.counts.get("addmm_", 0) == layers
    widths = [m.out_features for n, m in fused.named_modules() if n.endswith("base_layer")]
    outputs = sum(widths) * TOKENS
    rank_wide = sum(4 * (TOKENS + width) for width in widths)  # the fused backward scales A's output and B's grads
    # PEFT's forward multiplies and adds over each output, its backward multiplies the output's gradient
    saved = ops_peft.elementwise - ops.elementwise
    assert saved >= 3 * outputs - rank_wide, (ops_peft.elementwise, ops.elementwise, outputs, rank_wide)


@pytest.mark.skipif(not HAS_BNB, reason="bitsandbytes is not installed (pip install 'nbhelpers[qlora]')")
def test_over_a_4bit_base_the_fused_epilogue_matches_peft_and_drops_its_clone():
    """QLoRA: PEFT's ``lora.bnb.Linear4bit`` clones the base layer's output before its multiply and add; the fused
    forward adds into the output itself, with the same loss and gradients (the same 4-bit weights in both)."""
    from peft.tuners.lora.bnb import Linear4bit

    peft_model = _adapted(fuse=False, frozen_base="nf4")
    loss_peft, grads_peft, ops_peft = _step(peft_model)
    fused = _adapted(fuse=True, frozen_base="nf4")
    loss, grads, ops = _step(fused)
    layers = fused_layers(fused)
    assert layers == sum(1 for m in fused.modules() if type(m) is Linear4bit) > 0
    torch.testing.assert_close(loss, loss_peft, rtol=1e-5, atol=0)
    assert grads.keys() == grads_peft.keys() and not _close(grads, grads_peft, 1e-4)
    assert ops.counts.get("addmm_", 0) == layers
    widths = [m.out_features for m in fused.modules() if type(m) is Linear4bit]
    outputs = sum(widths) * TOKENS
    assert ops_peft.copied - ops.copied >= outputs, (ops_peft.copied, ops.copied, outputs)  # PEFT's clones
    assert ops_peft.elementwise - ops.elementwise >= 3 * outputs - sum(4 * (TOKENS + w) for w in widths)


def test_under_bf16_autocast_the_fused_epilogue_stays_within_bf16_rounding():
    loss_peft, grads_peft, _ = _step(_adapted(fuse=False, dtype=torch.bfloat16), autocast=True)
    loss, grads, ops = _step(_adapted(fuse=True, dtype=torch.bfloat16), autocast=True)
    assert ops.counts.get("addmm_", 0) > 0
    # PEFT rounds the product, the scaled product and the sum to bf16 (8 bits); the GEMM adds in fp32, rounds once
    torch.testing.assert_close(loss, loss_peft, rtol=2**-7, atol=0)
    assert not _close(grads, grads_peft, 2**-4), "LoRA gradients beyond bf16 rounding of PEFT's"


def test_the_in_place_add_copies_no_gradient():
    """The add goes into the base layer's own output, not a view of it: a view would make autograd clone and copy
    each output's gradient in the backward (measured on an H100: 40-51 ms a step of copies, the gain undone)."""
    _, _, ops_peft = _step(_adapted(fuse=False, dtype=torch.bfloat16), autocast=True)
    _, _, ops = _step(_adapted(fuse=True, dtype=torch.bfloat16), autocast=True)
    assert ops.counts.get("addmm_", 0) > 0
    assert ops.copied <= ops_peft.copied, (ops.copied, ops_peft.copied)


def test_a_layer_that_is_not_plain_lora_runs_peft_forward():
    model = _adapted(fuse=True)
    layer = next(m for n, m in model.named_modules() if n.endswith("q_proj") and hasattr(m, "lora_A"))
    x = torch.randn(3, layer.in_features, generator=torch.Generator().manual_seed(1))
    fused = layer(x)
    layer.lora_dropout["default"] = torch.nn.Dropout(0.5)  # not plain LoRA: PEFT's forward, its dropout
    layer.eval()
    torch.testing.assert_close(layer(x), fused)  # eval: dropout off, PEFT's arithmetic gives the same
    layer.train()
    counter = OpCounter()
    with counter:
        layer(x)
    assert counter.counts.get("addmm_", 0) == 0 and counter.counts.get("bernoulli_", 0) == 1  # its dropout mask
    with model.disable_adapter():
        torch.testing.assert_close(layer(x), layer.base_layer(x))


def test_fusing_is_per_instance_and_counts_its_layers():
    from peft.tuners.lora import Linear as LoraLinear

    model = _adapted(fuse=False)
    assert fused_layers(model) == 0
    layers = fuse_lora_epilogues(model)
    assert layers == fused_layers(model) > 0
    assert LoraLinear.forward.__name__ == "forward"  # the class keeps PEFT's forward


@pytest.mark.parametrize(
    ("fields", "fused"),
    [
        ({"adapter": "lora", "kernels": "eager"}, False),  # the default: PEFT's forward
        ({"adapter": "lora", "kernels": "liger"}, False),  # with a kernel backend too, until a GPU says otherwise
        ({"adapter": "lora", "kernels": "eager", "lora_epilogue": "fused"}, True),
        ({"adapter": "lora", "kernels": "liger", "lora_epilogue": "fused"}, True),
        ({"adapter": "lora", "kernels": "liger", "lora_epilogue": "peft"}, False),
        ({"adapter": "none", "kernels": "liger"}, False),  # no adapter, nothing to fuse
    ],
)
def test_the_rule(fields, fused):
    config = RunConfig(**fields)
    assert fuses_lora_epilogue(config.to_dict()) is fused
    assert config.adapter_settings.fuse_epilogue is fused


def test_records_from_before_the_setting_ran_peft_and_bad_values_name_the_field():
    old = {k: v for k, v in RunConfig(adapter="lora", kernels="liger").to_dict().items() if k != "lora_epilogue"}
    assert not fuses_lora_epilogue(old)
    assert RunConfig.from_record(old).lora_epilogue == "peft"
    with pytest.raises(ConfigError, match="lora_epilogue.*peft"):
        RunConfig(adapter="lora", lora_epilogue="cutlass")


def test_the_computation_key_tells_the_forwards_apart():
    default = RunConfig(adapter="lora", kernels="liger").to_dict()
    fused = RunConfig(adapter="lora", kernels="liger", lora_epilogue="fused").to_dict()
    peft = RunConfig(adapter="lora", kernels="liger", lora_epilogue="peft").to_dict()
    assert computation_key(default) == computation_key(peft) != computation_key(fused)
    assert computation_key({k: v for k, v in peft.items() if k != "lora_epilogue"}) == computation_key(peft)


def test_the_exports_fuse_as_measured_and_compile():
    fused = RunConfig(adapter="lora", kernels="liger", padding="packed", lora_epilogue="fused").to_dict()
    plain = RunConfig(adapter="lora", kernels="liger", padding="packed").to_dict()
    for code in (trainer_code, sft_trainer_code):
        text = code(fused)
        assert "\n".join(FUSED_EPILOGUES) in text and text.index("trainer = ") < text.index("fuse_lora_epilogues(")
        compile(text, "<export>", "exec")
        assert "fuse_lora_epilogues" not in code(plain)


# ------------------------------------------------------------------------- each LoRA linear as one autograd function


def _one_function(dtype: torch.dtype = torch.float32, frozen_base: str = "bf16") -> torch.nn.Module:
    model = _adapted(fuse=False, dtype=dtype, frozen_base=frozen_base)
    assert fuse_lora_epilogues(model, one_function=True) == fused_layers(model, one_function=True) > 0
    return model


@pytest.mark.parametrize("frozen_base", ["bf16", pytest.param("nf4", marks=pytest.mark.skipif(
    not HAS_BNB, reason="bitsandbytes is not installed (pip install 'nbhelpers[qlora]')"))])  # fmt: skip
def test_one_function_matches_peft_and_runs_fewer_ops_than_the_fused_forward(frozen_base):
    """The frozen GEMM (bitsandbytes' 4-bit one over NF4), both adapter GEMMs and the add as one autograd function:
    PEFT's loss and gradients (fp32: within summation order), fewer ops a step than the fused forward, no adapter
    module called."""
    loss_peft, grads_peft, ops_peft = _step(_adapted(fuse=False, frozen_base=frozen_base))
    _, _, ops_fused = _step(_adapted(fuse=True, frozen_base=frozen_base))
    model = _one_function(frozen_base=frozen_base)
    called: list[str] = []
    for name, module in model.named_modules():
        if name.endswith(("lora_A.default", "lora_B.default")):
            module.register_forward_hook(lambda m, i, o, name=name: called.append(name))
    loss, grads, ops = _step(model)
    torch.testing.assert_close(loss, loss_peft, rtol=1e-5, atol=0)
    assert grads.keys() == grads_peft.keys() and not _close(grads, grads_peft, 1e-4)
    assert called == []  # the adapters' weights enter the function; their modules are not called
    layers = fused_layers(model, one_function=True)
    total, fused_total, peft_total = (sum(o.counts.values()) for o in (ops, ops_fused, ops_peft))
    assert total <= fused_total - 4 * layers < peft_total, (total, fused_total, peft_total, layers)
    assert ops.elementwise < ops_fused.elementwise < ops_peft.elementwise
    assert ops.copied <= ops_fused.copied  # no copy of an output or its gradient


def test_one_function_under_bf16_autocast_stays_within_bf16_rounding():
    loss_peft, grads_peft, _ = _step(_adapted(fuse=False, dtype=torch.bfloat16), autocast=True)
    loss, grads, ops = _step(_one_function(dtype=torch.bfloat16), autocast=True)
    assert ops.counts.get("addmm_", 0) > 0
    torch.testing.assert_close(loss, loss_peft, rtol=2**-7, atol=0)
    assert not _close(grads, grads_peft, 2**-4), "LoRA gradients beyond bf16 rounding of PEFT's"


def test_one_function_recomputed_under_checkpointing_gives_the_same_gradients():
    """Activation recomputation (non-reentrant, as the workbook's) runs the function's forward again."""
    _, grads, _ = _step(_one_function())
    model = _one_function()
    model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    _, recomputed, _ = _step(model)
    assert not _close(recomputed, grads, 1e-6)


def test_one_function_falls_back_where_peft_would_compute_otherwise():
    """Mixed dtypes without autocast (a bf16 input into the fp32 adapters of a bf16 base) and dropout run PEFT's
    arithmetic, as the fused forward's own rule does there."""
    model = _one_function(dtype=torch.bfloat16)
    peft_model = _adapted(fuse=False, dtype=torch.bfloat16)
    name = next(n for n, m in model.named_modules() if n.endswith("q_proj") and hasattr(m, "lora_A"))
    layer, peft_layer = model.get_submodule(name), peft_model.get_submodule(name)
    assert layer.lora_A["default"].weight.dtype == torch.float32  # PEFT keeps the adapters in fp32
    x = torch.randn(3, layer.in_features, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    counter = OpCounter()
    with counter:
        out = layer(x)
    torch.testing.assert_close(out, peft_layer(x), rtol=0, atol=0)
    assert counter.counts.get("addmm_", 0) == 0
    layer.lora_dropout["default"] = torch.nn.Dropout(0.5)
    counter = OpCounter()
    with counter:
        layer(x)
    assert counter.counts.get("addmm_", 0) == 0 and counter.counts.get("bernoulli_", 0) == 1  # PEFT's dropout


def test_the_function_setting_reaches_the_model_the_key_and_the_exports():
    function = RunConfig(adapter="lora", kernels="liger", padding="packed", lora_epilogue="function")
    settings = function.adapter_settings
    assert settings.fuse_epilogue and settings.one_function
    assert not RunConfig(adapter="lora", lora_epilogue="fused").adapter_settings.one_function
    keys = {computation_key(function.replace(lora_epilogue=e).to_dict()) for e in ("peft", "fused", "function")}
    assert len(keys) == 3
    assert not RunConfig(adapter="none", lora_epilogue="function").adapter_settings.one_function
    model = build_model(resolve_model("qwen3-tiny").source, "sdpa", 0, torch.float32, "cpu")
    wrapped = wrap_model(model, RunConfig(model="qwen3-tiny", adapter="lora", lora_rank=4, device="cpu",
                                          lora_epilogue="function").adapter_settings)  # fmt: skip
    assert fused_layers(wrapped, one_function=True) == fused_layers(wrapped) > 0
    for code in (trainer_code, sft_trainer_code):
        text = code(function.to_dict())
        assert "fuse_lora_epilogues(trainer.model, one_function=True)" in text
        compile(text, "<export>", "exec")
