"""Which Gated DeltaNet implementations transformers picks, and whether a packed row keeps sequences apart.

Run on a GPU machine with flash-linear-attention installed (see ../shared/gpu/hybrid_wheels.sh). Prints one
JSON document: versions, the implementation behind each kernel hook of the Qwen3.5 modeling module, the
source lines of the Gated DeltaNet forward that pass sequence boundaries, and for a small hybrid model the
largest logit difference of the second sequence of a packed row against running it alone, with
position_ids only and with cu_seq_lens kwargs. Training speed is the hybrid suites' (``nbhelpers bench --list``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys


def implementation_of(func: object) -> str:
    """The function a transformers kernel hook calls: found in the wrapper's closure."""
    names = getattr(getattr(func, "__code__", None), "co_freevars", ())
    for name, cell in zip(names, getattr(func, "__closure__", None) or ()):
        value = cell.cell_contents
        if name == "implementation" and callable(value):
            return f"{value.__module__}.{getattr(value, '__qualname__', value)}"
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"


def main() -> None:
    import torch
    import transformers
    from transformers.models.qwen3_5 import modeling_qwen3_5 as modeling

    out: dict = {"torch": torch.__version__, "transformers": transformers.__version__}
    for name in ("triton", "fla", "tilelang", "causal_conv1d"):
        try:
            out[name] = getattr(importlib.import_module(name), "__version__", "present")
        except Exception as error:  # noqa: BLE001 - a missing or broken package is the finding
            out[name] = f"absent: {type(error).__name__}: {str(error)[:200]}"
    hooks = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule", "causal_conv1d_fn",
             "causal_conv1d_update")  # fmt: skip
    out["hooks"] = {h: implementation_of(getattr(modeling, h)) for h in hooks if hasattr(modeling, h)}
    source = inspect.getsource(modeling.Qwen3_5GatedDeltaNet.forward)
    out["forward_boundary_lines"] = [
        line.strip() for line in source.splitlines() if "cu_seq" in line or "seq_idx" in line or "kwargs" in line
    ]
    config = modeling.Qwen3_5TextConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=128, linear_num_key_heads=8, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"], use_cache=False,
    ) if hasattr(modeling, "Qwen3_5TextConfig") else None  # fmt: skip
    if config is None:
        from transformers import Qwen3_5TextConfig

        config = Qwen3_5TextConfig(
            vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=2, head_dim=128, linear_num_key_heads=8,
            linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
            layer_types=["linear_attention"] * 3 + ["full_attention"], use_cache=False,
        )  # fmt: skip
    torch.manual_seed(0)
    results = {}
    for attn in ("sdpa", "flash_attention_2"):
        try:
            model = modeling.Qwen3_5ForCausalLM._from_config(config, attn_implementation=attn, dtype=torch.bfloat16)
        except Exception as error:  # noqa: BLE001
            results[attn] = f"build failed: {type(error).__name__}: {str(error)[:300]}"
            continue
        model = model.cuda().eval()
        a, b = 300, 212
        ids_a = torch.randint(0, 32000, (1, a), device="cuda")
        ids_b = torch.randint(0, 32000, (1, b), device="cuda")
        packed = torch.cat([ids_a, ids_b], dim=1)
        pos = torch.cat([torch.arange(a), torch.arange(b)]).unsqueeze(0).cuda()
        cu = torch.tensor([0, a, a + b], dtype=torch.int32, device="cuda")
        row: dict = {}
        with torch.no_grad():
            alone = model(input_ids=ids_b).logits.float()
            for case, kwargs in (
                ("position_ids only", {"position_ids": pos}),
                ("cu_seq_lens kwargs", {"position_ids": pos, "cu_seq_lens_q": cu, "cu_seq_lens_k": cu,
                                         "max_length_q": max(a, b), "max_length_k": max(a, b)}),
            ):  # fmt: skip
                try:
                    logits = model(input_ids=packed, **kwargs).logits.float()
                    row[case] = round(float((logits[0, a:] - alone[0]).abs().max()), 5)
                except Exception as error:  # noqa: BLE001
                    row[case] = f"raised {type(error).__name__}: {str(error)[:300]}"
        results[attn] = row
        del model
        torch.cuda.empty_cache()
    out["packed_second_sequence_max_abs_logit_diff"] = results
    try:
        from fla.modules.convolution import causal_conv1d

        out["fla_causal_conv1d_signature"] = str(inspect.signature(causal_conv1d))
    except Exception as error:  # noqa: BLE001
        out["fla_causal_conv1d_signature"] = f"absent: {error}"
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
