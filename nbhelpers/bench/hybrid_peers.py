"""The Qwen3.5/3.8 hybrids beside the tools people pick and on the GPUs people have: the 2B's and the 27B's LoRA
pick, then Unsloth, TRL's defaults with fla installed ("without the workbook") and TRL's best flags on the same
samples, on an 80 GB card (a 79 GiB cap); and the 27B's best row over each frozen base under caps of 80, 48 and
24 GiB, where a row that cannot fit is a failed record with the planner's reason, before any work."""

from __future__ import annotations

from collections.abc import Callable

from nbhelpers.analysis.peers import peers_of
from nbhelpers.kernels.packed_boundaries import SHARED_VARIABLE
from nbhelpers.kernels.registry import liger_switches_for
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.engines import WORKBOOK
from nbhelpers.models.checkpointing import PREFETCH_VARIABLE

from .dense_peers import FIRST_STEPS
from .frozen_bases import CAPS_GIB, base_rows, capped_row
from .hybrid import FLA_NEEDS, HYBRID_LIGER_PLAIN_CE, LORA, LORA_27B, fused_norm_27b, wider
from .lora_forwards import LORA_FORWARD_NAMES, epilogue_rows
from .suite import Suite

PEERS = "unsloth,trl_defaults,trl_best"
# Under a cap, beside the 4-bit base Unsloth and TRL both load (NF4 linears, the rest as built) where the planner fits
# it: Unsloth, TRL's defaults ("without the workbook") and its best flags, on the same samples.
FOUR_BIT_BASE = "nf4_bf16"
CAPPED_PEERS = "unsloth,trl_defaults,trl_best"
TRL_PEERS = ("trl_defaults", "trl_best")  # the capped peers that load the workbook's own 4-bit base
UNSLOTH_NEEDS = (f"{FLA_NEEDS}; TRL (../shared/gpu/wheels.sh trl); Unsloth's own site (scripts/gpu_unsloth_wheels.sh "
                 "with --target, NBHELPERS_UNSLOTH_SITE naming it)")  # fmt: skip
# The 2B's pick: fla + Liger without its fused linear cross-entropy at a token budget, planned for an 80 GB card.
PICK_2B = capped_row(LORA.replace(
    model="qwen3.5-2b", label="2b lora: fla+liger (plain CE), varlen", kernels="fla+liger",
    liger_kernels=HYBRID_LIGER_PLAIN_CE, padding="token_budget", token_budget=16384,
    attn_implementation="torch_varlen", num_samples=64, timeout_s=600,
), CAPS_GIB[0])  # fmt: skip


def best_27b() -> RunConfig:
    """The 27B's fastest row on an H200 (fla + Liger, fused gated norm, varlen, uncast), unprofiled."""
    return fused_norm_27b()[2].replace(profile=False)


def pick_27b() -> RunConfig:
    """The 27B's fastest row as the planner fits it on an 80 GB card (a 79 GiB cap)."""
    return capped_row(best_27b().replace(label="27b lora: fla+liger (fused gated norm), varlen, uncast"), CAPS_GIB[0])


def peer_rows(pick: RunConfig) -> list[RunConfig]:
    """The pick, then each peer on its samples (Unsloth first: a job cut short keeps the row never measured)."""
    return [pick, *peers_of(pick, pick.label, PEERS, on_gpu=True)]


def compiled(pick: RunConfig) -> RunConfig:
    """The pick with its decoder layers compiled one by one (two graphs, one per kind of layer; fla's and Liger's
    kernels called between the compiled pieces), Liger keeping the switches Inductor does not fuse (its loss)."""
    kernels = f"{pick.kernels}+regional_compile"
    return pick.replace(label=f"{pick.label}, regional compile", kernels=kernels,
                        liger_kernels=liger_switches_for(kernels, pick.liger_kernels))  # fmt: skip


def compile_rows(pick: RunConfig) -> list[RunConfig]:
    """The pick, then compiled layer by layer, then Unsloth on the same samples (last: a job cut short keeps the
    workbook's pair, measured one after the other on one machine)."""
    return [pick, compiled(pick), *peers_of(pick, pick.label, "unsloth", on_gpu=True)]


def flashqla_rows(pick: RunConfig) -> list[RunConfig]:
    """Each delta rule (fla's, FlashQLA's) uncompiled and compiled layer by layer: the pick and its compiled form
    first, so that a job cut short keeps the question the regional-compile suite asks."""
    swapped = pick.replace(label=f"{pick.label}, FlashQLA delta rule", kernels=pick.kernels.replace("fla", "flashqla"))
    return [pick, compiled(pick), swapped, compiled(swapped)]


