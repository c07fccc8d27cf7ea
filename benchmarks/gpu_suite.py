"""Measure the workbook's configurations on a GPU through nbhelpers, one subprocess per configuration.

Usage: python benchmarks/gpu_suite.py GROUP [GROUP ...] --out DIR
Groups: baseline, kernels, compile-static, startup, startup-cold-warm, startup-cold-warm-liger, padding,
padding-flex, longtail, rerun, epoch-default, epoch-longtail, epoch-flex-padded, epoch-flex-rest,
epoch-token-budget-flex, epoch-varlen, epoch-varlen-longtail, epoch-liger-packed, epoch-liger-no-flce,
epoch-token-budget-varlen, epoch-liger-varlen. Each group's records append to DIR/<group>.jsonl as each
configuration finishes (a stop at any point keeps what was measured) and its console lines to
DIR/logs/<group>.log; traces land in DIR/<run_name>/traces/. To ship them, copy the records into benchmarks/gpu/
under a name that says what they measure, the log into benchmarks/gpu/logs/ under the same name, and give each
record a validity entry in benchmarks/gpu/validity.json. Every configuration shares one sample pool and one seed.
In the epoch groups each strategy is timed over one whole pass of the same 256 samples (after one untimed pass),
and every record's first-step loss and gradient norm are checked against the group's first record (static
padding)."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

from nbhelpers.analysis.parity import check_against_first
from nbhelpers.data.strategies import PADDING_STRATEGIES
from nbhelpers.data.synthetic import make, write_jsonl
from nbhelpers.kernels.registry import KERNEL_BACKENDS
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.runner import run_isolated
from nbhelpers.measure.startup import cold_vs_warm
from nbhelpers.measure.store import RunRecord, RunStore

MODEL = "qwen3-1.7b"
BASE = dict(
    run_name="h200", model=MODEL, batch_size=8, max_length=2048, num_samples=96, steps=5, warmup=2,
    attn_implementation="sdpa", kernels="eager", padding="static", timeout_s=300,
)  # fmt: skip
NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
COLD_WARM_GROUPS = ("startup-cold-warm", "startup-cold-warm-liger")
PARITY_GROUPS = (
    "epoch-default", "epoch-longtail", "epoch-flex-padded", "epoch-flex-rest", "epoch-varlen", "epoch-varlen-longtail",
    "epoch-liger-packed", "epoch-liger-no-flce", "epoch-liger-varlen",
)  # fmt: skip


def parity_reference(base: RunConfig) -> RunConfig:
    """Static padding's first step on the same 256 samples: the parity reference of a group, in seconds."""
    return base.replace(label="parity reference: eager, static, sdpa (first step only)", padding="static",
                        attn_implementation="sdpa", kernels="eager", timing="steps", steps=1, warmup=0,
                        num_samples=256, profile=False, timeout_s=120)  # fmt: skip


def epoch_group(base: RunConfig, prefix: str, with_extras: bool) -> list[RunConfig]:
    """Every strategy over one timed epoch of 256 samples; the first (static) is the parity reference."""
    epoch = base.replace(timing="epoch", num_samples=256, timeout_s=400)
    flex = epoch.replace(attn_implementation="flex_attention")
    configs = [
        epoch.replace(label=f"{prefix}eager, {s}, sdpa", padding=s, profile=s in ("static", "packed"),
                      token_budget=16384 if s == "token_budget" else 0)
        for s in PADDING_STRATEGIES
    ] + [flex.replace(label=f"{prefix}eager, packed, flex_attention", padding="packed", profile=True)]  # fmt: skip
    if with_extras:
        configs += [
            flex.replace(label=f"{prefix}liger, packed, flex_attention", padding="packed", kernels="liger"),
            epoch.replace(label=f"{prefix}eager, packed, flash_attention_2", padding="packed",
                          attn_implementation="flash_attention_2"),
        ]  # fmt: skip
    return configs


