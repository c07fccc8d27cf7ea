"""Regional torch.compile: parity with eager on qwen3-tiny (fp32), one graph for every layer and length, composing
with torch_varlen packed rows and with Liger (Triton's interpreter), its table entry and refusals.

PyTorch's varlen kernel is CUDA only: on a CPU it is replaced by a traceable stand-in (SDPA with a block-diagonal
causal mask built from cu_seqlens), so what is tested is everything around the kernel, compiled.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.utils as dynamo_utils
import torch.nn.functional as F

from nbhelpers.kernels import varlen_attention
from nbhelpers.kernels.backends import apply_backend
from nbhelpers.kernels.registry import (
    cpu_tolerance,
    kernel_backend,
    liger_switches_for,
    model_setup_parts,
    switch_conflict,
    training_kwargs,
)  # fmt: skip
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.loading import build_model
from nbhelpers.planning.candidates import build_space

BATCHES = ((48, 3), (40, 2))  # (tokens of one packed row, sequences in it): the second of another length


def standin_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False):
    """torch >= 2.13's varlen signature, computed as SDPA with a block-diagonal causal mask (traceable)."""
    assert window_size == (-1, 0)
    n = q.shape[0]
    sequence = torch.searchsorted(cu_q[1:], torch.arange(n), right=True)
    position = torch.arange(n)
    mask = (sequence[:, None] == sequence[None, :]) & (position[:, None] >= position[None, :])
    out = F.scaled_dot_product_attention(*(t.transpose(0, 1) for t in (q, k, v)), attn_mask=mask, scale=scale,
                                         enable_gqa=enable_gqa)  # fmt: skip
    return out.transpose(0, 1)