def profiled_rows(pick: RunConfig) -> list[RunConfig]:
    """The pick and Unsloth on the same samples, each with one step profiled after its timed ones (the pick: after
    its timed steps; Unsloth: in one more epoch), so their kernel time compares category by category."""
    return [row.replace(profile=True) for row in (pick, *peers_of(pick, pick.label, "unsloth", on_gpu=True))]


def capped_27b(cap_gib: float, lora_epilogue: str = "fused") -> list[RunConfig]:
    """Under a cap of ``cap_gib``: the reference path (full recomputation) and the best row over each frozen base
    (rows that cannot fit are failed records with the planner's reason), then Unsloth, TRL's defaults and its best
    flags beside the 4-bit base where the planner fits it. The 4-bit row first, then the peers on its samples, the
    other bases that fit, the refusals (no work): a job cut short keeps the comparison the cap is measured for, in
    one job. The workbook's rows add LoRA's product in the GEMM (``lora_epilogue``; 1.07x PEFT's forward on the 27B
    at 79 and 24 GiB, H100)."""
    reference = LORA_27B.replace(label="27b lora: eager, static, ckpt full", activation_checkpointing="full")
    best = best_27b().replace(lora_epilogue=lora_epilogue)
    rows = [capped_row(reference, cap_gib)]
    what = "fla+liger, fused gated norm, varlen" + (", LoRA product in the GEMM" if lora_epilogue == "fused" else "")
    rows += [capped_row(row, cap_gib) for row in base_rows(best, what)]
    four_bit = next(row for row in rows[1:] if row.frozen_base == FOUR_BIT_BASE)
    fitting = [row for row in rows if "nothing fits" not in row.label]
    refused = [row for row in rows if row not in fitting]
    if four_bit not in fitting:
        return rows
    peers = peers_of(four_bit, four_bit.label, CAPPED_PEERS, on_gpu=True)
    return [four_bit, *peers, *[row for row in fitting if row is not four_bit], *refused]


def four_bit_24(lora_epilogue: str) -> RunConfig:
    """The 27B's 4-bit row under a 24 GiB cap with the LoRA forward ``lora_epilogue`` (PEFT's, in the GEMM, or each
    linear one autograd function), labelled as first measured (2026-12-06)."""
    row = capped_27b(24, "peft")[0]
    return row.replace(lora_epilogue=lora_epilogue, label=f"{row.label}, {LORA_FORWARD_NAMES[lora_epilogue]}")


# A larger sample than the 32 the capped rows share: at 12,288 tokens a step, 32 samples (12,963 real tokens) make
# one full step and one of about 700 tokens per epoch; 128 make four full ones and a remainder, as a real data set does.
OFFLOAD_SAMPLES = 128


def offload_rows_24() -> list[RunConfig]:
    """The 27B's 4-bit row under a 24 GiB cap with each layer's input offloaded to the host, at the planner's largest
    budget (12,288 tokens against 4,096 with the inputs on the GPU), then the row as measured (every layer recomputed
    on the GPU, 4,096), each with a profiled step, on the 32 samples of the capped rows; then offloaded at 4,096 (the
    same batches as the row before it: the same first loss, and what the copies cost); then the pair on 128 samples."""
    four_bit = capped_27b(24)[0]
    base = four_bit.replace(label=four_bit.label.split(", cap ")[0], activation_checkpointing="none", token_budget=0)
    offloaded = capped_row(base, 24, (("offload", 2),))
    pair = [offloaded.replace(profile=True), four_bit.replace(profile=True)]
    same_batches = four_bit.replace(activation_checkpointing="offload",
                                    label=four_bit.label.replace("checkpointing full", "checkpointing offload"))
    return [*pair, same_batches, *(row.replace(profile=False) for row in wider(pair, OFFLOAD_SAMPLES))]


def switched_pair(row: RunConfig, on: str, off: str) -> list[RunConfig]:
    """``row`` twice on the same batches: labelled ``on`` (a switch at its default), then ``off`` (turned off)."""
    return [row.replace(label=f"{row.label}, {on}"), row.replace(label=f"{row.label}, {off}")]


def switched_off(variable: str, off: str) -> Callable[[RunConfig], dict[str, str]]:
    """A suite's ``row_env``: ``variable`` = "0" for the row whose label ends with ``off``, the default for others."""
    return lambda config: {variable: "0"} if config.label.endswith(off) else {}


ON_DEMAND = "each input copied back when asked for"  # the label's end for the row without prefetch


def prefetch_rows_24() -> list[RunConfig]:
    """The offloaded pick on 128 samples, each input's copy back started under the layer after it (the default),
    then with each copied back when the recompute asks for it (the compute stream waiting for each), both profiled,
    on the same batches."""
    return switched_pair(offload_rows_24()[3].replace(profile=True), "prefetched", ON_DEMAND)


