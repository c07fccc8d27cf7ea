"""The float8 and Cut Cross-Entropy entries: refused where they cannot run (with the reason), composed with Liger and
compile as the table says, float8's conversion leaving the lm head out, and CCE's loss path equal to eager's."""

from __future__ import annotations

import importlib.util
import types

import pytest

from nbhelpers.kernels import cce, float8
from nbhelpers.kernels.doctor import NOT_HERE, check_path, fused_paths, installed_versions
from nbhelpers.kernels.probes import NOT_RUNNABLE
from nbhelpers.kernels.registry import (
    KERNEL_BACKENDS,
    curve_tolerance,
    kernel_backend,
    liger_switches_for,
    precision_tolerance,
    requested_kernels,
)
from nbhelpers.kernels.spec import SAME_PRECISION_CURVE, BackendUnavailable
from nbhelpers.measure.config import RunConfig
from nbhelpers.planning.device import refusal
from nbhelpers.validation import ConfigError

FLOAT8_ENTRIES = [n for n in KERNEL_BACKENDS if {"float8", "float8_rowwise"} & set(kernel_backend(n).components)]
CCE_ENTRIES = [name for name in KERNEL_BACKENDS if "cce" in kernel_backend(name).components]


def test_float8_is_refused_on_a_cpu_and_below_compute_capability_8_9_with_the_reason(monkeypatch):
    assert float8.float8_status("cpu").startswith("float8 matmuls need an NVIDIA GPU of compute capability 8.9")
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # torchao "installed"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))  # A100
    assert float8.float8_status("cuda").endswith("this GPU is 8.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # H100/H200
    assert float8.float8_status("cuda") == ""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert float8.float8_status("cuda") == "missing package: torchao is not installed"


@pytest.mark.parametrize("name", FLOAT8_ENTRIES)
def test_planning_leaves_every_float8_entry_out_on_a_cpu_with_the_reason(name):
    why = refusal(name, "sdpa", "cpu", model="qwen3-tiny", packed=False)
    assert why == f"kernels={name!r}: {float8.float8_status('cpu')}"


@pytest.mark.parametrize("name", ["float8", "float8_rowwise"])
def test_applying_float8_on_a_cpu_is_refused_before_the_model_is_touched(name):
    with pytest.raises(BackendUnavailable, match="compute capability 8.9"):
        kernel_backend(name).apply(types.SimpleNamespace(), (), "cpu")


def test_the_doctor_reads_the_new_entries_packages():
    packages = installed_versions()
    assert {"torchao", "cut-cross-entropy"} <= set(packages)
    paths = {p.path: p for p in fused_paths()}
    assert paths["kernels cce"].packages == ("cut-cross-entropy",) and paths["kernels float8"].packages == ("torchao",)


def test_the_doctor_reports_float8_not_runnable_on_a_cpu_and_its_probe_says_why():
    paths = {p.path: p for p in fused_paths()}
    for name in ("float8", "float8_rowwise"):
        packages = installed_versions() | {"torchao": "0.18.0"}  # the verdict does not hinge on the package here
        verdict = check_path(paths[f"kernels {name}"], "cpu", packages, [])
        assert verdict.verdict == NOT_HERE and "compute capability 8.9" in verdict.reason
        [result] = kernel_backend(name).probe("cpu")
        assert result.status == NOT_RUNNABLE and "compute capability 8.9" in result.detail


def test_float8_entries_are_a_looser_precision_class_and_compose_as_the_table_says():
    tensorwise = kernel_backend("float8")
    assert tensorwise.precision is not None and tensorwise.precision.rel > 2e-2  # looser than bf16 autocast's
    assert curve_tolerance("float8+compile") == tensorwise.curve != SAME_PRECISION_CURVE
    assert tensorwise.curve.step_rtol > SAME_PRECISION_CURVE.step_rtol and tensorwise.curve.window > 1
    assert precision_tolerance("liger+float8+cce") == tensorwise.precision and precision_tolerance("cce") is None
    assert curve_tolerance("liger") == SAME_PRECISION_CURVE == curve_tolerance("not in the table")
    assert requested_kernels("float8_rowwise+compile", ()) == ("float8_rowwise", "compile")
    assert set(FLOAT8_ENTRIES) >= {"float8", "float8+compile", "liger+float8", "float8_rowwise+compile"}
    with pytest.raises(ConfigError, match="kernels='float8_fast'.*'float8', 'liger\\+float8', 'float8\\+compile'"):
        RunConfig(kernels="float8_fast")


def test_cce_takes_liger_only_without_its_cross_entropy_switches():
    assert liger_switches_for("liger+cce", ("rope", "swiglu", "cross_entropy")) == ("rope", "swiglu")
    assert liger_switches_for("liger", ("rope", "cross_entropy")) == ("rope", "cross_entropy")
    assert liger_switches_for("cce", ("rope",)) == ()
    assert RunConfig(kernels="liger+cce", liger_kernels=("rope", "rms_norm")).liger_kernels == ("rope", "rms_norm")
    with pytest.raises(ConfigError, match="liger_kernels=.*without cross_entropy under kernels='liger\\+cce'"):
        RunConfig(kernels="liger+cce")  # the default switches include Liger's cross-entropy
    assert RunConfig(kernels="cce").kernels == "cce"  # no Liger part: its switches mean nothing
    assert requested_kernels("liger+cce", ("rope",)) == ("rope", "cut_cross_entropy")
    assert {"cce", "liger+cce", "cce+compile"} <= set(CCE_ENTRIES)


def test_cce_is_refused_without_its_package_with_the_reason(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert cce.cce_status("cuda") == "missing package: cut-cross-entropy is not installed"
    assert cce.cce_status("cpu") == "missing package: cut-cross-entropy is not installed"


def test_float8_entries_ask_for_packed_rows_in_multiples_of_16_and_the_others_do_not():
    from nbhelpers.kernels.registry import KERNEL_BACKENDS, token_multiple
    from nbhelpers.measure.config import RunConfig

    for name in KERNEL_BACKENDS:
        assert token_multiple(name) == (16 if "float8" in name else 1), name
    assert token_multiple("not-a-backend") == 1
    packed = RunConfig(model="qwen3-tiny", kernels="liger+float8+regional_compile", padding="token_budget")
    assert packed.padding_settings.token_multiple == 16
    assert packed.replace(kernels="cce+regional_compile").padding_settings.token_multiple == 1


# -- on the model (torch; torchao and cut-cross-entropy where installed) -------------------------------------------


def test_float8_converts_every_eligible_linear_but_the_lm_head():
    pytest.importorskip("torchao")
    torch = pytest.importorskip("torch")
    from nbhelpers.models.loading import build_model

    model = build_model("qwen3-tiny")
    model.model.layers[0].mlp.up_proj = torch.nn.Linear(model.config.hidden_size, 40, bias=False)  # 40 % 16 != 0
    model.model.layers[0].mlp.down_proj = torch.nn.Linear(40, model.config.hidden_size, bias=False)
    report = kernel_backend("float8").report
    assert report(model) == {"float8_tensorwise": False}
    float8.convert_linears(model, "tensorwise", emulate=True)  # emulated float8 matmuls: a CPU test only
    names = {name: type(m).__name__ for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    assert names["lm_head"] == "Linear" and names["model.layers.0.mlp.up_proj"] == "Linear"
    assert names["model.layers.0.self_attn.q_proj"] == names["model.layers.1.mlp.down_proj"] == "Float8Linear"
    assert report(model) == {"float8_tensorwise": True}
    assert kernel_backend("float8_rowwise").report(model) == {"float8_rowwise": False}  # another recipe's config


def test_cce_forward_matches_eager_loss_and_gradients_on_a_cpu():
    """CCE's torch.compile implementation (what runs on a CPU) in the patched forward, against the model's own loss:
    transformers' shift, -100 ignored, a token-sum loss divided by num_items_in_batch; no logits in training."""
    pytest.importorskip("cut_cross_entropy")
    torch = pytest.importorskip("torch")
    from nbhelpers.kernels.backends import apply_backend
    from nbhelpers.models.loading import build_model

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (2, 24), generator=generator)
    labels = ids.clone()
    labels[:, :5] = -100

    def step(kernels: str) -> tuple[float, float, object]:
        model = build_model("qwen3-tiny")
        model.train()
        report = apply_backend(model, kernels, (), "cpu")
        output = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(30), use_cache=False)
        output.loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
        return float(output.loss), float(norm), (output.logits, report.get("cut_cross_entropy"))

    eager, patched = step("eager"), step("cce")
    assert eager[2] != (None, True) and patched[2] == (None, True)  # CCE returned no logits, and is reported
    # the backend table's cpu_tolerance (its basis says why)
    assert patched[0] == pytest.approx(eager[0], rel=kernel_backend("cce").cpu_tolerance.rel)
    assert patched[1] == pytest.approx(eager[1], rel=kernel_backend("cce").cpu_tolerance.rel)


def test_cce_asks_for_the_exact_gradient_in_training_and_in_the_doctors_probe(monkeypatch):
    """CCE's default gradient filter drops every softmax entry below 2^-12, all of them at random initialisation:
    the loss path and the probe both turn it off, so the probe checks the gradient that training gets."""
    pytest.importorskip("cut_cross_entropy")
    torch = pytest.importorskip("torch")
    import cut_cross_entropy

    calls: list[dict[str, object]] = []
    real = cut_cross_entropy.linear_cross_entropy

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(cut_cross_entropy, "linear_cross_entropy", spy)
    hidden, weight = torch.randn(1, 6, 8, requires_grad=True), torch.randn(32, 8, requires_grad=True)
    labels = torch.tensor([[-100, 3, 5, 7, 9, 11]])
    cce.cut_loss(hidden, weight, labels, None, None, "torch_compile").backward()
    cce.probe_cce("cpu")
    assert len(calls) >= 2 and all("filter_eps" in kw and kw["filter_eps"] is None for kw in calls)
    assert cce.CCE_FILTER_EPS is None


def _linear_cross_entropy_with(keep_term=None, hidden_gradient=None):
    """The lm head and cross-entropy with a backward of its own: ``keep_term(d)`` zeroes softmax terms before they
    are used (a filter), ``hidden_gradient(d, w)`` sums the hidden states' gradient (default: one fp32 matmul)."""
    torch = pytest.importorskip("torch")

    class HeadLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w, y):
            ctx.save_for_backward(h, w, y)
            return cce.linear_cross_entropy_reference(h, w, y)

        @staticmethod
        def backward(ctx, upstream):
            h, w, y = ctx.saved_tensors
            keep = y != cce.IGNORE_INDEX
            probs = torch.softmax((h @ w.t()).float(), dim=-1)
            d = probs - torch.nn.functional.one_hot(y.clamp(min=0), w.shape[0]).float()
            d = (d if keep_term is None else keep_term(d)) * keep[:, None] / keep.sum() * upstream
            grad_h = d @ w.float() if hidden_gradient is None else hidden_gradient(d, w)
            return grad_h.to(h.dtype), (d.t() @ h.float()).to(w.dtype), None

    return HeadLoss.apply


