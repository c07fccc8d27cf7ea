"""torch_varlen attention: boundaries from position ids, wiring into transformers, clear refusals.

PyTorch's varlen kernel is FlashAttention and runs on CUDA only, so on a CPU the kernel is replaced by a
reference that runs causal SDPA on each sequence separately; what is tested here is everything around it.
The real kernel is measured on the H200 (benchmarks/gpu/NOTES.md).
"""

import functools

import pytest
import torch
import torch.nn.functional as F

from nbhelpers.kernels import varlen_attention
from nbhelpers.kernels.attention import attention_status, prepare_attention
from nbhelpers.kernels.varlen_attention import VARLEN_ATTENTION, sequence_boundaries, varlen_attention_forward
from nbhelpers.measure.config import RunConfig
from nbhelpers.planning.padding_grid import strategy_configs
from nbhelpers.validation import ConfigError


def reference_sdpa():
    """SDPA's math backend, the reference the varlen path is held to. torch's fused CPU kernel for bf16 with a
    padding mask needs AVX-512 (``pack_vnni2``) and raises under ATEN_CPU_CAPABILITY=default; the math backend
    computes the same attention on every CPU kernel set."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.MATH)


def reference_varlen_new(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                         enable_gqa=False):  # fmt: skip
    """torch >= 2.13's signature: causal through window_size, GQA through enable_gqa."""
    assert window_size == (-1, 0), "the caller must ask for causal attention"
    return _per_sequence(query, key, value, cu_seq_q, max_q, scale, enable_gqa)


def reference_varlen_old(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None):
    """torch 2.9-2.11's signature: causal through is_causal, no GQA (heads must already match)."""
    assert is_causal, "the caller must ask for causal attention"
    assert key.shape[1] == query.shape[1], "GQA heads must be repeated before this kernel"
    return _per_sequence(query, key, value, cu_seq_q, max_q, scale, False)


def _per_sequence(query, key, value, cu_seqlens, longest, scale, enable_gqa):
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    assert longest == max(lengths)
    assert cu_seqlens.dtype == torch.int32
    outs = []
    for start, n in zip(cu_seqlens[:-1].tolist(), lengths, strict=True):
        q, k, v = (t[start : start + n].transpose(0, 1) for t in (query, key, value))
        outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=enable_gqa))
    return torch.cat([o.transpose(0, 1) for o in outs])


def test_boundaries_of_a_packed_row():
    cu, longest = sequence_boundaries(torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]))
    assert cu.tolist() == [0, 3, 5, 9]
    assert cu.dtype == torch.int32
    assert longest == 4


def test_every_row_starts_a_sequence():
    cu, longest = sequence_boundaries(torch.tensor([[0, 1, 2, 3, 4], [7, 8, 0, 1, 2]]))
    assert cu.tolist() == [0, 5, 7, 10]
    assert longest == 5


# bf16 keeps 8 significant bits: a rounding moves a value by up to half a step, 2^-8 of its scale. The two sides run
# CPU SDPA on differently laid-out tensors, so a path may round the attention weights to bf16 where the other does
# not: |out - expected| <= 2^-8 * max|v| (the weights sum to 1), and each output's own rounding adds 2^-8 * |out|
# on either side (2^-7 relative).
BF16_HALF_STEP = 2**-8


def bf16_attention_bounds(value):
    """(rtol, atol) of two SDPA paths in bf16 on the same inputs (above)."""
    return 2 * BF16_HALF_STEP, BF16_HALF_STEP * float(value.abs().max())


# A model's logits in bf16: two paths whose fp32 values differ slightly round to neighbouring bf16 values, one step
# (2^-7 of the largest logit's scale); the attention outputs' own one-step differences carried to the logits can add
# another. A cross-entropy moves by at most twice its largest logit change (the softmax-weighted mean minus the
# label's logit), so the loss's bound follows from the logits'.
def bf16_logit_bound(logits):
    return 2 * 2**-7 * float(logits.abs().max())


def _attention(monkeypatch, kernel, kv_heads):
    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: kernel)
    torch.manual_seed(0)
    q = torch.randn(1, 4, 9, 8, dtype=torch.bfloat16)
    k, v = (torch.randn(1, kv_heads, 9, 8, dtype=torch.bfloat16) for _ in range(2))
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    out, weights = varlen_attention_forward(None, q, k, v, None, scaling=0.3, position_ids=position_ids)
    assert weights is None
    assert out.shape == (1, 9, 4, 8)
    expected = []
    for start, end in ((0, 3), (3, 5), (5, 9)):
        expected.append(
            F.scaled_dot_product_attention(
                q[..., start:end, :], k[..., start:end, :], v[..., start:end, :], is_causal=True, scale=0.3,
                enable_gqa=True,
            ).transpose(1, 2)
        )  # fmt: skip
    return out, torch.cat(expected, dim=1), v