def packed_batch(length: int, sequences: int) -> dict[str, torch.Tensor]:
    ids = torch.randint(0, 100, (1, length), generator=torch.Generator().manual_seed(length))
    cuts = [length * i // sequences for i in range(sequences + 1)]
    positions = torch.cat([torch.arange(cuts[i + 1] - cuts[i]) for i in range(sequences)])[None]
    return {"input_ids": ids, "position_ids": positions, "labels": ids, "use_cache": False}


def steps(
    kernels: str, switches: tuple[str, ...] = (), prepare=None
) -> tuple[list[tuple[float, float]], list[int]]:
    """(loss, gradient norm) of each packed batch, and the new compiled graphs each batch made; ``prepare(model)``
    runs before the backend is applied."""
    model = build_model("qwen3-tiny", varlen_attention.VARLEN_ATTENTION, seed=0)
    model.train()
    if prepare is not None:
        prepare(model)
    apply_backend(model, kernels, switches, "cpu")
    return train_batches(model, [packed_batch(length, sequences) for length, sequences in BATCHES])


def train_batches(model, batches) -> tuple[list[tuple[float, float]], list[int]]:
    """(loss, gradient norm) of a training step on each batch, and the new compiled graphs each one made."""
    results, graphs = [], []
    for batch in batches:
        before = dynamo_utils.counters["stats"]["unique_graphs"]
        loss = model(**batch).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        model.zero_grad(set_to_none=True)
        results.append((float(loss.detach()), float(norm)))
        graphs.append(dynamo_utils.counters["stats"]["unique_graphs"] - before)
    return results, graphs


@pytest.fixture(scope="module")
def varlen_on_cpu():
    patch = pytest.MonkeyPatch()
    patch.setattr(varlen_attention, "varlen_kernel", lambda: standin_varlen)
    patch.setattr(varlen_attention, "half_precision", lambda *tensors: tensors)  # fp32 on the CPU stand-in
    varlen_attention.register()
    yield
    patch.undo()


@pytest.fixture(scope="module")
def eager_steps(varlen_on_cpu):
    return steps("eager")[0]


def close(ours, eager, kernels):
    rel = cpu_tolerance(kernels).rel  # the backend table's cpu_tolerance (its basis says why)
    for (loss, norm), (loss0, norm0) in zip(ours, eager, strict=True):
        assert loss == pytest.approx(loss0, rel=rel) and norm == pytest.approx(norm0, rel=rel)


def test_regional_compile_matches_eager_and_compiles_once(eager_steps):
    torch._dynamo.reset()
    ours, graphs = steps("regional_compile")
    close(ours, eager_steps, "regional_compile")
    assert graphs == [1, 0]  # one graph for both layers; the second length reuses it (no recompile)
    assert dynamo_utils.counters["graph_break"] == {} or not any(
        "varlen" in reason for reason in dynamo_utils.counters["graph_break"]
    )


LIGER_SCRIPT = """
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"  # Liger's CPU switch: set before Triton is imported
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import pytest
from test_regional_compile import steps, standin_varlen
from nbhelpers.kernels import varlen_attention
varlen_attention.varlen_kernel = lambda: standin_varlen
varlen_attention.half_precision = lambda *tensors: tensors
varlen_attention.register()
print(json.dumps([steps("eager")[0], *steps("liger+regional_compile", ("cross_entropy",))]))
"""


def test_composes_with_liger_in_triton_interpreter(tmp_path):
    import json
    import subprocess
    import sys

    script = [sys.executable, "-c", LIGER_SCRIPT, __file__]
    result = subprocess.run(script, capture_output=True, text=True, timeout=600, check=True)
    eager, ours, graphs = json.loads(result.stdout.strip().splitlines()[-1])
    close(ours, eager, "liger+regional_compile")
    assert graphs[1] == 0  # the second length reuses the layer's graph


# Why a compiled float8 step may differ from the same float8 layers in eager mode by more than compile's fp32
# tolerance: Inductor sums in another order (<= 3.2e-7 apart before any cast), and an element that sits on a float8
# rounding boundary then rounds to the neighbouring float8 value, a whole float8 step (1/8 of it for e4m3). Only the
# few elements that close to a boundary move, while every element's rounding makes float8's own deviation from fp32;
# so the re-rounded elements move the result by a small fraction of that deviation. Measured on qwen3-tiny: 9.4e-8 of
# the gradient norm on one CPU, 1.04e-4 on another, against float8's own 2.4e-3 (0.04 of it). The bound takes a
# quarter of float8's deviation, measured in the same test; and the compiled step must keep at least half of that
# deviation, which shows float8 ran inside the compiled layers.
FLOAT8_REROUNDING_SHARE = 0.25
FLOAT8_KEPT_SHARE = 0.5


def test_compiles_float8_layers_once_and_matches_their_eager_steps(varlen_on_cpu, eager_steps):
    """float8 + regional compile: torchao's Float8Linear (emulated float8 matmuls: CPUs have none) inside the compiled
    layers, one graph for every layer and length, the same losses and gradients as the same float8 layers in eager
    mode within compile's tolerance plus float8's re-rounding (above); float8 itself is refused on a CPU, so its
    conversion is done here by hand, as the entry does on a GPU."""
    pytest.importorskip("torchao")
    from nbhelpers.kernels import float8

    def to_float8(model):
        float8.convert_linears(model, "tensorwise", emulate=True)

    eager_float8 = steps("eager", prepare=to_float8)[0]
    torch._dynamo.reset()
    ours, graphs = steps("regional_compile", prepare=to_float8)
    assert graphs == [1, 0]
    compile_rel = cpu_tolerance("regional_compile").rel
    for step, (fp32, eager8, compiled8) in enumerate(zip(eager_steps, eager_float8, ours, strict=True)):
        for what, reference, eager, mine in zip(("loss", "gradient norm"), fp32, eager8, compiled8, strict=True):
            float8_deviation = abs(eager - reference)
            bound = compile_rel * abs(eager) + FLOAT8_REROUNDING_SHARE * float8_deviation
            assert abs(mine - eager) <= bound, (
                f"step {step} {what}: compiled float8 {mine!r}, eager float8 {eager!r}, fp32 {reference!r}; "
                f"apart {abs(mine - eager):.3g} > bound {bound:.3g}"
            )
            assert abs(mine - reference) >= FLOAT8_KEPT_SHARE * float8_deviation, (
                f"step {step} {what}: compiled float8 {mine!r} is as close to fp32 {reference!r} as if float8 "
                f"had not run (eager float8 {eager!r})"
            )


def test_composes_with_cut_cross_entropy_outside_the_layers(eager_steps):
    """cce + regional compile: CCE's loss (its torch.compile reference on a CPU) after the compiled layers, the
    same losses and gradients as eager within CCE's tolerance."""
    pytest.importorskip("cut_cross_entropy")
    torch._dynamo.reset()
    ours, _ = steps("cce+regional_compile")
    close(ours, eager_steps, "cce+regional_compile")


def test_float8_and_cut_cross_entropy_compose_with_regional_compile_in_the_table():
    assert kernel_backend("float8+regional_compile").components == ("float8", "regional_compile")
    assert kernel_backend("liger+float8+regional_compile").components == ("liger", "float8", "regional_compile")
    assert kernel_backend("float8+cce+regional_compile").precision == kernel_backend("float8").precision
    assert liger_switches_for("liger+float8+regional_compile", ("rope", "cross_entropy")) == ("cross_entropy",)
    runnable, dropped = build_space(RunConfig(model="qwen3-tiny"), ["float8+regional_compile", "cce+regional_compile"],
                                    ["packed"], ["sdpa"])  # fmt: skip
    assert [c.kernels for c in runnable] == ["cce+regional_compile"]  # float8 is refused on a CPU, with the reason
    assert dropped[0][0].kernels == "float8+regional_compile" and "compute capability 8.9" in dropped[0][1]


def test_report_names_every_layer():
    model = build_model("qwen3-tiny")
    report = apply_backend(model, "regional_compile", (), "cpu")
    assert report["regional_compile"] and not report["compile"]
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)


