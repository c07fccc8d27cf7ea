"""Regional torch.compile and the bf16-master precision setting on one GPU, through nbhelpers.

Usage: python benchmarks/gpu_regional_suite.py GROUP [GROUP ...] --out DIR [--model qwen3-1.7b] [--batch-size 8]
[--max-length 2048] [--samples 32] [--steps 10] [--dtype auto] [--device auto] [--profile]
Groups (each fits one device call; each measures the baseline first, its parity reference):
  best       at a token budget with torch_varlen: eager kernels (the reference of what each entry bought), the
             tuner's pick, Liger's cross-entropy (and its fused linear cross-entropy) + regional compile, and
             float8 and Cut Cross-Entropy inside regional compile (with ``--profile``, each row's time by kernel
             category from a profiled step after its timed ones); for a larger model, e.g. ``best --model
             qwen3-8b --batch-size 4 --dtype bf16`` (pure bf16 weights and AdamW moments: 8 bytes a parameter,
             66 GB for Qwen3-8B; bf16-master's 18 bytes do not fit one H200), token budget batch x max length;
  regional   regional compile alone, with Liger (all but its fused linear CE; its cross-entropy only), with token
             budget + torch_varlen, beside the tuner's pick;
  precision  the bf16-master setting with eager kernels and with the fastest regional rows (Liger's
             cross-entropy or Cut Cross-Entropy + regional compile);
  float8     Cut Cross-Entropy alone (static padding), and the two float8 rows of ``best`` (a packed row padded to a
             multiple of 16 positions, as float8's matmuls need);
  startup    the first step of Liger's cross-entropy + regional compile (token budget) on a cold, then a warm
             cache.
The workload is the GPU command's (scripts/run_workbook_gpu.sh, notebook 03): Qwen3-1.7B shape, random weights,
batch 8 x 2048, 32 samples, epoch timing. Each configuration runs in its own subprocess; its record appends to
DIR/<group>.jsonl as it finishes, with its first-step loss and gradient norm judged against the first record (the
padded eager baseline). Then regional compile's first step with a cold and with a warm (exported, re-imported)
Inductor/Triton cache: DIR/startup.jsonl (the issue's goal: warm first step <= 15 s). Rehearse on a CPU with
``--model qwen3-tiny --batch-size 2 --max-length 64 --samples 8 --steps 1 --device cpu``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from nbhelpers.analysis.parity import check_against_first
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_configs
from nbhelpers.measure.startup import cold_vs_warm
from nbhelpers.measure.store import RunStore
from nbhelpers.models.families import MODEL_PRESETS

NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
LOSS_ONLY = ("cross_entropy",)  # Liger's switches beside regional compile in the grids and the tuner


PICK = "liger (no fused CE), token budget, varlen (the tuner's pick)"
CE_REGIONAL = "liger cross-entropy + regional compile, token budget, varlen"
FLCE_REGIONAL = "liger fused linear cross-entropy + regional compile, token budget, varlen"
FLOAT8_REGIONAL = "liger cross-entropy + float8 + regional compile, token budget, varlen"
CCE_REGIONAL = "cut cross-entropy + regional compile, token budget, varlen"
FLOAT8_CCE_REGIONAL = "float8 + cut cross-entropy + regional compile, token budget, varlen"
CCE_STATIC = "cut cross-entropy, static, sdpa"
EAGER_PACKED = "eager, token budget, varlen"  # the baseline's kernels at the best padding: what each entry bought
GROUP_ROWS = {  # after the baseline, the rows of configurations() each group measures, by label
    "best": (EAGER_PACKED, PICK, CE_REGIONAL, FLCE_REGIONAL, FLOAT8_REGIONAL, CCE_REGIONAL, FLOAT8_CCE_REGIONAL),
    "regional": (
        "regional compile, static, sdpa", "liger + regional compile, static, sdpa", PICK,
        "regional compile, token budget, varlen", "liger + regional compile, token budget, varlen", CE_REGIONAL,
    ),
    "precision": (f"{CE_REGIONAL}, bf16-master", f"{CCE_REGIONAL}, bf16-master", "eager, static, sdpa, bf16-master"),
    "float8": (FLOAT8_REGIONAL, FLOAT8_CCE_REGIONAL, CCE_STATIC),  # float8's packed rows padded to a multiple of 16
}  # fmt: skip
GROUPS = (*GROUP_ROWS, "startup")


def configurations(base: RunConfig, gpu: bool) -> list[RunConfig]:
    """Baseline first (parity reference), then regional compile alone, with Liger, packed, and bf16-master."""
    varlen = "torch_varlen" if gpu else "sdpa"  # PyTorch's varlen kernel is CUDA only
    rows: list[dict[str, Any]] = [
        {"label": "baseline: eager, static, sdpa"},
        {"label": "regional compile, static, sdpa", "kernels": "regional_compile"},
        {"label": "liger + regional compile, static, sdpa", "kernels": "liger+regional_compile"},
        {"label": EAGER_PACKED, "padding": "token_budget", "attn_implementation": varlen},
        {"label": PICK, "kernels": "liger",
         "padding": "token_budget", "attn_implementation": varlen},
        {"label": "regional compile, token budget, varlen", "kernels": "regional_compile", "padding": "token_budget",
         "attn_implementation": varlen},
        {"label": "liger + regional compile, token budget, varlen", "kernels": "liger+regional_compile",
         "padding": "token_budget", "attn_implementation": varlen},
        {"label": CE_REGIONAL, "kernels": "liger+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen, "liger_kernels": LOSS_ONLY},
        {"label": FLCE_REGIONAL, "kernels": "liger+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen, "liger_kernels": ("fused_linear_cross_entropy",)},
        {"label": FLOAT8_REGIONAL, "kernels": "liger+float8+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen, "liger_kernels": LOSS_ONLY},
        {"label": CCE_STATIC, "kernels": "cce"},
        {"label": CCE_REGIONAL, "kernels": "cce+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen},
        {"label": FLOAT8_CCE_REGIONAL, "kernels": "float8+cce+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen},
        {"label": f"{CE_REGIONAL}, bf16-master",
         "kernels": "liger+regional_compile", "padding": "token_budget", "attn_implementation": varlen,
         "dtype": "bf16-master", "liger_kernels": LOSS_ONLY},
        {"label": f"{CCE_REGIONAL}, bf16-master", "kernels": "cce+regional_compile", "padding": "token_budget",
         "attn_implementation": varlen, "dtype": "bf16-master"},
        {"label": "eager, static, sdpa, bf16-master", "dtype": "bf16-master"},
    ]  # fmt: skip
    return [base.replace(**row) for row in rows]


def group_configurations(group: str, base: RunConfig, gpu: bool) -> list[RunConfig]:
    """The baseline, then the group's rows of :func:`configurations` (:data:`GROUP_ROWS`)."""
    rows = configurations(base, gpu)
    by_label = {row.label: row for row in rows}
    return [rows[0], *(by_label[label] for label in GROUP_ROWS[group])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("groups", nargs="+", choices=GROUPS)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="qwen3-1.7b", choices=tuple(MODEL_PRESETS), metavar="PRESET")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)  # the workload floor: no thin record
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--profile", action="store_true", help="profile one step of each row after its timed ones")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gpu = args.device != "cpu"
    base = RunConfig(
        run_name="regional", model=args.model, batch_size=args.batch_size, max_length=args.max_length,
        num_samples=args.samples, steps=args.steps, warmup=1, timing="epoch", min_timed_steps=args.steps,
        padding="static", liger_kernels=NO_FLCE if gpu else ("cross_entropy",), device=args.device, timeout_s=900,
        dtype=args.dtype, profile=args.profile,
    )  # fmt: skip
    for group in args.groups:
        if group == "startup":
            startup = RunStore(out / "startup.jsonl")
            packed = base.replace(kernels="liger+regional_compile", padding="token_budget", label="startup",
                                  liger_kernels=LOSS_ONLY, profile=False,
                                  attn_implementation="torch_varlen" if gpu else "sdpa")  # fmt: skip
            for record in cold_vs_warm(packed, out / "startup"):
                startup.append(record)
                first = record.metrics.get("first_step_s")
                print(f"[startup] {record.metrics.get('cache', '')}: {record.status} first step {first} s "
                      f"{record.reason}", flush=True)  # fmt: skip
            continue
        store = RunStore(out / f"{group}.jsonl")
        configs = group_configurations(group, base, gpu)
        for record in run_configs(configs, store=store, annotate=check_against_first, progress=False):
            metrics = record.metrics
            print(f"[{group}] {record.config.get('label')}: {record.status} "
                  f"{metrics.get('real_tokens_per_s', 0):,.0f} tok/s, "
                  f"first step {metrics.get('first_step_s', 0):.1f} s, parity {metrics.get('parity', {})} "
                  f"{record.reason}", flush=True)  # fmt: skip
            if categories := metrics.get("trace_top_categories"):
                shares = ", ".join(f"{c['category']} {c['share_of_time']:.0%}" for c in categories)
                print(f"    kernel time by category: {shares}; {metrics.get('kernels_per_step', 0):,.0f} launches a "
                      f"step, idle {metrics.get('trace_idle_share', 0):.0%}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