@pytest.mark.parametrize("kernel", [reference_varlen_new, reference_varlen_old])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_each_sequence_attends_only_to_itself(monkeypatch, kernel, kv_heads):
    out, expected, v = _attention(monkeypatch, kernel, kv_heads)
    rtol, atol = bf16_attention_bounds(v)  # bf16 rounding (above)
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)


def test_one_sequence_across_the_row_differs(monkeypatch):
    """The comparison above can fail: attending over the whole row gives other outputs."""
    out, _, _ = _attention(monkeypatch, reference_varlen_new, 4)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 9, 8, dtype=torch.bfloat16) for _ in range(3))
    whole_row = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3).transpose(1, 2)
    assert (out[:, 3:] - whole_row[:, 3:]).abs().max() > 0.1


def test_packed_model_matches_padded_sdpa(monkeypatch):
    """A Qwen3 model with attn_implementation='torch_varlen' on a packed row equals SDPA on the padded batch."""
    from nbhelpers.data.collate import collate
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.models.loading import build_model

    calls = []

    @functools.wraps(reference_varlen_new)
    def counted(*args, **kwargs):
        calls.append(args[3].tolist())
        return reference_varlen_new(*args, **kwargs)

    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: counted)
    tokenizer = load_tokenizer()
    examples = load_examples("default", tokenizer, 3, 64)
    padded_model = build_model("qwen3-tiny", "sdpa", seed=0)
    prepare_attention(VARLEN_ATTENTION)
    packed_model = build_model("qwen3-tiny", VARLEN_ATTENTION, seed=0)
    assert packed_model.config._attn_implementation == VARLEN_ATTENTION
    with torch.autocast("cpu", dtype=torch.bfloat16):  # fp32 weights, bf16 attention: as measured on the GPU
        with reference_sdpa():
            padded = padded_model(**collate(examples, PaddingSettings("dynamic", max_length=64),
                                            tokenizer.pad_token_id))  # fmt: skip
        packed = packed_model(**collate(examples, PaddingSettings("packed", max_length=64), tokenizer.pad_token_id))
    # bf16 logits: a loss moves by at most twice its largest logit change (bf16_logit_bound)
    assert packed.loss.item() == pytest.approx(padded.loss.item(), abs=2 * bf16_logit_bound(padded.logits))
    lengths = [len(e["input_ids"]) for e in examples]
    assert len(calls) == packed_model.config.num_hidden_layers
    assert calls[0] == [0, lengths[0], lengths[0] + lengths[1], sum(lengths)]


def test_fp32_is_cast_under_autocast_and_refused_without():
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"needs fp16 or bf16 \(got torch.bfloat16, torch.float32\)"):
        varlen_attention.half_precision(q, q.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert {t.dtype for t in varlen_attention.half_precision(q, q.bfloat16())} == {torch.bfloat16}
    assert varlen_attention.half_precision(q.half())[0].dtype == torch.float16


def test_refusals_name_the_parameter():
    q = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="position_ids"):
        varlen_attention_forward(None, q, q, q, None)
    with pytest.raises(ValueError, match="dropout"):
        varlen_attention_forward(None, q, q, q, None, dropout=0.1, position_ids=torch.zeros(1, 3))
    with pytest.raises(ValueError, match="sliding-window"):
        varlen_attention_forward(None, q, q, q, None, position_ids=torch.zeros(1, 3), sliding_window=4)


def test_left_out_without_a_gpu_or_on_a_pre_ampere_gpu(monkeypatch):
    assert "CUDA" in attention_status(VARLEN_ATTENTION, "cpu")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert attention_status(VARLEN_ATTENTION, "cuda") == ""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))  # a T4, as on Colab's free tier
    assert attention_status(VARLEN_ATTENTION, "cuda") == (
        "needs an Ampere or newer GPU for FlashAttention (this one is sm75)"
    )
    configs, skipped = strategy_configs(RunConfig(), ["packed"], ["sdpa", VARLEN_ATTENTION], device="cpu")
    assert [c.attn_implementation for c in configs] == ["sdpa"]
    assert f"attention {VARLEN_ATTENTION}" in skipped


def test_config_accepts_torch_varlen_and_names_it_in_errors():
    assert RunConfig(attn_implementation=VARLEN_ATTENTION).attn_implementation == VARLEN_ATTENTION
    with pytest.raises(ConfigError, match="torch_varlen"):
        RunConfig(attn_implementation="varlen")


def test_boundaries_are_found_once_per_forward_pass(monkeypatch):
    """Every layer gets the same position_ids tensor; a new tensor (the next batch) is read again."""
    found = []
    original = varlen_attention.sequence_boundaries
    monkeypatch.setattr(
        varlen_attention, "sequence_boundaries", lambda p, keep=None: found.append(p) or original(p, keep)
    )
    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: reference_varlen_new)
    q = torch.zeros(1, 2, 4, 8, dtype=torch.bfloat16)
    first, second = torch.tensor([[0, 1, 0, 1]]), torch.tensor([[0, 1, 2, 3]])
    for position_ids in (first, first, first, second):
        varlen_attention_forward(None, q, q, q, None, position_ids=position_ids)
    assert [p.tolist() for p in found] == [[[0, 1, 0, 1]], [[0, 1, 2, 3]]]


