"""The hybrid table on a GPU: padding strategy x reference / fused kernels x Liger on/off, one subprocess each.

Usage (GPU machine with fla and tilelang, see ../shared/gpu/hybrid_wheels.sh):
    PYTHONPATH=. python benchmarks/gpu_hybrid_suite.py --out DIR --model PRESET [--samples 64] [GROUP ...]
Groups: table (default; every row below, or those --rows names), headline (five of its rows, reference first),
startup (cold vs warm first step of the recommended fla + Liger token-budget configuration).

PRESET: the hybrid family's ~2B preset (hidden 2048, 24 layers, 18 Gated DeltaNet). Batch 8 x 2048,
one timed epoch of the default data after one untimed pass (few samples,
so the whole table fits in about eight minutes once the kernel caches are warm). Rows: static / dynamic (pad to
the longest) / packed / token budget, each with kernels eager (transformers' PyTorch reference), liger, fla and
fla+liger. Every configuration runs in its own subprocess through nbhelpers.measure.runner, so an out-of-memory
or a refused environment is a failed record; static and packed rows are profiled (kernel launches per step
from a one-step profiler window). Parity: each record's first-step loss and gradient norm against the group's
first record (eager, static). Records append to DIR/hybrid-<group>.jsonl as each finishes (the format of
benchmarks/gpu_suite.py, whose console line this reuses), console lines to DIR/logs/hybrid-<group>.log. One
shared kernel cache (Triton, tilelang) serves the table: only the first fla row pays the compile.
"""

from __future__ import annotations

import argparse
import os
from functools import partial
from pathlib import Path

from gpu_suite import measure_group, one_isolated

from nbhelpers.kernels.cache import cache_env, make_cache_folders
from nbhelpers.kernels.registry import uses_liger_switches
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.startup import cold_vs_warm
from nbhelpers.planning.lists import parse_list

STRATEGIES = ("static", "dynamic", "packed", "token_budget")
BACKENDS = ("eager", "liger", "fla", "fla+liger")
LIGER_KERNELS = ("rms_norm", "swiglu", "fused_linear_cross_entropy")  # Liger has no RoPE for Qwen3.5
PROFILED = ("static", "packed")


def base_config(model: str, samples: int, batch_size: int = 8) -> RunConfig:
    return RunConfig(
        run_name="h200-hybrid", model=model, batch_size=batch_size, max_length=2048, num_samples=samples,
        timing="epoch", attn_implementation="sdpa", kernels="eager", padding="static", profile_steps=1, timeout_s=420,
    )  # fmt: skip


def table(base: RunConfig, switches: tuple[str, ...] = LIGER_KERNELS) -> list[RunConfig]:
    """Every strategy x backend; the first (eager, static) is the parity reference."""
    return [
        base.replace(
            label=f"{kernels}, {strategy}, sdpa", kernels=kernels, padding=strategy, profile=strategy in PROFILED,
            liger_kernels=switches if uses_liger_switches(kernels) else (),  # token budget: batch x max length
        )
        for kernels in BACKENDS
        for strategy in STRATEGIES
    ]  # fmt: skip


HEADLINE = (  # the reference first (parity and speedups divide by it), then the cold fla row, then the rest
    ("eager", "static"), ("fla", "packed"), ("fla", "static"), ("fla+liger", "token_budget"), ("eager", "packed"),
)  # fmt: skip


def headline(base: RunConfig, switches: tuple[str, ...] = LIGER_KERNELS) -> list[RunConfig]:
    """The rows the hybrid's claims rest on (reference static vs fused + packed; kernels only; padding only),
    in an order whose whole fits one GPU call."""
    rows = {(c.kernels, c.padding): c for c in table(base, switches)}
    return [rows[key] for key in HEADLINE]


def startup(base: RunConfig, switches: tuple[str, ...] = LIGER_KERNELS) -> list[RunConfig]:
    """The recommended hybrid configuration (fla + Liger, token budget), timed by steps: its first step is the
    startup cost (cold, then warm)."""
    return [base.replace(label="fla+liger, token_budget, sdpa", kernels="fla+liger", liger_kernels=switches,
                         padding="token_budget", timing="steps", steps=2, warmup=1, profile=False,
                         timeout_s=480)]  # fmt: skip


def chosen_rows(configs: list[RunConfig], rows: str) -> list[RunConfig]:
    """The rows named as "kernels:strategy,..." (every row when empty), in the order named (the first is the
    parity reference); a name the table lacks is an error that lists what it has."""
    if not rows:
        return configs
    wanted = [tuple(row.split(":", 1)) for row in parse_list(rows, None, "--rows")]
    have = {(c.kernels, c.padding): c for c in configs}
    unknown = [":".join(w) for w in wanted if w not in have]
    if unknown:
        names = ", ".join(":".join(key) for key in have)
        raise SystemExit(f"--rows {','.join(unknown)} is not in the table; its rows: {names}")
    return [have[key] for key in dict.fromkeys(wanted)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("groups", nargs="*", default=["table"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", required=True, help="the hybrid family's ~2B preset")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="rows per step (x 2048 tokens)")
    parser.add_argument("--liger-kernels", default=",".join(LIGER_KERNELS), help="Liger switches of the liger rows")
    parser.add_argument("--rows", default="", help="only these table rows, as kernels:strategy,... (e.g. fla:static)")
    args = parser.parse_args()
    out = Path(args.out)
    os.environ["NBHELPERS_RUNS"] = str(out)
    cache = Path(os.environ.get("NBHELPERS_KERNEL_CACHE", "/tmp/nbh-kernel-cache"))
    env = cache_env(cache)  # Triton (with its autotune results), Inductor and tilelang caches shared by every row
    make_cache_folders(env)
    base = base_config(args.model, args.samples, args.batch_size)
    switches = parse_list(args.liger_kernels, None, "--liger-kernels", empty=True)
    groups = {
        "table": chosen_rows(table(base, switches), args.rows),
        "headline": headline(base, switches),
        "startup": startup(base, switches),
    }
    for name in args.groups:
        notebook = f"benchmarks/gpu_hybrid_suite.py {name}"
        if name == "startup":
            measure = partial(cold_vs_warm, workdir=out / "kernel-caches", notebook=notebook)
        else:
            measure = partial(one_isolated, notebook=notebook, extra_env=env)
        measure_group(f"hybrid-{name}", groups[name], out, measure, parity=name in ("table", "headline"))


if __name__ == "__main__":
    main()