PER_CALL = "fla's boundaries made per call"  # the label's end for the row without shared boundaries


def fla_boundaries_rows_24() -> list[RunConfig]:
    """The offloaded pick on 128 samples with fla's boundaries built once per row and shared (the default), then with
    an int64 copy per call (fla rebuilding its chunk indices, a host synchronization each), both profiled with their
    synchronizations counted, on the same batches."""
    return switched_pair(offload_rows_24()[3].replace(profile=True), "fla's boundaries shared", PER_CALL)


def unsloth_beside(row: RunConfig) -> list[RunConfig]:
    """Unsloth on ``row``'s samples at its tokens a step (its own checkpointing and packing)."""
    return peers_of(row, row.label, "unsloth", on_gpu=True)


def tokens_or_recomputation_79() -> list[RunConfig]:
    """The 27B's 4-bit row under a 79 GiB cap as the planner picked it before its rule gave a dequantizing base
    tokens' worth up to 16,384 (4,096 tokens, every 4th layer recomputed), then at 16,384 tokens with every layer
    recomputed (what 48 GiB gives: there 2,901 real tok/s against 1,991 at 4,096 under 24 GiB), on the same samples."""
    four_bit = capped_27b(79)[0]
    head = four_bit.label.split(": budget")[0]
    choices = ((4096, "every_k", 4, "every_k=4"), (16384, "full", 2, "full"))
    return [four_bit.replace(token_budget=budget, activation_checkpointing=checkpointing, checkpoint_every=every,
                             label=f"{head}: budget {budget}, checkpointing {what}")
            for budget, checkpointing, every, what in choices]  # fmt: skip