def test_boundaries_skip_the_padding():
    position_ids = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    keep = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 1, 1, 1]], dtype=torch.bool)  # right, none, left
    cu, longest = sequence_boundaries(position_ids, keep)
    assert cu.tolist() == [0, 3, 8, 11] and longest == 5


def test_padded_rows_give_each_row_its_own_sequence_and_zero_pads(monkeypatch):
    """Left and right padding: real tokens match SDPA on each row alone; pads never reach the kernel."""
    seen = []

    @functools.wraps(reference_varlen_new)
    def kernel(q, k, v, cu_q, *args, **kwargs):
        seen.append((q.shape[0], cu_q.tolist()))
        return reference_varlen_new(q, k, v, cu_q, *args, **kwargs)

    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: kernel)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 6, 8, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    out, _ = varlen_attention_forward(None, q, k, v, mask, scaling=0.3, position_ids=torch.arange(6)[None])
    assert seen == [(9, [0, 4, 9])]
    assert torch.isfinite(out).all() and out[0, 4:].abs().max() == 0 and out[1, 0].abs().max() == 0
    for row, (start, end) in enumerate(((0, 4), (1, 6))):
        alone = F.scaled_dot_product_attention(
            q[row : row + 1, :, start:end], k[row : row + 1, :, start:end], v[row : row + 1, :, start:end],
            is_causal=True, scale=0.3,
        ).transpose(1, 2)  # fmt: skip
        rtol, atol = bf16_attention_bounds(v[row : row + 1, :, start:end])  # bf16 rounding (above)
        torch.testing.assert_close(out[row : row + 1, start:end], alone, atol=atol, rtol=rtol)


def test_a_mask_that_is_not_2d_is_refused():
    q = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="2D padding mask"):
        mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
        varlen_attention_forward(None, q, q, q, mask, position_ids=torch.zeros(1, 3))


@pytest.mark.parametrize("padding", ["static", "dynamic"])
def test_padded_batch_model_matches_sdpa(monkeypatch, padding):
    """Static and dynamic padding (several rows, pads on the right) through a Qwen3 model: finite and equal to
    SDPA, the kernel sees only real tokens (the H200 once gave a non-finite loss here, before unpadding)."""
    from nbhelpers.data.collate import collate
    from nbhelpers.data.loading import load_examples
    from nbhelpers.data.strategies import PaddingSettings
    from nbhelpers.data.tokenizer import load_tokenizer
    from nbhelpers.models.loading import build_model

    totals = []

    @functools.wraps(reference_varlen_new)
    def counted(*args, **kwargs):
        totals.append(args[0].shape[0])
        return reference_varlen_new(*args, **kwargs)

    monkeypatch.setattr(varlen_attention, "varlen_kernel", lambda: counted)
    tokenizer = load_tokenizer()
    examples = load_examples("default", tokenizer, 3, 256)
    batch = collate(examples, PaddingSettings(padding, max_length=256), tokenizer.pad_token_id)
    assert not bool(batch["attention_mask"].all())  # the batch really is padded
    sdpa_model = build_model("qwen3-tiny", "sdpa", seed=0)
    prepare_attention(VARLEN_ATTENTION)
    varlen_model = build_model("qwen3-tiny", VARLEN_ATTENTION, seed=0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with reference_sdpa():
            expected = sdpa_model(**batch)
        got = varlen_model(**batch)
    assert torch.isfinite(got.loss)
    real = batch["attention_mask"].bool()
    bound = bf16_logit_bound(expected.logits[real])  # bf16 logits: one rounding step each way (above)
    assert got.loss.item() == pytest.approx(expected.loss.item(), abs=2 * bound)
    torch.testing.assert_close(got.logits[real].float(), expected.logits[real].float(), atol=bound, rtol=0)
    assert set(totals) == {int(real.sum())}


def test_a_half_precision_step_on_a_cpu_without_avx512_runs_sdpa_on_its_math_backend(monkeypatch):
    """torch's fused CPU kernel raises for bf16 with a padding mask without AVX-512: the step's guard picks the math
    backend there (the same attention), and changes nothing on an AVX-512 CPU, for fp32 or on a GPU."""
    import contextlib

    from nbhelpers.kernels.attention import half_precision_sdpa_guard

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert isinstance(half_precision_sdpa_guard("cpu", "bf16"), contextlib.nullcontext)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert isinstance(half_precision_sdpa_guard("cpu", "fp32"), contextlib.nullcontext)
    assert isinstance(half_precision_sdpa_guard("cuda", "bf16"), contextlib.nullcontext)
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool).tril()
    mask[1, :, :, 3:] = False  # the second row padded after 3 tokens
    with half_precision_sdpa_guard("cpu", "bf16"):
        guarded = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with reference_sdpa():
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(guarded, expected)  # the math backend, the same kernels as the reference