def groups(longtail_path: str) -> dict[str, list[RunConfig]]:
    base = RunConfig(**BASE)
    dynamic = base.replace(padding="dynamic")
    flex = base.replace(attn_implementation="flex_attention")
    longtail = {"dataset": longtail_path, "run_name": "h200-longtail"}
    epoch = base.replace(timing="epoch", num_samples=256, timeout_s=300)
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
        "startup-cold-warm": [
            base.replace(label="compile, static pad 2048, sdpa", kernels="compile", timeout_s=400),
            flex.replace(label="eager, packed, flex_attention", padding="packed"),
        ],
        "startup-cold-warm-liger": [  # Liger's Triton kernels cold and warm: the recommendation, then static padding
            base.replace(label="liger without fused linear cross-entropy, token budget 16,384, torch_varlen",
                         kernels="liger", liger_kernels=NO_FLCE, padding="token_budget", token_budget=16384,
                         attn_implementation="torch_varlen", num_samples=256, steps=3, warmup=1),
            base.replace(label="liger, static pad 2048, sdpa", kernels="liger", steps=3, warmup=1),
        ],  # fmt: skip
        "epoch-default": epoch_group(base, "", with_extras=True),
        "epoch-longtail": epoch_group(base.replace(**longtail), "longtail: ", with_extras=False),
        "epoch-flex-padded": [
            flex.replace(label=f"eager, {s}, flex_attention", padding=s, timing="epoch", num_samples=256, timeout_s=120)
            for s in ("static", "multiple", "dynamic", "bucketed")
        ],
        "epoch-flex-rest": [  # what epoch-flex-padded had no time for: pad to longest and bucketed, flex_attention
            parity_reference(base)
        ]
        + [
            flex.replace(label=f"eager, {s}, flex_attention", padding=s, timing="epoch", num_samples=256, timeout_s=200)
            for s in ("dynamic", "bucketed")
        ],
        "epoch-varlen": [
            parity_reference(base),
            epoch.replace(label="eager, packed, torch_varlen", padding="packed", attn_implementation="torch_varlen",
                          profile=True),
        ],
        "epoch-varlen-longtail": [
            parity_reference(base.replace(**longtail)),
            epoch.replace(label="longtail: eager, packed, torch_varlen", padding="packed",
                          attn_implementation="torch_varlen", profile=True, **longtail),
        ],
        "epoch-liger-packed": [  # why Liger ran slower than eager on packed rows (epoch-default): profiled, and sdpa
            parity_reference(base),
            epoch.replace(label="liger, packed, flex_attention (profiled)", padding="packed", kernels="liger",
                          attn_implementation="flex_attention", profile=True),
            epoch.replace(label="liger, packed, sdpa", padding="packed", kernels="liger", profile=True),
        ],
        "epoch-liger-no-flce": [  # Liger on packed rows with its plain cross-entropy instead of the fused one
            parity_reference(base),
            epoch.replace(label="liger without fused linear cross-entropy, packed, flex_attention", padding="packed",
                          kernels="liger", liger_kernels=NO_FLCE,
                          attn_implementation="flex_attention", profile=True),
        ],
        "epoch-token-budget-varlen": [  # one 16k-token row per step: no compile, no mask
            epoch.replace(label="eager, token_budget 16k, torch_varlen", padding="token_budget", token_budget=16384,
                          attn_implementation="torch_varlen", profile=True),
            epoch.replace(label="longtail: eager, token_budget 16k, torch_varlen", padding="token_budget",
                          token_budget=16384, attn_implementation="torch_varlen", **longtail),
        ],
        "epoch-liger-varlen": [  # Liger with and without its fused cross-entropy, on varlen rows
            parity_reference(base),
            epoch.replace(label="liger without fused linear cross-entropy, packed, torch_varlen", padding="packed",
                          kernels="liger", liger_kernels=NO_FLCE, attn_implementation="torch_varlen"),
            epoch.replace(label="liger, token_budget 16k, torch_varlen", padding="token_budget", token_budget=16384,
                          kernels="liger", attn_implementation="torch_varlen"),
            epoch.replace(label="liger without fused linear cross-entropy, token_budget 16k, torch_varlen",
                          padding="token_budget", token_budget=16384, kernels="liger", liger_kernels=NO_FLCE,
                          attn_implementation="torch_varlen"),
        ],
        "epoch-token-budget-flex": [
            flex.replace(label="eager, token_budget 16k, flex_attention", padding="token_budget", token_budget=16384,
                         timing="epoch", num_samples=256, timeout_s=400)
        ],  # fmt: skip
        "kernels": [
            dynamic.replace(label=f"{k}, pad to longest, sdpa", kernels=k, profile=True)
            for k in KERNEL_BACKENDS
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
            for s in PADDING_STRATEGIES
        ]
        + [base.replace(label="eager, static, eager attention", attn_implementation="eager")],  # fmt: skip
        "padding-flex": [
            base.replace(
                label=f"eager, {s}, flex_attention",
                padding=s,
                attn_implementation="flex_attention",
                token_budget=16384 if s == "token_budget" else 0,
            )
            for s in PADDING_STRATEGIES
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
    for name in args.groups:
        notebook = f"benchmarks/gpu_suite.py {name}"
        if name in COLD_WARM_GROUPS:
            measure = partial(cold_vs_warm, workdir=out / "kernel-caches", notebook=notebook)
        else:
            measure = partial(one_isolated, notebook=notebook, extra_env=env)
        measure_group(name, table[name], out, measure, parity=name in PARITY_GROUPS)


def one_isolated(config: RunConfig, **kwargs: Any) -> list[RunRecord]:
    """One configuration in its own process, as a list (the shape measure_group takes)."""
    return [run_isolated(config, **kwargs)]


def measure_group(
    group: str,
    configs: Iterable[RunConfig],
    out: Path,
    measure: Callable[[RunConfig], list[RunRecord]],
    *,
    parity: bool,
    reference: RunRecord | None = None,
) -> list[RunRecord]:
    """Measure each configuration in turn; append every record to OUT/<group>.jsonl and its console line to
    OUT/logs/<group>.log as it finishes (a stop keeps what was measured). With ``parity`` each record's
    first-step loss and gradient norm are checked against the group's first ok record, or against ``reference``
    (a stored baseline record of the same workload, not stored again)."""
    store = RunStore(out / f"{group}.jsonl")
    log = out / "logs" / f"{group}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    measured: list[RunRecord] = [reference] if reference is not None else []
    for config in configs:
        start = time.perf_counter()
        for record in measure(config):
            record.config["group"] = group
            if parity:
                check_against_first(record, [r for r in measured if r.ok])
            measured.append(record)
            store.append(record)
            line = report(group, record, time.perf_counter() - start)
            print(line, flush=True)
            with open(log, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
    return measured


def report(group: str, record: RunRecord, seconds: float) -> str:
    """One console line: the record's label, status and headline numbers."""
    m = record.metrics
    parity = m.get("parity", {})
    return (
        f"[{group}] {record.label}: {record.status} {record.reason[:160]} "
        f"tok/s={m.get('real_tokens_per_s', 0):,.0f} step={m.get('step_time_median_s', 0):.3f}s "
        f"first={m.get('first_step_s', 0):.1f}s pad={m.get('padding_fraction', 0):.2f} "
        f"mem={m.get('peak_memory_gib', 0):.1f}GiB mfu={m.get('mfu', 0):.3f} "
        f"kernels/step={m.get('kernels_per_step')} steps={m.get('timed_batches')} "
        f"parity={parity.get('status', '-')} loss={m.get('loss_first', 0):.5f} "
        f"grad={m.get('grad_norm_first', 0):.4f} ({seconds:.0f}s)"
    )

if __name__ == "__main__":
    main()