def _filtered_linear_cross_entropy(eps: float):
    """A backward that drops every softmax entry below ``eps`` (CCE's filter, entry by entry): what the doctor's
    probe must catch."""
    torch = pytest.importorskip("torch")
    return _linear_cross_entropy_with(keep_term=lambda d: torch.where(d.abs() < eps, torch.zeros_like(d), d))


def _bf16_summed_linear_cross_entropy(block: int = 128):
    """A backward that adds each block of ``block`` vocabulary entries' share of the hidden-state gradient into a
    bf16 sum (cut-cross-entropy 25.1.1's backward, whose gradient buffer has the hidden states' dtype)."""
    torch = pytest.importorskip("torch")

    def summed_in_bf16(d, w):
        summed = torch.zeros(d.shape[0], w.shape[1], dtype=torch.bfloat16)
        for start in range(0, w.shape[0], block):
            summed = (summed.float() + d[:, start : start + block] @ w[start : start + block].float()).bfloat16()
        return summed

    return _linear_cross_entropy_with(hidden_gradient=summed_in_bf16)


def _probe(fn, inputs, norm: bool = True):
    from nbhelpers.kernels.probes import compare_kernels

    rtol, atol, norm_rtol = cce.PROBE_TOLERANCE["cuda"]  # the doctor's bf16 bounds: what these tests must pass or fail
    reference = cce.after_final_norm(cce.linear_cross_entropy_reference)
    return compare_kernels("probe", cce.after_final_norm(fn), reference, inputs, rtol, atol,
                           norm_rtol=norm_rtol if norm else None, input_names=cce.PROBE_INPUTS)