SUITES = (
    Suite("hybrid/qwen3.5-2b/lora-peers/unsloth", "the 2B hybrid's LoRA pick, then Unsloth, TRL's defaults with fla "
          "installed and its best flags on the same samples", lambda _: peer_rows(PICK_2B), parity=False,
          needs=UNSLOTH_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/lora-peers/unsloth", "the 27B's LoRA pick on an 80 GB card, then Unsloth, TRL's "
          "defaults with fla installed and its best flags on the same samples", lambda _: peer_rows(pick_27b()),
          parity=False, needs=UNSLOTH_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/regional-compile/unsloth", "the 27B's LoRA pick on an 80 GB card, the same "
          "with its layers compiled one by one, then Unsloth on the same samples", lambda _: compile_rows(pick_27b()),
          parity=False, needs=UNSLOTH_NEEDS),
    Suite("hybrid/qwen3.5-2b/regional-compile/unsloth", "the 2B hybrid's LoRA pick, the same with its layers "
          "compiled one by one, then Unsloth on the same samples", lambda _: compile_rows(PICK_2B), parity=False,
          needs=UNSLOTH_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/flashqla/pick", "the 27B's LoRA pick on an 80 GB card with fla's delta rule and "
          "with FlashQLA's, each uncompiled and compiled layer by layer", lambda _: flashqla_rows(pick_27b()),
          parity=False, needs=f"{FLA_NEEDS}; flash-qla (pip download --no-deps flash-qla==0.1.3, sm90+)"),
    Suite("hybrid/qwen3.8-27b-lora/profile/unsloth", "the 27B's LoRA pick on an 80 GB card and Unsloth on the same "
          "samples, each with one step profiled after its timed ones: where Unsloth's step is shorter",
          lambda _: profiled_rows(pick_27b()), parity=False, needs=UNSLOTH_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/lora-epilogue/pick", "the 27B's LoRA pick on an 80 GB card with PEFT's scale and "
          "add, then with LoRA's product added in the GEMM, each with a profiled step, on the same batches",
          lambda _: epilogue_rows(pick_27b()), parity=False, needs=FLA_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/lora-epilogue/function", "the 27B's LoRA pick on an 80 GB card with LoRA's "
          "product in the GEMM, then with each LoRA linear one autograd function, each with a profiled step, on the "
          "same batches", lambda _: epilogue_rows(pick_27b(), ("fused", "function")), parity=False, needs=FLA_NEEDS),
    Suite("hybrid/qwen3.8-27b-lora/fresh-machine/pick", "the 27B pick's first steps on an 80 GB card, on the "
          "kernel caches this machine has (empty, or unpacked from another machine's archive)",
          lambda _: [pick_27b().replace(**FIRST_STEPS)], parity=False, needs=FLA_NEEDS),
    *(Suite(f"hybrid/qwen3.8-27b-lora/memory-caps/{cap:g}-gib", f"under a cap of {cap:g} GiB: the reference path, "
            "the best row over each frozen base, and Unsloth beside the 4-bit base where it fits",
            lambda _, cap=cap: capped_27b(cap), parity=False,
            needs=f"{UNSLOTH_NEEDS}; bitsandbytes and torchao wheels (.whl-ao) for the nf4 and float8 bases")
      for cap in CAPS_GIB),
    *(Suite(f"hybrid/qwen3.8-27b-lora/memory-caps/{cap:g}-gib-{part}", f"under a cap of {cap:g} GiB: {what} of the "
            f"{cap:g}-gib suite (each half fits one session's device time)",
            lambda _, cap=cap, peers=peers: [row for row in capped_27b(cap) if (row.engine != WORKBOOK) is peers],
            parity=False, needs=f"{UNSLOTH_NEEDS if peers else FLA_NEEDS}; bitsandbytes and torchao wheels (.whl-ao)")
      for cap in CAPS_GIB[:2]
      for part, what, peers in (("workbook", "the workbook's rows and the planner's refusals", False),
                                ("peers", "Unsloth's and TRL's rows", True))),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-workbook", "under a cap of 24 GiB: the workbook's 4-bit row "
          "alone (the peers' rows of the full suite take about 15 minutes more)", lambda _: capped_27b(24)[:1],
          parity=False, needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-epilogue", "under a cap of 24 GiB: the workbook's 4-bit row "
          "with LoRA's product added in the GEMM, then with PEFT's scale, clone and add, on the same batches",
          lambda _: [four_bit_24(epilogue) for epilogue in ("fused", "peft")],
          parity=False, needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-function", "under a cap of 24 GiB: the workbook's 4-bit row "
          "with each LoRA linear one autograd function, then with LoRA's product in the GEMM, each with a profiled "
          "step, on the same batches (where the host's launches set the pace)",
          lambda _: epilogue_rows(capped_27b(24, "peft")[0], ("function", "fused")),
          parity=False, needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-profile", "under a cap of 24 GiB: the workbook's 4-bit row with "
          "LoRA's product added in the GEMM, one step profiled after its timed ones (where a 4-bit step's time goes)",
          lambda _: [four_bit_24("fused").replace(profile=True)],
          parity=False, needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload", "under a cap of 24 GiB: the workbook's 4-bit row with "
          "each layer's input offloaded to the host at the planner's larger budget, then as measured with the inputs "
          "on the GPU, each profiled, on the same 32 samples; offloaded at the measured budget; the pair on 128",
          lambda _: offload_rows_24(),
          parity=False, needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-unsloth", "under a cap of 24 GiB: Unsloth on the 32 "
          "samples at the offloaded row's tokens a step (its own checkpointing offloads too), beside 24-gib-offload",
          lambda _: unsloth_beside(offload_rows_24()[0]), parity=False,
          needs=f"{UNSLOTH_NEEDS}; bitsandbytes (.whl-ao)"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-unsloth-128", "under a cap of 24 GiB: Unsloth on the "
          "offload suite's 128 samples at the offloaded row's tokens a step", lambda _: unsloth_beside(
              offload_rows_24()[3]), parity=False, needs=f"{UNSLOTH_NEEDS}; bitsandbytes (.whl-ao)"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-prefetch", "under a cap of 24 GiB: the offloaded "
          "pick on 128 samples with each input's copy back started a layer early, then with each copied back when "
          "asked for, both profiled, on the same batches", lambda _: prefetch_rows_24(), parity=False,
          needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base",
          row_env=switched_off(PREFETCH_VARIABLE, ON_DEMAND)),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-offload-fla-boundaries", "under a cap of 24 GiB: the offloaded "
          "pick on 128 samples with fla's boundaries built once a row and shared by every layer, then made per call, "
          "both profiled with the host's synchronizations counted, on the same batches",
          lambda _: fla_boundaries_rows_24(), parity=False,
          needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base",
          row_env=switched_off(SHARED_VARIABLE, PER_CALL)),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/79-gib-tokens", "under a cap of 79 GiB: the 4-bit row at the "
          "planner's 4,096 tokens with every 4th layer recomputed, then at 16,384 with every layer recomputed",
          lambda _: tokens_or_recomputation_79(), parity=False,
          needs=f"{FLA_NEEDS}; bitsandbytes (.whl-ao) for the 4-bit base"),
    Suite("hybrid/qwen3.8-27b-lora/memory-caps/24-gib-trl", "under a cap of 24 GiB: TRL's defaults and its best flags "
          "on the workbook's 4-bit base alone (beside the rows of 24-gib-workbook and Unsloth's of 24-gib)",
          lambda _: [row for row in capped_27b(24) if row.engine in TRL_PEERS], parity=False,
          needs=f"{FLA_NEEDS}; TRL (../shared/gpu/wheels.sh trl); bitsandbytes (.whl-ao) for the 4-bit base"),
)  # fmt: skip
