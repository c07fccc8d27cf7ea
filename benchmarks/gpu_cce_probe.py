"""The doctor's Cut Cross-Entropy probe on a GPU, with the probe's own reference checked against fp32.

    python3 benchmarks/gpu_cce_probe.py > cce-probe.jsonl

Prints one JSON line per check: CCE's probe as the doctor runs it (bf16 on a GPU), and the probe's reference
against the same function in fp32 under the same bounds (what the reference itself is worth; it must pass).
``--device cpu`` rehearses it (fp32, CCE's torch.compile path).
"""

from __future__ import annotations

import argparse
import json

import torch

from nbhelpers.kernels import cce
from nbhelpers.kernels.probes import compare_kernels


def fp32_reference(x: torch.Tensor, g: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The probe's reference computed in fp32 from the same inputs, returned in their dtype."""
    loss = cce.linear_cross_entropy_reference(x.float() * g.float(), w.float(), y)
    return loss.to(x.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    rtol, atol, norm_rtol = cce.PROBE_TOLERANCE[args.device]
    inputs = cce.cce_probe_inputs(args.device, torch.bfloat16 if args.device == "cuda" else torch.float32)
    reference = cce.after_final_norm(cce.linear_cross_entropy_reference)
    checks = {
        "cce probe (the doctor's)": cce.probe_cce(args.device)[0],
        "reference vs fp32": compare_kernels(
            "reference", reference, fp32_reference, inputs, rtol, atol, norm_rtol=norm_rtol,
            input_names=cce.PROBE_INPUTS,
        ),
    }
    for name, result in checks.items():
        print(json.dumps({"check": name, "shape": cce.PROBE_SHAPE, "torch": torch.__version__, **result.to_dict()}))


if __name__ == "__main__":
    main()
