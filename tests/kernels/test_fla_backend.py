"""The fla backend and the reference path of a hybrid: table entries, the environment decision, the
per-layer report read off the live modeling module."""

import sys

import pytest
import torch
from hybrid_helpers import tiny_hybrid

from nbhelpers.kernels import hybrid_paths as paths
from nbhelpers.kernels.backends import apply_backend, patch_report
from nbhelpers.kernels.fla import (
    FLA_CHECKS,
    FUSED_GATED_NORM,
    fla_refusal,
    fla_report,
    use_fla,
    use_fused_gated_norms,
    version_tuple,
)
from nbhelpers.kernels.registry import COMPILED_CACHES, kernel_backend
from nbhelpers.kernels.spec import BackendUnavailable

HOPPER, AMPERE = (9, 0), (8, 0)


def test_the_table_has_fla_and_its_liger_composite():
    fla = kernel_backend("fla")
    assert fla.requested(()) == tuple(FLA_CHECKS)
    assert set(fla.caches) == {"triton", "tilelang"} <= set(COMPILED_CACHES)
    both = kernel_backend("fla+liger")
    assert both.components == ("fla", "liger") and both.uses_liger_switches
    assert both.requested(("rms_norm",)) == (*FLA_CHECKS, "rms_norm")
    assert COMPILED_CACHES["tilelang"].variable == "TILELANG_CACHE_DIR"


@pytest.mark.parametrize(
    ("capability", "triton", "tilelang", "refused"),
    [
        (HOPPER, "3.6.0", False, True),  # the H200 as found: wrong gated backward, fla refuses it
        (HOPPER, "3.4.0", False, True),
        (HOPPER, "3.7.0+git", False, True),
        (HOPPER, "3.6.0", True, False),  # tilelang takes the gated backward
        (HOPPER, "3.7.1", False, False),
        (HOPPER, "3.3.1", False, False),
        (AMPERE, "3.6.0", False, False),  # only Hopper is affected
    ],
)
def test_the_environment_check_refuses_wrong_results_on_hopper(capability, triton, tilelang, refused):
    reason = fla_refusal("cuda", capability, triton, has_fla=True, has_tilelang=tilelang)
    assert bool(reason) is refused
    if refused:
        assert "tilelang" in reason and "3.7.1" in reason and triton in reason


def test_the_environment_check_names_what_is_missing():
    assert "flash-linear-attention" in fla_refusal("cuda", HOPPER, "3.6.0", has_fla=False, has_tilelang=True)
    assert fla_refusal("cpu", None, "3.6.0", has_fla=True, has_tilelang=False).startswith("no GPU")
    assert "triton" in fla_refusal("cuda", AMPERE, None, has_fla=True, has_tilelang=False)
    assert version_tuple("3.6.0+git1a2b") == (3, 6, 0) and version_tuple("3.7") == (3, 7, 0)


def test_fla_on_this_cpu_is_unavailable_before_anything_is_patched():
    model = tiny_hybrid()
    with pytest.raises(BackendUnavailable) as error:
        apply_backend(model, "fla", (), "cpu")
    assert "flash-linear-attention" in str(error.value) or "no GPU" in str(error.value)


def test_eager_forces_the_reference_and_the_report_says_so_per_layer(monkeypatch):
    model = tiny_hybrid()
    paths.use_reference(model)  # remembers what transformers bound at import
    modeling = sys.modules[type(model).__module__]
    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", lambda *a, **k: None)  # a kernel picked at import
    report = apply_backend(model, "eager", (), "cpu")
    assert report["reference_linear_attention"] is True
    assert report["fla_delta_rule"] is False and report["fused_conv1d"] is False
    frame = paths.layer_paths_frame(model)
    linear = frame[frame["type"] == "linear_attention"]
    assert len(linear) == 3 and (linear["delta_rule"] == paths.TORCH).all() and (linear["conv"] == paths.TORCH).all()
    assert (linear["delta_rule_boundaries"] == paths.PER_SEQUENCE).all()
    assert frame.loc[frame["type"] == "full_attention", "attention"].tolist() == ["sdpa"]


def test_a_backend_without_fla_runs_the_reference_whatever_transformers_bound(monkeypatch):
    """A row's linear attention is its own parts': compile (no part takes the delta rule over) on a hybrid runs the
    reference path, not the kernel transformers bound at import (fla where installed)."""
    model = tiny_hybrid()
    paths.use_reference(model)  # remembers what transformers bound at import
    modeling = sys.modules[type(model).__module__]
    monkeypatch.setattr(modeling, "torch_chunk_gated_delta_rule", lambda *a, **k: None)  # a kernel picked at import
    report = apply_backend(model, "compile", (), "cpu")
    assert report["reference_linear_attention"] is True and report["compile"] is True
    assert {row["delta_rule"] for row in paths.linear_layers(model)} == {paths.TORCH}


def test_the_report_shows_a_path_that_drops_boundaries():
    model = tiny_hybrid()
    paths.use_reference(model, keep_apart=("delta_rule",))
    rows = paths.linear_layers(model)
    assert {r["conv_boundaries"] for r in rows} == {paths.IGNORES}
    assert patch_report(model)["reference_linear_attention"] is False
    paths.use_reference(model)
    assert patch_report(model)["reference_linear_attention"] is True


