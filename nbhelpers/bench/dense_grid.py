"""Qwen3-1.7B shape, full fine-tuning, batch 8 x 2048: padding strategies x attention x kernel backends.

Two windows: a few steps (2 untimed, 5 timed, 96 samples) and one whole epoch of the same 256 samples after one
untimed pass, every strategy on exactly the same samples. The epoch suites start with static padding, every other
record's first step judged against it. ``longtail`` rows read the long-tailed synthetic set (:data:`LONGTAIL`).
"""

from __future__ import annotations

from pathlib import Path

from nbhelpers.data.strategies import PADDING_STRATEGIES, STRATEGIES
from nbhelpers.measure.config import RunConfig

from .suite import LONGTAIL, STARTUP, Suite

WINDOW = "qwen3-1.7b/five-step-window"
EPOCH = "qwen3-1.7b/padding-strategies-epoch"
NO_FLCE = ("rope", "rms_norm", "swiglu", "cross_entropy")  # Liger without its fused linear cross-entropy
WITH_FLCE = ("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy")  # Liger's set when these were measured
FIRST_BACKENDS = ("eager", "liger", "compile", "liger+compile")  # the kernel table when the window was measured
BASE = RunConfig(
    model="qwen3-1.7b", batch_size=8, max_length=2048, num_samples=96, steps=5, warmup=2,
    attn_implementation="sdpa", kernels="eager", liger_kernels=WITH_FLCE, padding="static", timeout_s=300,
)  # fmt: skip
FLEX = BASE.replace(attn_implementation="flex_attention")
EPOCH_BASE = BASE.replace(timing="epoch", num_samples=256, timeout_s=300)


BUDGET_FIELD = "token_budget"  # the PaddingSettings field a strategy that plans by a token budget reads


def budget(strategy: str) -> int:
    """The token budget a strategy's row gets in the grid: 16,384 where its plan reads one (the table says), else 0."""
    return 16384 if BUDGET_FIELD in STRATEGIES[strategy].reads else 0


def longtail(config: RunConfig, folder: Path) -> RunConfig:
    """The same row on the long-tailed set (written into the suite's folder)."""
    return config.replace(dataset=str(folder / LONGTAIL), label=f"longtail: {config.label}")


def parity_reference(base: RunConfig) -> RunConfig:
    """Static padding's first step on the same 256 samples: a suite's parity reference, in seconds."""
    return base.replace(label="parity reference: eager, static, sdpa (first step only)", padding="static",
                        attn_implementation="sdpa", kernels="eager", timing="steps", steps=1, warmup=0,
                        num_samples=256, profile=False, timeout_s=120)  # fmt: skip


def epoch_rows(base: RunConfig, with_extras: bool) -> list[RunConfig]:
    """Every strategy over one timed epoch; the first (static) is the parity reference."""
    epoch = base.replace(timing="epoch", num_samples=256, timeout_s=400)
    flex = epoch.replace(attn_implementation="flex_attention")
    rows = [
        epoch.replace(label=f"eager, {s}, sdpa", padding=s, profile=s in ("static", "packed"), token_budget=budget(s))
        for s in PADDING_STRATEGIES
    ] + [flex.replace(label="eager, packed, flex_attention", padding="packed", profile=True)]
    if with_extras:
        rows += [
            flex.replace(label="liger, packed, flex_attention", padding="packed", kernels="liger"),
            epoch.replace(label="eager, packed, flash_attention_2", padding="packed",
                          attn_implementation="flash_attention_2"),
        ]  # fmt: skip
    return rows