def test_table_entry_exports_its_setup_and_no_trainer_flag():
    backend = kernel_backend("liger+regional_compile")
    assert backend.components == ("liger", "regional_compile") and "inductor" in backend.caches
    kwargs, _ = training_kwargs("liger+regional_compile", ("rope",))
    assert kwargs["use_liger_kernel"] is True and kwargs["torch_compile"] is False
    assert [p.name for p in model_setup_parts("regional_compile")] == ["regional_compile"]


def test_probe_passes_on_cpu():
    results = kernel_backend("regional_compile").probe("cpu")
    assert [r.status for r in results] == ["pass"] * len(results) and len(results) == 2


def test_tuner_candidates_and_refusals():
    workload = RunConfig(model="qwen3-tiny")
    runnable, dropped = build_space(workload, ["regional_compile", "liger+regional_compile"], ["packed"], ["sdpa"])
    assert [c.kernels for c in runnable] == ["regional_compile", "liger+regional_compile"]
    hybrid = workload.replace(model="qwen3.5-tiny")  # two kinds of layer: one graph each
    runnable, dropped = build_space(hybrid, ["regional_compile", "fla+liger+regional_compile"], ["packed"], ["sdpa"])
    assert [c.kernels for c in runnable] == ["regional_compile"]
    assert dropped[0][0].kernels == "fla+liger+regional_compile" and "flash-linear-attention" in dropped[0][1]


