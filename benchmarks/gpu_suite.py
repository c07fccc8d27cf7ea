"""Measure the workbook's configurations on a GPU through nbhelpers, one subprocess per configuration.

Usage: python benchmarks/gpu_suite.py GROUP [GROUP ...] --out DIR
Groups: baseline, kernels, startup, padding, padding-flex, longtail. Records append to DIR/records.jsonl
as each configuration finishes (a stop at any point keeps what was measured); traces land in
DIR/<run_name>/traces/. Every configuration shares one sample pool and one seed.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from nbhelpers.config import RunConfig
from nbhelpers.results import RunStore
from nbhelpers.runner import run_isolated
from nbhelpers.synthetic import make, write_jsonl

MODEL = "qwen3-1.7b"
BASE = dict(
    run_name="h200", model=MODEL, batch_size=8, max_length=2048, num_samples=96, steps=5, warmup=2,
    attn_implementation="sdpa", kernels="eager", padding="static", timeout_s=300,
)  # fmt: skip
STRATEGIES = ("static", "dynamic", "multiple", "bucketed", "packed", "token_budget")


def groups(longtail_path: str) -> dict[str, list[RunConfig]]:
    base = RunConfig(**BASE)
    dynamic = base.replace(padding="dynamic")
    flex = base.replace(attn_implementation="flex_attention")
    longtail = {"dataset": longtail_path, "run_name": "h200-longtail"}
    return {
        "rerun": [
            base.replace(label=f"eager, {s}, sdpa", padding=s, steps=8 if s == "dynamic" else 5)
            for s in ("static", "dynamic", "multiple")
        ]
        + [
            flex.replace(label="eager, packed, flex_attention (cold cache)", padding="packed"),
            flex.replace(label="eager, packed, flex_attention (warm cache)", padding="packed"),
            flex.replace(label="eager, token_budget 16k, flex_attention", padding="token_budget", token_budget=16384),
            flex.replace(label="liger, packed, flex_attention", padding="packed", kernels="liger"),
            flex.replace(label="liger, token_budget 32k, flex_attention", padding="token_budget", kernels="liger",
                         token_budget=32768),
            base.replace(label="longtail: eager, static, sdpa", **longtail),
            base.replace(label="longtail: eager, packed, sdpa", padding="packed", **longtail),
            flex.replace(label="longtail: eager, packed, flex_attention", padding="packed", **longtail),
        ],  # fmt: skip
        "baseline": [base.replace(label="baseline: eager, static pad 2048, sdpa", profile=True)],
        "kernels": [
            dynamic.replace(label=f"{k}, pad to longest, sdpa", kernels=k, profile=True)
            for k in ("eager", "liger", "compile", "liger+compile")
        ],
        "compile-static": [
            base.replace(label=f"{k}, static pad 2048, sdpa", kernels=k, timeout_s=400)
            for k in ("compile", "liger")
        ],
        "startup": [
            dynamic.replace(label=f"{k}, pad to longest, sdpa (warm cache)", kernels=k) for k in ("liger", "compile")
        ]
        + [
            base.replace(
                label="eager, packed, flex_attention (cold cache)",
                padding="packed",
                attn_implementation="flex_attention",
            ),
            base.replace(
                label="eager, packed, flex_attention (warm cache)",
                padding="packed",
                attn_implementation="flex_attention",
            ),
        ],  # fmt: skip
        "padding": [
            base.replace(
                label=f"eager, {s}, sdpa",
                padding=s,
                profile=s in ("dynamic", "packed"),
                token_budget=16384 if s == "token_budget" else 0,
            )
            for s in STRATEGIES
        ]
        + [base.replace(label="eager, static, eager attention", attn_implementation="eager")],  # fmt: skip
        "padding-flex": [
            base.replace(
                label=f"eager, {s}, flex_attention",
                padding=s,
                attn_implementation="flex_attention",
                token_budget=16384 if s == "token_budget" else 0,
            )
            for s in STRATEGIES
        ]
        + [
            base.replace(
                label="liger, packed, flex_attention",
                padding="packed",
                kernels="liger",
                attn_implementation="flex_attention",
            ),
            base.replace(
                label="liger, token_budget 32k, flex_attention",
                padding="token_budget",
                kernels="liger",
                attn_implementation="flex_attention",
                token_budget=32768,
            ),
        ],  # fmt: skip
        "longtail": [
            base.replace(
                label=f"longtail: eager, {s}, {a}",
                dataset=longtail_path,
                padding=s,
                attn_implementation=a,
                run_name="h200-longtail",
            )
            for s, a in (
                ("static", "sdpa"),
                ("dynamic", "sdpa"),
                ("bucketed", "sdpa"),
                ("packed", "sdpa"),
                ("packed", "flex_attention"),
            )
        ],  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("groups", nargs="+")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    cache = Path(os.environ.get("NBHELPERS_KERNEL_CACHE", "/tmp/nbh-kernel-cache"))
    env = {"TRITON_CACHE_DIR": str(cache / "triton"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor")}
    longtail = write_jsonl(
        make(n=400, seed=1, prompt_median=60, response_median=240, sigma=1.0, max_response_tokens=2400),
        out / "longtail.jsonl",
    )
    table = groups(str(longtail))
    store = RunStore(out / "records.jsonl")
    for name in args.groups:
        for config in table[name]:
            start = time.perf_counter()
            record = run_isolated(config, notebook=f"benchmarks/gpu_suite.py {name}", extra_env=env)
            record.config["group"] = name
            store.append(record)
            m = record.metrics
            print(
                f"[{name}] {config.name}: {record.status} {record.reason[:160]} "
                f"tok/s={m.get('real_tokens_per_s', 0):,.0f} step={m.get('step_time_median_s', 0):.3f}s "
                f"first={m.get('first_step_s', 0):.1f}s pad={m.get('padding_fraction', 0):.2f} "
                f"mem={m.get('peak_memory_gib', 0):.1f}GiB mfu={m.get('mfu', 0):.3f} "
                f"kernels/step={m.get('kernels_per_step')} ({time.perf_counter() - start:.0f}s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
