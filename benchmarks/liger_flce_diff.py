"""Why Liger ran slower than eager on packed rows: its fused linear cross-entropy, kernel by kernel.

Usage: python benchmarks/liger_flce_diff.py [--tokens N]
Compares two profiled H200 steps of the same packed batch (Liger with and without
``fused_linear_cross_entropy``; traces in benchmarks/gpu/qwen3-1.7b/padding-strategies-epoch/traces/, recorded
beside padding-epoch-flex-rest-liger-packed.jsonl and varlen-epoch-liger-no-flce.jsonl) and prints the
category and kernel differences, then the chunking arithmetic of Liger's fused linear cross-entropy
(liger_kernel/ops/fused_linear_cross_entropy.py: ``inc_factor = cdiv(V, H)``,
``chunk_size = next_power_of_2(cdiv(BT, inc_factor))``) for the Qwen3-1.7B shape.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from nbhelpers.models.families import preset_config
from nbhelpers.profiling.diff import diff_categories, diff_traces
from nbhelpers.profiling.parse import load_trace

TRACES = Path(__file__).parent / "gpu" / "qwen3-1.7b" / "padding-strategies-epoch" / "traces"
WITH_FLCE = TRACES / "liger-packed-flex-fused-linear-ce.trace.json.gz"
WITHOUT_FLCE = TRACES / "liger-packed-flex-no-fused-linear-ce.trace.json.gz"


def flce_chunks(tokens: int, vocab: int, hidden: int) -> tuple[int, int]:
    """(chunk size, number of chunks) that Liger's fused linear cross-entropy uses for ``tokens`` rows."""
    inc_factor = math.ceil(vocab / hidden)
    chunk_size = min(2 ** math.ceil(math.log2(math.ceil(tokens / inc_factor))), tokens)
    return chunk_size, math.ceil(tokens / chunk_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    # the profiled packed batch, the mean packed row, the mean 16k-budget row, a full 16k row
    parser.add_argument("--tokens", type=int, nargs="*", default=[1984, 3063, 14004, 16384])
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    pd.set_option("display.max_colwidth", 70)
    with_flce, without_flce = load_trace(WITH_FLCE), load_trace(WITHOUT_FLCE)
    print("Kernel time per step by category, Liger with -> without fused linear cross-entropy (us):")
    print(diff_categories(with_flce, without_flce).round(1).to_string(index=False))
    kernels = diff_traces(with_flce, without_flce)
    columns = ["name", "calls_per_step_before", "calls_per_step_after", "time_per_step_us_before",
               "time_per_step_us_after"]  # fmt: skip
    print("\nKernels whose time changed most:")
    top = kernels.reindex(kernels["delta_time_per_step_us"].abs().sort_values(ascending=False).index).head(8)
    top = top.assign(name=top["name"].str.slice(0, 60))
    print(top[columns].round(1).to_string(index=False))
    config = preset_config("qwen3-1.7b")
    vocab, hidden = config.vocab_size, config.hidden_size
    weight_gib = vocab * hidden * 4 / 2**30
    print(f"\nLiger's chunks for V={vocab:,}, H={hidden:,} (an fp32 lm_head weight of {weight_gib:.2f} GiB):")
    for tokens in args.tokens:
        size, count = flce_chunks(tokens, vocab, hidden)
        print(f"  {tokens:>6,} tokens/step -> {count} chunks of {size}; each chunk adds its part into the whole "
              f"fp32 weight gradient")  # fmt: skip


if __name__ == "__main__":
    main()