def test_tuner_leaves_the_layers_liger_kernels_to_regional_compile():
    """Inductor fuses RoPE, RMSNorm and SwiGLU inside the compiled layers (on an H200 Liger's own kernels there were
    slower): the candidates beside regional compile take Liger's loss kernels only, Liger alone keeps every switch."""
    workload = RunConfig(model="qwen3-tiny", liger_kernels=("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"))
    runnable, _ = build_space(workload, ["liger", "liger+regional_compile"], ["packed"], ["sdpa"])
    sets = {(c.kernels, c.liger_kernels) for c in runnable}
    assert sets == {
        ("liger", ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy")),
        ("liger", ("rope", "rms_norm", "swiglu", "cross_entropy")),
        ("liger+regional_compile", ("fused_linear_cross_entropy",)),
        ("liger+regional_compile", ("cross_entropy",)),
    }
    assert liger_switches_for("liger+regional_compile", ("rms_norm",)) == ("rms_norm",)  # nothing else: kept
    assert not switch_conflict("liger+regional_compile", ("rms_norm", "cross_entropy"))  # a config may name them


def test_liger_autograd_functions_run_eagerly_between_compiled_pieces(monkeypatch):
    """Liger's RMSNorm and SwiGLU modules call their autograd Functions directly, which Dynamo cannot trace on a GPU:
    once made opaque, the Function runs outside the trace (graph break) and its backward still reaches the input."""
    import sys
    import types

    from nbhelpers.kernels.regional_compile import OpaqueFunction, opaque_kernel_functions

    traced: list[bool] = []

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            traced.append(torch.compiler.is_compiling())
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    fake = types.ModuleType("liger_kernel.transformers.fake_norm")
    fake.Double = Double
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    assert f"{fake.__name__}.Double" in opaque_kernel_functions()
    assert isinstance(fake.Double, OpaqueFunction) and fake.Double.forward is Double.forward

    def block(x):
        return torch.sin(fake.Double.apply(torch.cos(x)))

    torch._dynamo.reset()
    x = torch.randn(8, requires_grad=True)
    torch.compile(block)(x).sum().backward()
    assert traced == [False]  # run eagerly, not traced
    expected = torch.cos(2 * torch.cos(x.detach())) * 2 * -torch.sin(x.detach())
    torch.testing.assert_close(x.grad, expected)


def hybrid_steps(kernels: str) -> tuple[list[tuple[float, float]], list[int]]:
    """(loss, gradient norm) of qwen3.5-tiny on packed rows that carry their boundaries (as the collator hands them
    to a hybrid), and the new compiled graphs each row made."""
    model = build_model("qwen3.5-tiny", "sdpa", seed=0)
    model.train()
    apply_backend(model, kernels, (), "cpu")
    return train_batches(model, [with_boundaries(packed_batch(length, sequences)) for length, sequences in BATCHES])


def with_boundaries(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A packed row with the boundary keyword arguments the collator adds for a hybrid (cu_seq_lens, max_length,
    seq_idx), from its position_ids."""
    bounds = varlen_attention.boundary_kwargs(batch["position_ids"])
    cuts = bounds["cu_seq_lens_q"]
    seq_idx = torch.repeat_interleave(torch.arange(len(cuts) - 1, dtype=torch.int32), (cuts[1:] - cuts[:-1]).long())
    return batch | bounds | {"seq_idx": seq_idx[None]}


@pytest.mark.slow  # Inductor compiles both kinds of layer on the CPU (about 30 s)
def test_hybrid_layers_compile_around_their_linear_attention():
    """qwen3.5-tiny (Gated DeltaNet and gated attention layers) on the reference path: compiled layer by layer it
    matches eager within compile's tolerance; a second length reuses the graphs of the first; the delta rule and
    the convolution (the modeling module's hooks) run outside the graphs; the per-layer report still names them."""
    from nbhelpers.kernels import hybrid_paths

    eager, _ = hybrid_steps("eager")
    torch._dynamo.reset()
    dynamo_utils.counters.clear()
    ours, graphs = hybrid_steps("regional_compile")
    close(ours, eager, "regional_compile")
    assert graphs[0] > 0 and graphs[1] == 0
    breaks = " ".join(dynamo_utils.counters["graph_break"])
    assert "segmented_delta_rule" in breaks and "segmented_conv" in breaks  # the hooks, called eagerly
    model = build_model("qwen3.5-tiny", "sdpa", seed=0)
    apply_backend(model, "regional_compile", (), "cpu")
    linear = hybrid_paths.linear_layers(model)
    assert linear and all(row["delta_rule"] == hybrid_paths.TORCH for row in linear)
    assert all(row["delta_rule_boundaries"] == row["conv_boundaries"] == hybrid_paths.PER_SEQUENCE for row in linear)


def test_hybrid_hooks_are_wrapped_once_and_keep_their_tags():
    """keep_hooks_eager: each hook of a hybrid's modeling module bound to itself under torch.compiler.disable,
    once (a second call wraps nothing), with what the per-layer report reads still on it; a dense model has none."""
    from nbhelpers.kernels import hybrid_paths
    from nbhelpers.kernels.regional_compile import keep_hooks_eager

    model = build_model("qwen3.5-tiny", "sdpa", seed=0)
    apply_backend(model, "eager", (), "cpu")
    modeling = hybrid_paths.hybrid_modeling(model)
    tags = {hook: getattr(modeling, hook).hybrid_boundaries for hook in hybrid_paths.HYBRID_HOOKS}
    try:
        assert keep_hooks_eager(model) == list(hybrid_paths.HYBRID_HOOKS)
        assert keep_hooks_eager(model) == []
        for hook in hybrid_paths.HYBRID_HOOKS:
            function = getattr(modeling, hook)
            assert function._torchdynamo_disable and function.hybrid_boundaries == tags[hook]
    finally:
        apply_backend(model, "eager", (), "cpu")  # the hooks bound afresh for the rest of the process
    assert keep_hooks_eager(build_model("qwen3-tiny")) == []