def test_the_cce_probe_catches_a_gradient_filter_that_an_elementwise_bound_lets_through():
    """In the probe's regime (near-uniform softmax over 16,384 entries) a filter at CCE's 2^-12 drops all but the
    correct token's term: the GPU tolerances' elementwise bound passes it, their norm bound fails it, and the
    exact gradient with bf16-rounded logits (what a bf16 kernel's rounding does) passes both."""
    torch = pytest.importorskip("torch")
    from nbhelpers.kernels.probes import FAIL, PASS

    inputs = cce.cce_probe_inputs("cpu", torch.float32)
    filtered = _filtered_linear_cross_entropy(2.0**-12)
    elementwise, by_norm = _probe(filtered, inputs, norm=False), _probe(filtered, inputs)
    assert elementwise.status == PASS and by_norm.status == FAIL and "row's |diff| / |reference|" in by_norm.detail

    def bf16_logits(h, w, y):
        return torch.nn.functional.cross_entropy((h @ w.t()).bfloat16().float(), y, ignore_index=cce.IGNORE_INDEX)

    exact = _probe(bf16_logits, inputs)
    assert exact.status == PASS, exact.detail


def test_the_cce_probe_catches_hidden_state_gradients_summed_in_bf16():
    """Summed block by block in bf16, the small softmax terms of each token's gradient round away: each token's
    gradient stays within 2% of the reference, but the final norm weight's, which adds them over 2,048 tokens, does
    not, and the probe fails on that gradient."""
    torch = pytest.importorskip("torch")
    from nbhelpers.kernels.probes import FAIL

    inputs = cce.cce_probe_inputs("cpu", torch.float32)
    result = _probe(_bf16_summed_linear_cross_entropy(), inputs)
    assert result.status == FAIL, result.detail
    assert "gradient of the final norm's weight: a row's |diff| / |reference|" in result.detail
    assert "gradient of the hidden states" not in result.detail and "gradient of the lm head" not in result.detail


def test_the_doctors_cce_probe_passes_on_a_cpu_with_the_norm_bound():
    pytest.importorskip("cut_cross_entropy")
    (result,) = cce.probe_cce("cpu")
    assert result.status == "pass" and "norm_rtol" in result.detail, result.detail