def window_suites() -> list[Suite]:
    dynamic = BASE.replace(padding="dynamic")
    return [
        Suite(f"{WINDOW}/baseline", "the baseline (eager, static pad 2048, SDPA), profiled",
              lambda _: [BASE.replace(label="baseline: eager, static pad 2048, sdpa", profile=True)]),
        Suite(f"{WINDOW}/kernels", "every kernel backend on pad-to-longest rows, profiled",
              lambda _: [dynamic.replace(label=f"{k}, pad to longest, sdpa", kernels=k, profile=True)
                         for k in FIRST_BACKENDS], parity=False),
        Suite(f"{WINDOW}/compile-static", "torch.compile and Liger at static padding",
              lambda _: [BASE.replace(label=f"{k}, static pad 2048, sdpa", kernels=k, timeout_s=400)
                         for k in ("compile", "liger")], parity=False),
        Suite(f"{WINDOW}/padding", "every padding strategy with SDPA, and eager attention",
              lambda _: [BASE.replace(label=f"eager, {s}, sdpa", padding=s, profile=s in ("dynamic", "packed"),
                                      token_budget=budget(s)) for s in PADDING_STRATEGIES]
              + [BASE.replace(label="eager, static, eager attention", attn_implementation="eager")], parity=False),
        Suite(f"{WINDOW}/padding-flex", "every padding strategy with flex_attention; Liger on packed rows",
              lambda _: [FLEX.replace(label=f"eager, {s}, flex_attention", padding=s, token_budget=budget(s))
                         for s in PADDING_STRATEGIES]
              + [FLEX.replace(label="liger, packed, flex_attention", padding="packed", kernels="liger"),
                 FLEX.replace(label="liger, token_budget 32k, flex_attention", padding="token_budget",
                              kernels="liger", token_budget=32768)], parity=False),
        Suite(f"{WINDOW}/longtail", "padding strategies on the long-tailed set",
              lambda folder: [longtail(BASE.replace(label=f"eager, {s}, {a}", padding=s, attn_implementation=a),
                                       folder)
                              for s, a in (("static", "sdpa"), ("dynamic", "sdpa"), ("bucketed", "sdpa"),
                                           ("packed", "sdpa"), ("packed", "flex_attention"))],
              parity=False, datasets=(LONGTAIL,)),
        Suite(f"{WINDOW}/rerun", "static, pad-to-longest, multiple of 8 again; packed flex cold and warm; longtail",
              lambda folder: [BASE.replace(label=f"eager, {s}, sdpa", padding=s, steps=8 if s == "dynamic" else 5)
                              for s in ("static", "dynamic", "multiple")]
              + [FLEX.replace(label="eager, packed, flex_attention (cold cache)", padding="packed"),
                 FLEX.replace(label="eager, packed, flex_attention (warm cache)", padding="packed"),
                 FLEX.replace(label="eager, token_budget 16k, flex_attention", padding="token_budget",
                              token_budget=16384),
                 FLEX.replace(label="liger, packed, flex_attention", padding="packed", kernels="liger"),
                 FLEX.replace(label="liger, token_budget 32k, flex_attention", padding="token_budget",
                              kernels="liger", token_budget=32768),
                 longtail(BASE.replace(label="eager, static, sdpa"), folder),
                 longtail(BASE.replace(label="eager, packed, sdpa", padding="packed"), folder),
                 longtail(FLEX.replace(label="eager, packed, flex_attention", padding="packed"), folder)],
              parity=False, datasets=(LONGTAIL,)),
        Suite(f"{WINDOW}/startup", "first steps on the shared cache of the call: Liger and compile, packed flex",
              lambda _: [dynamic.replace(label=f"{k}, pad to longest, sdpa (warm cache)", kernels=k)
                         for k in ("liger", "compile")]
              + [FLEX.replace(label=f"eager, packed, flex_attention ({cache} cache)", padding="packed")
                 for cache in ("cold", "warm")], parity=False),
        Suite(f"{WINDOW}/startup-cold-warm", "first step on an empty and on a copied kernel cache",
              lambda _: [BASE.replace(label="compile, static pad 2048, sdpa", kernels="compile", timeout_s=400),
                         FLEX.replace(label="eager, packed, flex_attention", padding="packed")],
              measure=STARTUP, parity=False),
        Suite(f"{WINDOW}/startup-cold-warm-liger", "Liger's Triton kernels cold and warm: the pick, then static",
              lambda _: [BASE.replace(label="liger without fused linear cross-entropy, token budget 16,384, "
                                            "torch_varlen", kernels="liger", liger_kernels=NO_FLCE,
                                      padding="token_budget", token_budget=16384, attn_implementation="torch_varlen",
                                      num_samples=256, steps=3, warmup=1),
                         BASE.replace(label="liger, static pad 2048, sdpa", kernels="liger", steps=3, warmup=1)],
              measure=STARTUP, parity=False),
    ]  # fmt: skip