def test_the_report_reads_what_fla_binds(monkeypatch):
    """fla's functions stand in for the package (not installed here): the report reads the bound hooks."""
    model = tiny_hybrid()
    from nbhelpers.kernels import fla

    fake_rule = paths.tag(lambda *a, **k: None, paths.FLA_DELTA_RULE, paths.KEEPS_APART)
    fake_conv = paths.tag(lambda *a, **k: None, paths.FLA_CONV, paths.KEEPS_APART)
    monkeypatch.setattr(fla, "fla_delta_rule", lambda: fake_rule)
    monkeypatch.setattr(fla, "fused_conv", lambda: fake_conv)
    monkeypatch.setattr(fla, "fused_gated_norm", FakeFusedNorm)
    try:
        use_fla(model)
        assert fla_report(model) == {"fla_delta_rule": True, "fused_conv1d": True, FUSED_GATED_NORM: True}
        use_fla(model, conv=False)  # transformers' choice on the H200: fused delta rule, PyTorch conv
        assert fla_report(model) == {"fla_delta_rule": True, "fused_conv1d": False, FUSED_GATED_NORM: True}
        assert {r["conv"] for r in paths.linear_layers(model)} == {paths.TORCH}
    finally:
        paths.use_reference(model)


class FakeFusedNorm(torch.nn.Module):
    """Stands in for fla's FusedRMSNormGated (not installed here): a module of the fla package computing
    rmsnorm(x) * weight * silu(gate) in fp32, built from transformers' norm as ``fla.fused_gated_norm`` does."""

    __module__ = "fla.modules.fake"

    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(norm.weight.detach().clone(), requires_grad=norm.weight.requires_grad)
        self.eps = norm.variance_epsilon

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()
        return (h * torch.nn.functional.silu(gate.float())).to(x.dtype)


def test_every_gated_deltanet_norm_is_replaced_once_and_computes_the_same():
    model = tiny_hybrid()
    paths.use_reference(model)
    layers = [m for n, m in model.named_modules() if n.endswith("linear_attn")]
    with torch.no_grad():
        for layer in layers:
            layer.norm.weight.uniform_(0.5, 1.5)
    x, gate = torch.randn(5, layers[0].norm.weight.numel()), torch.randn(5, layers[0].norm.weight.numel())
    before = [layer.norm(x, gate) for layer in layers]
    assert {r["gated_norm"] for r in paths.linear_layers(model)} == {paths.TORCH}
    assert use_fused_gated_norms(model, FakeFusedNorm) == len(layers) == 3
    assert {r["gated_norm"] for r in paths.linear_layers(model)} == {paths.FLA_GATED_NORM}
    assert use_fused_gated_norms(model, FakeFusedNorm) == 0  # already fused: nothing replaced twice
    for layer, expected in zip(layers, before):
        # exact: the same fp32 operations in the same order as transformers' gated norm (a product commutes exactly)
        assert torch.equal(layer.norm(x, gate), expected)
    assert "gated_norm" in paths.layer_paths_frame(model).columns


def _transformers_wrapper_around_fla():
    """A wrapper as transformers' ``use_kernel_func_from_hub_with_fallback`` makes, around a function of fla's."""
    fake = type(sys)("fla.ops.fake")
    exec("def chunk_gated_delta_rule(*a, **k):\n    return None", fake.__dict__)
    implementation = fake.chunk_gated_delta_rule

    def wrapped(*args, **kwargs):
        return implementation(*args, **kwargs)

    return wrapped


def test_a_transformers_wrapper_is_read_through_its_closure():
    assert paths.describe_hook(_transformers_wrapper_around_fla(), "delta_rule") == (
        paths.FLA_DELTA_RULE, paths.KEEPS_APART,
    )  # fmt: skip


def test_a_hub_module_around_the_wrapper_is_read_through():
    """transformers 5.25 with ``kernels`` installed wraps each hook's wrapper in a callable nn.Module."""
    kernels = pytest.importorskip("kernels")
    hub_module = kernels.use_kernel_forward_from_hub("FakeDeltaRule")(_transformers_wrapper_around_fla())
    assert isinstance(hub_module, torch.nn.Module)
    assert paths.describe_hook(hub_module, "delta_rule") == (paths.FLA_DELTA_RULE, paths.KEEPS_APART)
    assert paths.hub_function(paths.describe_hook) is paths.describe_hook  # a plain function is itself


def test_the_reference_behind_the_installed_hooks_is_transformers_own_function():
    """Whatever this transformers binds at import, the reference found behind it is its plain PyTorch code,
    which runs a packed row sequence by sequence once bound."""
    model = tiny_hybrid()
    modeling = paths.hybrid_modeling(model)
    for hook in paths.HYBRID_HOOKS:
        reference = paths.reference_function(modeling, hook)
        assert not isinstance(reference, torch.nn.Module), hook
        assert reference.__module__ == modeling.__name__, (hook, reference.__module__)
    assert paths.use_reference(model)
    assert paths.runs_reference(model)


def test_a_dense_model_has_no_hybrid_report():
    from nbhelpers.models.loading import build_model

    model = build_model("qwen3-tiny")
    assert paths.layer_paths(model) == []
    assert fla_report(model) == {"fla_delta_rule": False, "fused_conv1d": False, FUSED_GATED_NORM: False}
    with pytest.raises(BackendUnavailable, match="no Gated DeltaNet"):
        use_fla(model)


def test_the_per_layer_frame_reads_a_model_its_rows_or_a_record():
    model = tiny_hybrid()
    paths.use_reference(model)
    rows = paths.layer_paths(model)
    record = type("Record", (), {"metrics": {"layer_paths": rows}})()
    for source in (model, rows, record):
        frame = paths.layer_paths_frame(source)
        assert frame["type"].tolist() == ["linear_attention"] * 3 + ["full_attention"]
        assert frame["conv"].tolist()[:3] == [paths.TORCH] * 3
    assert paths.layer_paths_frame([]).empty
