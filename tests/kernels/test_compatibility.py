"""Composites and which family takes which backend are worked out from the entries' declarations.

Each elementary backend declares the step parts it takes over, the partners it allows and the model capabilities it
needs; each family declares its capabilities. The table, each family's backends and every refusal follow from those:
a fake backend added to the table's input gets its composites, its place in the order and its families with no other
edit.
"""

from __future__ import annotations

import json
import types
from itertools import combinations
from pathlib import Path

import pytest

import nbhelpers.kernels.registry as registry
import nbhelpers.measure.config as measure_config
from nbhelpers.kernels.backends import apply_backend
from nbhelpers.kernels.compatibility import apply_order, combination_refusal, offer_refusal, table_order
from nbhelpers.kernels.registry import (
    ELEMENTARY_BACKENDS,
    KERNEL_BACKEND_TABLE,
    KERNEL_BACKENDS,
    MAX_PARTS,
    NOT_OFFERED,
    build_table,
    compose,
    family_kernel_backends,
    family_kernel_refusal,
    kernel_backend,
    offer_rules,
    training_kwargs,
)
from nbhelpers.kernels.spec import LOSS, STEP_PARTS, BackendUnavailable, KernelBackend
from nbhelpers.measure.config import RunConfig
from nbhelpers.models.families import FAMILIES, GATED_DELTANET, MODEL_CAPABILITIES
from nbhelpers.planning.device import family_refusal

ROOT = Path(__file__).resolve().parents[2]
HYBRID_BACKENDS = ("eager", "liger", "compile", "liger+compile", "fla", "fla+liger", "cce", "liger+cce",
                   "regional_compile", "liger+regional_compile", "fla+regional_compile", "cce+regional_compile",
                   "fla+liger+regional_compile", "flashqla", "flashqla+liger", "flashqla+regional_compile",
                   "flashqla+liger+regional_compile")  # fmt: skip


def stored_backend_names() -> set[str]:
    """Every kernel backend a shipped record names."""
    names = set()
    for records in sorted((ROOT / "benchmarks").rglob("*.jsonl")):
        for line in records.read_text().splitlines():
            kernels = json.loads(line).get("config", {}).get("kernels") if line.strip() else None
            names |= {kernels} if kernels else set()
    return names


def test_every_backend_a_shipped_record_names_is_in_the_table():
    names = stored_backend_names()
    assert {"eager", "liger", "fla+liger", "cce+regional_compile"} <= names
    assert names <= set(KERNEL_BACKENDS), sorted(names - set(KERNEL_BACKENDS))


def test_the_table_is_every_combination_the_rules_offer_and_nothing_else():
    rules = offer_rules()
    for size in range(2, len(ELEMENTARY_BACKENDS) + 1):
        for parts in combinations(ELEMENTARY_BACKENDS, size):
            name = "+".join(p.name for p in apply_order(parts))
            why = offer_refusal(parts, rules)
            assert (name in KERNEL_BACKEND_TABLE) == (not why), (name, why)
    assert all(len(b.components) <= MAX_PARTS for b in KERNEL_BACKEND_TABLE.values())
    assert all(offer_refusal([kernel_backend(n) for n in names], rules) == why for names, why in NOT_OFFERED.items())


def test_the_order_puts_each_composite_after_its_last_part():
    names = list(KERNEL_BACKENDS)
    elementary = [b.name for b in ELEMENTARY_BACKENDS]
    assert [n for n in names if not kernel_backend(n).composite] == elementary
    for name in names:
        last = max(kernel_backend(name).components, key=elementary.index)
        assert names.index(last) <= names.index(name)
        assert all(names.index(n) < names.index(name) for n in names[: names.index(last)])
    assert names[:6] == ["eager", "liger", "compile", "liger+compile", "fla", "fla+liger"]
    assert table_order(["a", "b", "c"], [("b", "c"), ("a", "b"), ("a", "c")]) == [
        ("a",), ("b",), ("a", "b"), ("c",), ("a", "c"), ("b", "c"),
    ]  # fmt: skip


def test_composites_apply_their_parts_by_step_part():
    for backend in KERNEL_BACKEND_TABLE.values():
        stages = [STEP_PARTS.index(kernel_backend(p).replaces[0]) for p in backend.components if backend.composite]
        assert stages == sorted(stages), backend.name
        assert set(backend.needs) == {n for p in backend.components for n in kernel_backend(p).needs}


def test_why_backends_do_not_combine():
    eager, liger, compile_, regional, fla, float8, rowwise, cce = (
        kernel_backend(n)
        for n in ("eager", "liger", "compile", "regional_compile", "fla", "float8", "float8_rowwise", "cce")
    )
    assert "the baseline" in combination_refusal([eager, liger])
    assert "both take over compilation" in combination_refusal([compile_, regional])
    assert "both take over linear matmuls" in combination_refusal([float8, rowwise])
    assert "'fla' composes only with backends that take over operators" in combination_refusal([fla, cce])
    assert "'float8_rowwise' composes only" in combination_refusal([liger, rowwise])
    assert "is a composite" in combination_refusal([kernel_backend("liger+compile"), cce])
    assert combination_refusal([liger, float8, cce, compile_]) == ""  # combines, but more parts than offered
    assert offer_refusal([liger, float8, cce, compile_], offer_rules()) == f"more than {MAX_PARTS} parts"
    assert "'liger' would run none of its switches" in offer_refusal([liger, cce, regional], offer_rules())
    with pytest.raises(ValueError, match="'compile\\+regional_compile' does not combine: .* both take over"):
        compose(compile_, regional)


