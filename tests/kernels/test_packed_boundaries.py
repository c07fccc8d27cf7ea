"""A packed row's boundaries are made into fla's form once per row and shared by every layer's convolution and delta
rule, in the forward and the recompute (fla, not installed here, is stood in for)."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from hybrid_helpers import tiny_hybrid, token_examples

from nbhelpers.kernels import fla as fla_backend
from nbhelpers.kernels import hybrid_paths as paths
from nbhelpers.kernels import packed_boundaries
from nbhelpers.kernels.packed_boundaries import PackedBoundaries, boundary_arguments, takes_chunk_indices


def chunk_indices(cu_seqlens: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """fla's chunk indices by their definition: (sequence, chunk within it) for each chunk of each sequence."""
    bounds = cu_seqlens.tolist()
    pairs = [(i, j) for i, (a, b) in enumerate(zip(bounds, bounds[1:])) for j in range(-(-(b - a) // chunk_size))]
    return torch.tensor(pairs, dtype=cu_seqlens.dtype)


def test_a_row_s_boundaries_are_built_once_until_another_row_comes():
    boundaries = PackedBoundaries(chunk_indices, chunk_size=4)
    row = torch.tensor([0, 5, 9, 16], dtype=torch.int32)
    first = boundaries(row)
    assert first[0].dtype == torch.int64 and first[0].tolist() == [0, 5, 9, 16]
    assert first[1].tolist() == [[0, 0], [0, 1], [1, 0], [2, 0], [2, 1]]
    assert all(boundaries(row)[k] is first[k] for k in (0, 1)) and boundaries.builds == 1
    same_values = row.clone()  # another row's tensor, equal or not, is built again
    assert boundaries(same_values)[0] is not first[0] and boundaries.builds == 2
    same_values[3] = 12  # written in place: built again, from the new values
    assert boundaries(same_values)[1].tolist() == [[0, 0], [0, 1], [1, 0], [2, 0]] and boundaries.builds == 3


def test_the_arguments_name_chunk_indices_only_for_a_kernel_that_takes_them():
    def new_fla(x, cu_seqlens=None, chunk_indices=None):
        return x

    def old_fla(x, cu_seqlens=None, **kwargs):
        return x

    assert takes_chunk_indices(new_fla) and not takes_chunk_indices(old_fla) and not takes_chunk_indices(len)
    boundaries = PackedBoundaries(chunk_indices, chunk_size=4)
    row = torch.tensor([0, 3, 8], dtype=torch.int32)
    assert set(boundary_arguments(boundaries, row, True)) == {"cu_seqlens", "chunk_indices"}
    assert set(boundary_arguments(boundaries, row, False)) == {"cu_seqlens"}
    assert boundary_arguments(boundaries, None, True) == {"cu_seqlens": None}
    unshared = boundary_arguments(None, row, True)  # FlashQLA's hook before: a new int64 copy each call
    assert unshared["cu_seqlens"] is not boundary_arguments(None, row, True)["cu_seqlens"]


@pytest.fixture
def stand_in_fla(monkeypatch):
    """fla's modules as the hooks import them, each kernel recording what it was given and computing the
    reference's result sequence by sequence; the process's shared boundaries made anew over the stand-in's
    chunk indices."""
    from transformers.models.qwen3_5 import modeling_qwen3_5

    calls: dict[str, list[dict]] = {"conv": [], "rule": []}
    rule = paths.segmented_delta_rule(paths.reference_function(modeling_qwen3_5, "torch_chunk_gated_delta_rule"))
    conv = paths.segmented_conv(paths.reference_function(modeling_qwen3_5, "causal_conv1d_fn"))

    def chunk_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_indices=None):  # fmt: skip
        calls["rule"].append({"cu_seqlens": cu_seqlens, "chunk_indices": chunk_indices})
        return rule(q, k, v, g, beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
                    output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)  # fmt: skip

    def causal_conv1d(x, weight=None, bias=None, activation=None, cu_seqlens=None, chunk_indices=None):
        calls["conv"].append({"cu_seqlens": cu_seqlens, "chunk_indices": chunk_indices})
        out = conv(x.transpose(1, 2), weight.reshape(weight.shape[0], -1), bias, activation=activation,
                   cu_seq_lens_q=cu_seqlens)  # fmt: skip
        return out.transpose(1, 2), None

    modules = {
        "fla": types.ModuleType("fla"),
        "fla.ops": types.ModuleType("fla.ops"),
        "fla.ops.utils": types.SimpleNamespace(prepare_chunk_indices=chunk_indices),
        "fla.ops.gated_delta_rule": types.SimpleNamespace(chunk_gated_delta_rule=chunk_gated_delta_rule),
        "fla.modules": types.ModuleType("fla.modules"),
        "fla.modules.causal_conv1d": types.SimpleNamespace(causal_conv1d=causal_conv1d),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(packed_boundaries, "_SHARED", None)
    yield calls


@pytest.mark.parametrize("offload", [False, True])
def test_every_layer_shares_one_build_a_step_in_the_forward_and_the_recompute(stand_in_fla, monkeypatch, offload):
    """The tiny hybrid (3 Gated DeltaNet layers) with fla's hooks bound, every layer recomputed, packed rows with their
    boundaries: each step builds its row's boundaries once; every convolution and delta rule call of the step, the
    recompute's included, gets the same int64 boundaries and chunk indices; the loss is the reference path's."""
    from test_fla_backend import FakeFusedNorm
    from test_regional_compile import with_boundaries

    from nbhelpers.measure.parallel import apply_checkpointing
    from nbhelpers.models.checkpointing import offload_checkpoints, offloaded_bytes

    monkeypatch.setattr(fla_backend, "fused_gated_norm", FakeFusedNorm)

    model = tiny_hybrid(seed=0)
    model.train()
    apply_checkpointing(model, "full")
    if offload:  # each layer's input held on the host until its recompute (every input, however small)
        offload_checkpoints(model, min_bytes=0)
    examples = token_examples((70, 45, 90))
    ids = torch.tensor([sum((e["input_ids"] for e in examples), [])])
    positions = torch.cat([torch.arange(len(e["input_ids"])) for e in examples])[None]
    batch = with_boundaries({"input_ids": ids, "position_ids": positions, "labels": ids, "use_cache": False})
    batch.pop("seq_idx")
    try:
        paths.use_reference(model)
        reference = model(**batch).loss.item()
        fla_backend.use_fla(model)
        shared = packed_boundaries.shared_boundaries()
        for step in (1, 2):
            stand_in_fla["conv"].clear(), stand_in_fla["rule"].clear()
            row = {**batch, "cu_seq_lens_q": batch["cu_seq_lens_q"].clone()}  # each step's row its own tensor
            loss = model(**row).loss
            loss.backward()
            assert loss.item() == pytest.approx(reference, rel=1e-6)
            calls = stand_in_fla["conv"] + stand_in_fla["rule"]
            assert len(stand_in_fla["rule"]) == len(stand_in_fla["conv"]) == 2 * 3  # forward and recompute
            assert shared.builds == step
            first = calls[0]
            assert first["cu_seqlens"].dtype == torch.int64 and first["cu_seqlens"].tolist() == [0, 70, 115, 205]
            assert len(first["chunk_indices"]) == 2 + 1 + 2  # 64-token chunks of 70, 45 and 90 tokens
            assert all(c["cu_seqlens"] is first["cu_seqlens"] and c["chunk_indices"] is first["chunk_indices"]
                       for c in calls)  # fmt: skip
            assert (offloaded_bytes(model) > 0) is offload
    finally:
        paths.use_reference(model)


def test_the_switch_gives_each_call_its_own_copy_and_names_what_is_allowed(stand_in_fla, monkeypatch):
    row = torch.tensor([0, 70, 115], dtype=torch.int32)
    monkeypatch.setenv(packed_boundaries.SHARED_VARIABLE, "0")
    assert packed_boundaries.shared_boundaries() is None
    conv, rule = fla_backend.fla_conv(), fla_backend.fla_delta_rule()
    x, weight = torch.randn(1, 8, 115), torch.randn(8, 4)
    conv(x, weight, activation="silu", cu_seq_lens_q=row)
    conv(x, weight, activation="silu", cu_seq_lens_q=row)
    first, second = stand_in_fla["conv"]
    assert first["cu_seqlens"] is not second["cu_seqlens"] and first["chunk_indices"] is None  # as before
    q = k = torch.randn(1, 115, 2, 16)
    rule(q, k, torch.randn(1, 115, 2, 16), -torch.rand(1, 115, 2), torch.rand(1, 115, 2), cu_seqlens=row)
    assert stand_in_fla["rule"][0]["cu_seqlens"].tolist() == [0, 70, 115]
    monkeypatch.setenv(packed_boundaries.SHARED_VARIABLE, "yes")
    with pytest.raises(ValueError, match="NBHELPERS_FLA_SHARED_BOUNDARIES='yes' is not allowed: one of 1, 0"):
        packed_boundaries.shared_boundaries()
