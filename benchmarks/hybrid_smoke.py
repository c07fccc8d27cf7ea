"""Quick GPU smoke test of the hybrid paths: per-layer patch report, contamination proof and one training step.

Usage (GPU machine with fla, tilelang: see ../shared/gpu/hybrid_wheels.sh):
    PYTHONPATH=. python benchmarks/hybrid_smoke.py [--out DIR] [--loss-tol 1e-3] [--logit-tol 5e-2]

Builds a small 4-layer 3:1 Qwen3.5-style hybrid (hidden 1024, fp32 weights), then for the reference path
("eager") and fla's ("fla"): applies the backend through the table (the environment check first), prints the
per-layer report (what each layer's delta rule, convolution and attention really run), runs the
contamination proof (packed vs each sequence alone) on every path this device has, and runs one training step on
a packed row of 8 x 512 tokens (its loss; speed is the hybrid suites', ``nbhelpers bench --list``). Prints one
JSON document (and writes it to DIR/hybrid-smoke.json). The tolerances are parameters: the printed differences say
whether they hold with room.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

VOCAB = 32000


def small_hybrid() -> Any:
    import torch
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=128, linear_num_key_heads=8, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM._from_config(config, attn_implementation="sdpa").cuda()


def examples(lengths: tuple[int, ...], seed: int) -> list[dict[str, list[int]]]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        ids = torch.randint(1, VOCAB, (n,), generator=generator).tolist()
        out.append({"input_ids": ids, "labels": [-100] + ids[1:]})
    return out


def train_step(model: Any) -> float:
    """The loss of one training step (bf16 autocast) on one packed row of 8 x 512 tokens with their boundaries."""
    import torch

    from nbhelpers.data.collate import collate, to_device
    from nbhelpers.data.strategies import PaddingSettings

    batch = to_device(collate(examples((512,) * 8, 1), PaddingSettings("packed", max_length=512), 0, True), "cuda")
    model.train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    model.eval()
    return float(loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="")
    parser.add_argument("--loss-tol", type=float, default=1e-3)
    parser.add_argument("--logit-tol", type=float, default=5e-2)
    args = parser.parse_args()

    from nbhelpers.data.contamination import hybrid_checks, hybrid_paths_for, require_hybrid_proof
    from nbhelpers.kernels.backends import apply_backend
    from nbhelpers.kernels.fla import environment_facts, fla_refusal
    from nbhelpers.kernels.hybrid_paths import layer_paths

    facts = environment_facts("cuda")
    out: dict[str, Any] = {"environment": facts, "fla_refusal": fla_refusal(**facts)}
    model = small_hybrid()
    for backend in ("eager", "fla"):
        entry: dict[str, Any] = {}
        try:
            entry["patch_report"] = apply_backend(model, backend, (), "cuda")
            entry["layers"] = layer_paths(model)
            entry["train_step_loss"] = train_step(model)
        except Exception as error:  # noqa: BLE001 - a refused or broken backend is the finding
            entry["failed"] = f"{type(error).__name__}: {str(error)[:400]}"
        out[backend] = entry
    pieces = examples((300, 212, 150), 0)
    paths = hybrid_paths_for("cuda" if facts["has_fla"] else "cpu")
    checks = hybrid_checks(model.eval(), pieces, 0, 512, paths, args.loss_tol, args.logit_tol)
    out["contamination"] = {
        c.mode: {"passed": c.passed, "max_relative_loss_difference": c.max_relative_difference,
                 "max_logit_difference": c.table["max_logit_difference"].tolist()}
        for c in checks
    }  # fmt: skip
    try:
        out["proof"] = require_hybrid_proof(checks, paths)
    except AssertionError as error:
        out["proof"] = f"FAILED: {error}"
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "hybrid-smoke.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