def epoch_suites() -> list[Suite]:
    flex = EPOCH_BASE.replace(attn_implementation="flex_attention", timeout_s=200)
    ref = parity_reference(BASE)
    return [
        Suite(f"{EPOCH}/default", "every padding strategy over one epoch; Liger packed; flash_attention_2",
              lambda _: epoch_rows(BASE, with_extras=True)),
        Suite(f"{EPOCH}/longtail", "every padding strategy over one epoch of the long-tailed set",
              lambda folder: [longtail(c, folder) for c in epoch_rows(BASE, with_extras=False)],
              datasets=(LONGTAIL,)),
        Suite(f"{EPOCH}/flex-padded", "padded strategies with flex_attention",
              lambda _: [flex.replace(label=f"eager, {s}, flex_attention", padding=s, timeout_s=120)
                         for s in ("static", "multiple", "dynamic", "bucketed")]),
        Suite(f"{EPOCH}/flex-rest", "pad to longest and bucketed with flex_attention",
              lambda _: [ref] + [flex.replace(label=f"eager, {s}, flex_attention", padding=s)
                                 for s in ("dynamic", "bucketed")]),
        Suite(f"{EPOCH}/varlen", "packed rows with torch_varlen",
              lambda _: [ref, EPOCH_BASE.replace(label="eager, packed, torch_varlen", padding="packed",
                                                 attn_implementation="torch_varlen", profile=True)]),
        Suite(f"{EPOCH}/varlen-longtail", "packed rows with torch_varlen, long-tailed set",
              lambda folder: [longtail(c, folder) for c in (
                  ref, EPOCH_BASE.replace(label="eager, packed, torch_varlen", padding="packed",
                                          attn_implementation="torch_varlen", profile=True))],
              datasets=(LONGTAIL,)),
        Suite(f"{EPOCH}/liger-packed", "why Liger ran slower than eager on packed rows: profiled, and with SDPA",
              lambda _: [ref,
                         EPOCH_BASE.replace(label="liger, packed, flex_attention (profiled)", padding="packed",
                                            kernels="liger", attn_implementation="flex_attention", profile=True),
                         EPOCH_BASE.replace(label="liger, packed, sdpa", padding="packed", kernels="liger",
                                            profile=True)]),
        Suite(f"{EPOCH}/liger-no-flce", "Liger on packed rows with its plain cross-entropy",
              lambda _: [ref, EPOCH_BASE.replace(
                  label="liger without fused linear cross-entropy, packed, flex_attention", padding="packed",
                  kernels="liger", liger_kernels=NO_FLCE, attn_implementation="flex_attention", profile=True)]),
        Suite(f"{EPOCH}/token-budget-flex", "one 16k-token row per step with flex_attention",
              lambda _: [flex.replace(label="eager, token_budget 16k, flex_attention", padding="token_budget",
                                      token_budget=16384, timeout_s=400)], parity=False),
        Suite(f"{EPOCH}/token-budget-varlen", "one 16k-token row per step with torch_varlen (default, longtail)",
              lambda folder: [EPOCH_BASE.replace(label="eager, token_budget 16k, torch_varlen", padding="token_budget",
                                                 token_budget=16384, attn_implementation="torch_varlen", profile=True),
                              longtail(EPOCH_BASE.replace(label="eager, token_budget 16k, torch_varlen",
                                                          padding="token_budget", token_budget=16384,
                                                          attn_implementation="torch_varlen"), folder)],
              parity=False, datasets=(LONGTAIL,)),
        Suite(f"{EPOCH}/liger-varlen", "Liger with and without its fused linear cross-entropy on varlen rows",
              lambda _: [ref] + [
                  EPOCH_BASE.replace(label=label, padding=padding, token_budget=budget(padding), kernels="liger",
                                     liger_kernels=switches, attn_implementation="torch_varlen")
                  for label, padding, switches in (
                      ("liger without fused linear cross-entropy, packed, torch_varlen", "packed", NO_FLCE),
                      ("liger, token_budget 16k, torch_varlen", "token_budget", WITH_FLCE),
                      ("liger without fused linear cross-entropy, token_budget 16k, torch_varlen", "token_budget",
                       NO_FLCE))]),
    ]  # fmt: skip


SUITES = (*window_suites(), *epoch_suites())