def test_each_family_takes_what_its_capabilities_cover():
    qwen3, hybrid = FAMILIES["qwen3"], FAMILIES["qwen3_5"]
    linear_attention = {"fla", "flashqla"}  # the Gated DeltaNet kernels
    without_fla = tuple(n for n in KERNEL_BACKENDS if not linear_attention & set(kernel_backend(n).components))
    assert family_kernel_backends(qwen3) == without_fla
    assert family_kernel_backends(hybrid) == HYBRID_BACKENDS
    why = family_kernel_refusal(hybrid, "liger+float8")
    assert why.startswith("kernels='liger+float8' is not supported by the qwen3_5 family: it needs ")
    assert "decay gates" in why and why.endswith(f"(supported: {', '.join(map(repr, HYBRID_BACKENDS))})")
    assert "no measurement on a hybrid" in family_kernel_refusal(hybrid, "cce+compile")  # the family's own gap
    assert MODEL_CAPABILITIES[GATED_DELTANET] in family_kernel_refusal(qwen3, "fla+liger")
    assert family_kernel_refusal(qwen3, "not in the table") == ""
    assert family_refusal("qwen3-tiny", "sdpa", "fla", False) == family_kernel_refusal(qwen3, "fla")
    assert family_refusal("qwen3.5-tiny", "sdpa", "fla+liger", True) == ""


def test_a_backend_is_refused_on_a_family_that_lacks_what_it_needs_before_it_patches():
    model = types.SimpleNamespace(config=types.SimpleNamespace(model_type="qwen3"))
    with pytest.raises(BackendUnavailable, match="kernels='fla' is not supported by the qwen3 family: it needs Gated"):
        apply_backend(model, "fla", (), "cpu")


# -- a backend added as one entry -------------------------------------------------------------------------


def fake_backend(calls: list[str], needs: tuple[str, ...] = ()) -> KernelBackend:
    """A loss kernel of its own (like Cut Cross-Entropy: it takes over the loss and Liger's loss switches)."""

    def apply_fake(model, switches, device):
        calls.append(f"fake_loss on {device}")

    return KernelBackend(
        "fake_loss", "a fused loss of its own", apply=apply_fake, replaces=(LOSS,), needs=needs,
        replaces_switches=("cross_entropy", "fused_linear_cross_entropy"),
    )  # fmt: skip


def test_a_fake_backend_gets_its_composites_place_and_families_from_its_entry_alone(monkeypatch):
    calls: list[str] = []
    table = build_table((*ELEMENTARY_BACKENDS, fake_backend(calls)))
    names = list(table)
    assert names[: len(KERNEL_BACKENDS)] == list(KERNEL_BACKENDS)  # every name and place of the table stays
    assert names[len(KERNEL_BACKENDS) :] == [
        "fake_loss", "liger+fake_loss", "fake_loss+compile", "float8+fake_loss", "fake_loss+regional_compile",
        "liger+fake_loss+compile", "liger+float8+fake_loss", "float8+fake_loss+compile",
        "float8+fake_loss+regional_compile",
    ]  # fmt: skip
    # Not offered, each for a declared reason: beside cce (both take over the loss), beside fla and float8_rowwise
    # (the partners they allow), with Liger under regional compile (Liger would keep no switch to itself).
    refused = {"cce+fake_loss", "fla+fake_loss", "float8_rowwise+fake_loss", "liger+fake_loss+regional_compile"}
    assert not refused & set(names)
    assert table["liger+fake_loss"].replaces_switches == ("cross_entropy", "fused_linear_cross_entropy")
    assert set(family_kernel_backends(FAMILIES["qwen3"], table)) >= set(names[len(KERNEL_BACKENDS) :])
    hybrid = family_kernel_backends(FAMILIES["qwen3_5"], table)
    assert hybrid == (*HYBRID_BACKENDS, "fake_loss", "liger+fake_loss", "fake_loss+compile",
                      "fake_loss+regional_compile", "liger+fake_loss+compile")  # fmt: skip

    compiled = []
    model = types.SimpleNamespace(compile=lambda: compiled.append("compiled"))
    table["fake_loss+compile"].apply(model, (), "cpu")
    assert calls == ["fake_loss on cpu"] and compiled == ["compiled"]  # its own function, then compile's

    monkeypatch.setattr(registry, "KERNEL_BACKEND_TABLE", table)  # what the table's module builds at import
    monkeypatch.setattr(registry, "KERNEL_BACKENDS", tuple(table))
    monkeypatch.setattr(measure_config, "KERNEL_BACKENDS", tuple(table))
    assert RunConfig(kernels="liger+fake_loss", liger_kernels=("rope",)).kernels == "liger+fake_loss"
    assert training_kwargs("liger+fake_loss", ("rope",))[0]["use_liger_kernel"] is True
    assert family_refusal("qwen3.5-tiny", "sdpa", "float8+fake_loss", False).startswith(
        "kernels='float8+fake_loss' is not supported by the qwen3_5 family: it needs decoder linear layers"
    )


def test_a_fake_backend_that_needs_gated_deltanet_goes_to_the_hybrids_only():
    table = build_table((*ELEMENTARY_BACKENDS, fake_backend([], needs=(GATED_DELTANET,))))
    added = list(table)[len(KERNEL_BACKENDS) :]
    assert added == ["fake_loss", "liger+fake_loss", "fake_loss+compile", "fake_loss+regional_compile",
                     "liger+fake_loss+compile"]  # no family has both Gated DeltaNet and float8's needs
    assert not set(added) & set(family_kernel_backends(FAMILIES["qwen3"], table))
    assert set(added) <= set(family_kernel_backends(FAMILIES["qwen3_5"], table))
