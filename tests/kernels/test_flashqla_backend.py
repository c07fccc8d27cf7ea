"""The flashqla backend: FlashQLA's delta rule beside fla's convolution and gated norm, its refusals from injected
facts (fla's first, then the package and the GPU), its table entry and composites, and the report read off the
live modeling module (FlashQLA and fla stand in: neither runs on a CPU)."""

import pytest
from hybrid_helpers import tiny_hybrid
from test_fla_backend import FakeFusedNorm

from nbhelpers.kernels import fla, flashqla
from nbhelpers.kernels import hybrid_paths as paths
from nbhelpers.kernels.backends import apply_backend, patch_report
from nbhelpers.kernels.probes import NOT_RUNNABLE
from nbhelpers.kernels.registry import family_kernel_refusal, kernel_backend
from nbhelpers.kernels.spec import BackendUnavailable
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.families import FAMILIES
from nbhelpers.planning.candidates import build_space

HOPPER, AMPERE, BLACKWELL = (9, 0), (8, 0), (10, 0)


def facts(capability=HOPPER, has_fla=True, device="cuda"):
    return {"device": device, "capability": capability, "triton_version": "3.6.0", "has_fla": has_fla,
            "has_tilelang": True}  # fmt: skip


@pytest.mark.parametrize(
    ("given", "has_flashqla", "expected"),
    [
        (facts(), True, ""),
        (facts(BLACKWELL), True, ""),
        (facts(AMPERE), True, "this GPU is sm80"),  # FlashQLA's import raises there: refused before it
        (facts(), False, "pip install flash-qla"),
        (facts(has_fla=False), True, "flash-linear-attention"),  # fla's conv and norm come with it
        (facts(None, device="cpu"), True, "no GPU"),
    ],
)
def test_refusals_name_what_is_missing_and_the_fallback(given, has_flashqla, expected):
    reason = flashqla.flashqla_refusal(given, has_flashqla)
    assert reason == "" if not expected else expected in reason
    if "flash-qla" in expected or "sm80" in expected:
        assert "kernels='fla+liger'" in reason  # the fallback, named


def test_the_table_offers_it_like_fla_and_never_beside_fla():
    entry = kernel_backend("flashqla")
    assert entry.requested(()) == ("flashqla_delta_rule", "fused_conv1d", fla.FUSED_GATED_NORM)
    assert kernel_backend("flashqla+liger+regional_compile").components == ("flashqla", "liger", "regional_compile")
    assert "gated_deltanet" in " ".join(kernel_backend("flashqla").needs)
    assert family_kernel_refusal(FAMILIES["qwen3"], "flashqla")  # no Gated DeltaNet layers
    with pytest.raises(BackendUnavailable):
        kernel_backend("fla+flashqla")  # both take over the linear attention
    with pytest.raises(BackendUnavailable):
        kernel_backend("flashqla+compile")  # offered compiled layer by layer only


def test_on_this_cpu_it_is_refused_before_anything_is_patched():
    model = tiny_hybrid()
    apply_backend(model, "eager", (), "cpu")
    before = [row["delta_rule"] for row in paths.linear_layers(model)]
    with pytest.raises(BackendUnavailable):
        apply_backend(model, "flashqla", (), "cpu")
    assert [row["delta_rule"] for row in paths.linear_layers(model)] == before
    runnable, dropped = build_space(RunConfig(model="qwen3.5-tiny"), ["flashqla+liger"], ["packed"], ["sdpa"])
    assert not runnable and dropped[0][0].kernels == "flashqla+liger"
    (probe,) = flashqla.probe_flashqla("cpu")
    assert probe.status == NOT_RUNNABLE and "sm90" in probe.detail


def test_the_report_reads_flashqlas_delta_rule_beside_flas_conv_and_norm(monkeypatch):
    model = tiny_hybrid()
    fake_rule = paths.tag(lambda *a, **k: None, paths.FLASHQLA_DELTA_RULE, paths.KEEPS_APART)
    fake_conv = paths.tag(lambda *a, **k: None, paths.FLA_CONV, paths.KEEPS_APART)
    monkeypatch.setattr(flashqla, "flashqla_delta_rule", lambda: fake_rule)
    monkeypatch.setattr(fla, "fla_delta_rule", lambda: paths.tag(lambda *a, **k: None, paths.FLA_DELTA_RULE,
                                                                 paths.KEEPS_APART))  # fmt: skip
    monkeypatch.setattr(fla, "fused_conv", lambda: fake_conv)
    monkeypatch.setattr(fla, "fused_gated_norm", FakeFusedNorm)
    try:
        flashqla.use_flashqla(model)
        report = patch_report(model)
        assert report["flashqla_delta_rule"] and report["fused_conv1d"] and report[fla.FUSED_GATED_NORM]
        assert not report["fla_delta_rule"] and not report["reference_linear_attention"]
        assert {row["delta_rule"] for row in paths.linear_layers(model)} == {paths.FLASHQLA_DELTA_RULE}
    finally:
        paths.use_reference(model)
