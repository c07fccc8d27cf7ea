"""The table of kernel backends: the one place that knows each backend's name and what it means.

Every module that needs to know something about a backend (how to apply and verify it, the environment of
its child process, the caches it fills, its parity tolerance class, what it exports to TrainingArguments)
asks this table; none tests a backend's name. Adding a backend is one entry here plus its own module
(like :mod:`nbhelpers.kernels.liger`). The composites (``liger+compile``, :func:`compose` of entries) and which model
family takes which backend are worked out from what each entry declares (:mod:`nbhelpers.kernels.compatibility`):
the step parts it takes over, the partners it allows and the model capabilities it needs.

Light at import (RunConfig reads :data:`KERNEL_BACKENDS`): torch and Liger load inside the functions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from nbhelpers.models.families import (
    FAMILIES,
    FLOAT8_LINEARS,
    GATED_DELTANET,
    LIGER_PATCH,
    MODEL_CAPABILITIES,
    REPEATED_LAYERS,
    ModelFamily,
)

from .cce import (
    CCE_BACKEND,
    CCE_CHECKS,
    REPLACED_LIGER_SWITCHES,
    apply_cce,
    cce_report,
    cce_status,
    probe_cce,
    requested_cce,
)
from .compatibility import OfferRules, combination_refusal, missing_capabilities, offered_combinations, table_order
from .compile import COMPILE_BACKEND, COMPILE_CHECKS, apply_compile, compile_report, probe_compile, requested_compile
from .fla import FLA_BACKEND, FLA_CHECKS, apply_fla, fla_report, fla_status, probe_fla, requested_fla
from .flashqla import (
    FLASHQLA_BACKEND,
    FLASHQLA_CHECKS,
    apply_flashqla,
    flashqla_report,
    flashqla_status,
    probe_flashqla,
    requested_flashqla,
)
from .float8 import (
    DIMENSION_MULTIPLE,
    FLOAT8_BACKEND,
    FLOAT8_CHECKS,
    FLOAT8_CURVE,
    FLOAT8_PARITY,
    FLOAT8_ROWWISE_BACKEND,
    RECIPES,
    apply_float8_for,
    float8_report_for,
    float8_status,
    probe_float8_for,
    requested_float8_for,
)
from .hybrid_paths import REFERENCE_CHECKS, apply_reference, reference_report
from .liger import (
    LIGER_BACKEND,
    LIGER_CHECKS,
    LIGER_CPU_ENV,
    LIGER_KERNELS,
    apply_liger,
    liger_kernel_config,
    liger_report,
    liger_status,
    probe_liger,
    requested_liger_kernels,
)
from .regional_compile import (
    REGIONAL_BACKEND,
    REGIONAL_CHECKS,
    apply_regional_compile,
    probe_regional_compile,
    regional_compile_report,
    requested_regional_compile,
)
from .spec import (
    COMPILATION,
    LINEAR_ATTENTION,
    LINEAR_MATMULS,
    LOSS,
    OPERATORS,
    SAME_KERNELS_CPU,
    BackendUnavailable,
    CompiledCache,
    CurveTolerance,
    KernelBackend,
    Tolerance,
)

BASELINE_BACKEND = "eager"  # parity and speedups are measured against it
INTERPRETED_TRITON_CPU = Tolerance(
    1e-4, "fp32 on CPU, Liger in Triton's interpreter: other reduction order (measured <= 4.8e-7)"
)
# Compiled-kernel caches a backend may fill (name -> entry): where each lives and what makes it keep its results.
COMPILED_CACHES: dict[str, CompiledCache] = {
    cache.name: cache
    for cache in (
        CompiledCache(
            "triton", "TRITON_CACHE_DIR",
            "Triton's compiled kernels (Liger, fla, Inductor's) and the autotuner's chosen configs of autotuned "
            "kernels (fla's chunk kernels, Liger's where it autotunes)",
            # Triton keeps autotune timings on disk only when asked; fla asks by default, FLA_CACHE_RESULTS=1 says so.
            switches={"TRITON_CACHE_AUTOTUNING": "1", "FLA_CACHE_RESULTS": "1"},
        ),
        CompiledCache("inductor", "TORCHINDUCTOR_CACHE_DIR", "torch.compile's FX graphs, AOT autograd and kernels"),
        CompiledCache(
            "tilelang", "TILELANG_CACHE_DIR",
            "tilelang's JIT-compiled kernels and its autotuner's results (fla's gated backward on Hopper)",
        ),
    )
}  # fmt: skip
# Parity tolerance classes, tightest first; a composite backend takes the loosest class of its parts.


def compose(*parts: KernelBackend) -> KernelBackend:
    """One backend that applies ``parts`` in order (named ``a+b``); ValueError when they do not combine."""
    if why := combination_refusal(parts):
        raise ValueError(f"{'+'.join(p.name for p in parts)!r} does not combine: {why}")

    def apply(model: Any, switches: tuple[str, ...], device: str) -> None:
        for part in parts:
            part.apply(model, switches, device)

    def requested(switches: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(key for part in parts for key in part.requested(switches))

    return KernelBackend(
        name="+".join(p.name for p in parts),
        summary=", then ".join(p.summary for p in parts),
        apply=apply,
        checks={key: text for part in parts for key, text in part.checks.items()},
        requested=requested,
        cpu_env={key: value for part in parts for key, value in part.cpu_env.items()},
        caches=tuple(dict.fromkeys(cache for part in parts for cache in part.caches)),
        uses_liger_switches=any(p.uses_liger_switches for p in parts),
        cpu_tolerance=max((p.cpu_tolerance for p in parts), key=lambda t: t.rel),
        precision=max((p.precision for p in parts if p.precision), key=lambda t: t.rel, default=None),
        curve=max((p.curve for p in parts), key=lambda t: t.step_rtol),
        replaces_switches=tuple(dict.fromkeys(s for part in parts for s in part.replaces_switches)),
        compiled_switches=tuple(dict.fromkeys(s for part in parts for s in part.compiled_switches)),
        token_multiple=math.lcm(*(p.token_multiple for p in parts)),
        replaces=tuple(dict.fromkeys(step_part for part in parts for step_part in part.replaces)),
        needs=tuple(dict.fromkeys(need for part in parts for need in part.needs)),
        parts=tuple(p.name for p in parts),
        packages=tuple(dict.fromkeys(package for part in parts for package in part.packages)),
        optional_packages=tuple(dict.fromkeys(package for part in parts for package in part.optional_packages)),
    )


EAGER = KernelBackend(
    BASELINE_BACKEND,
    "PyTorch's own kernels, as transformers calls them (the baseline); a hybrid runs transformers' PyTorch "
    "Gated DeltaNet reference even where fla is installed, packed rows one sequence at a time",
    apply=apply_reference,
    report=reference_report,
    checks=REFERENCE_CHECKS,
)
LIGER = KernelBackend(
    LIGER_BACKEND,
    "Liger's Triton kernels (RoPE, RMSNorm, SwiGLU, (fused linear) cross-entropy) patched into the model",
    apply=apply_liger,
    report=liger_report,
    checks=LIGER_CHECKS,
    requested=requested_liger_kernels,
    cpu_env=LIGER_CPU_ENV,
    caches=("triton",),
    uses_liger_switches=True,
    cpu_tolerance=INTERPRETED_TRITON_CPU,
    replaces=(OPERATORS,),
    needs=(LIGER_PATCH,),
    training_flag="use_liger_kernel",
    training_options=liger_kernel_config,
    training_options_comment="the Liger switches that were on",
    packages=("liger-kernel", "triton"),
    status=liger_status,
    probe=probe_liger,
)
COMPILE = KernelBackend(
    COMPILE_BACKEND,
    "torch.compile: Inductor fuses the model's operators (compiled on the first step)",
    apply=apply_compile,
    report=compile_report,
    checks=COMPILE_CHECKS,
    requested=requested_compile,
    caches=("inductor", "triton"),
    cpu_tolerance=Tolerance(1e-5, "fp32 on CPU, torch.compile: Inductor may reorder sums (measured <= 1.2e-7)"),
    replaces=(COMPILATION,),
    training_flag="torch_compile",
    probe=probe_compile,
)
REGIONAL = KernelBackend(
    REGIONAL_BACKEND,
    "torch.compile per decoder layer (one graph shared by every layer, dynamic lengths); the rest stays eager",
    apply=apply_regional_compile,
    report=regional_compile_report,
    checks=REGIONAL_CHECKS,
    requested=requested_regional_compile,
    caches=("inductor", "triton"),
    cpu_tolerance=Tolerance(
        1e-5, "fp32 on CPU, Inductor per decoder layer: other sum order (measured <= 3.2e-7 on qwen3-tiny)"
    ),
    # float8's linear layers and Cut Cross-Entropy's loss are set up first; the layers are compiled with float8's
    # casts inside them (as torchtitan compiles its float8 layers one by one).
    replaces=(COMPILATION,),
    needs=(REPEATED_LAYERS,),
    # Measured on an H200 (Qwen3-1.7B, token budget, torch_varlen; benchmarks/gpu/regional/): with Liger's RoPE,
    # RMSNorm and SwiGLU between the compiled pieces 36,904 real tok/s, with its cross-entropy only 44,384.
    compiled_switches=("rope", "rms_norm", "swiglu"),
    model_setup_code=(
        "from nbhelpers.kernels.regional_compile import compile_layers",
        "compile_layers(model)  # every decoder layer compiled once (dynamic lengths); leave torch_compile off",
    ),
    probe=probe_regional_compile,
)
FLA = KernelBackend(
    FLA_BACKEND,
    "flash-linear-attention's chunk gated delta rule and a fused causal conv1d (causal-conv1d, else fla's) in "
    "every Gated DeltaNet layer, given a packed row's boundaries; hybrid families only",
    apply=apply_fla,
    report=fla_report,
    checks=FLA_CHECKS,
    requested=requested_fla,
    caches=("triton", "tilelang"),
    cpu_tolerance=INTERPRETED_TRITON_CPU,  # fused Triton kernels summing in another order, like Liger's
    replaces=(LINEAR_ATTENTION,),
    partners=(OPERATORS, COMPILATION),  # beside Liger (benchmarks/gpu/hybrid) and compiled layer by layer
    needs=(GATED_DELTANET,),
    packages=("flash-linear-attention", "triton"),
    optional_packages=("causal-conv1d", "tilelang"),
    model_setup_code=(
        "from nbhelpers.kernels.fla import use_fla",
        "use_fla(model)  # fla's delta rule, fused conv1d and gated RMSNorm in every Gated DeltaNet layer",
    ),
    status=fla_status,
    probe=probe_fla,
)
FLASHQLA = KernelBackend(
    FLASHQLA_BACKEND,
    "FlashQLA's chunk gated delta rule (TileLang, sm90+) with fla's fused causal conv1d and gated RMSNorm in every "
    "Gated DeltaNet layer, given a packed row's boundaries; hybrid families only, fla where it cannot run",
    apply=apply_flashqla,
    report=flashqla_report,
    checks=FLASHQLA_CHECKS,
    requested=requested_flashqla,
    caches=("triton", "tilelang"),
    cpu_tolerance=INTERPRETED_TRITON_CPU,  # never on a CPU: refused there, as fla is
    replaces=(LINEAR_ATTENTION,),
    partners=(OPERATORS, COMPILATION),
    needs=(GATED_DELTANET,),
    packages=("flash-qla", "flash-linear-attention", "tilelang", "triton"),
    optional_packages=("causal-conv1d",),
    model_setup_code=(
        "from nbhelpers.kernels.flashqla import use_flashqla",
        "use_flashqla(model)  # FlashQLA's delta rule, fla's conv1d and gated RMSNorm in every Gated DeltaNet layer",
    ),
    status=flashqla_status,
    probe=probe_flashqla,
)
FLOAT8, FLOAT8_ROWWISE = (
    KernelBackend(
        name,
        f"torchao float8 training, {RECIPES[name]!r} recipe: float8 matmuls in every linear layer but the lm head "
        "(and any whose dimensions are not multiples of 16); Ada/Hopper GPUs only",
        apply=apply_float8_for(name),
        report=float8_report_for(name),
        checks={f"float8_{RECIPES[name]}": FLOAT8_CHECKS[f"float8_{RECIPES[name]}"]},
        requested=requested_float8_for(name),
        caches=("inductor", "triton"),
        precision=FLOAT8_PARITY,
        curve=FLOAT8_CURVE,
        token_multiple=DIMENSION_MULTIPLE,
        replaces=(LINEAR_MATMULS,),
        # Rowwise is offered alone and compiled (whole or per layer) only: compile fuses float8's casts, and
        # tensorwise, torchao's fastest recipe, is the one the other composites time.
        partners=(COMPILATION,) if name == FLOAT8_ROWWISE_BACKEND else None,
        needs=(FLOAT8_LINEARS,),
        packages=("torchao",),
        model_setup_code=(
            "from nbhelpers.kernels.float8 import use_float8",
            f"use_float8(model, {RECIPES[name]!r})  # torchao float8 training in the linear layers (not the lm head)",
        ),
        status=float8_status,
        probe=probe_float8_for(name),
    )
    for name in (FLOAT8_BACKEND, FLOAT8_ROWWISE_BACKEND)
)
CCE = KernelBackend(
    CCE_BACKEND,
    "Cut Cross-Entropy: the lm head and the loss fused (no logits stored; its backward skips negligible softmax "
    "entries); Triton kernels on a GPU, its torch.compile reference on a CPU",
    apply=apply_cce,
    report=cce_report,
    checks=CCE_CHECKS,
    requested=requested_cce,
    caches=("triton", "inductor"),
    cpu_tolerance=Tolerance(1e-5, "fp32 on CPU, CCE's torch.compile reference: Inductor may reorder sums"),
    replaces=(LOSS,),
    packages=("cut-cross-entropy",),
    optional_packages=("triton",),
    replaces_switches=REPLACED_LIGER_SWITCHES,
    model_setup_code=(
        "from nbhelpers.kernels.cce import apply_cce",
        "apply_cce(model, (), 'cuda')  # Cut Cross-Entropy computes the loss (no logits in training)",
    ),
    status=cce_status,
    probe=probe_cce,
)

# The elementary backends, in the order tables and error messages list them. A new backend is one line here.
ELEMENTARY_BACKENDS = (EAGER, LIGER, COMPILE, FLA, FLOAT8, FLOAT8_ROWWISE, CCE, REGIONAL, FLASHQLA)
MAX_PARTS = 3  # no composite of four parts: each composite is one more row of every kernel suite
# Combinations the declarations allow that the table does not offer (no record measures them), and why.
NOT_OFFERED: dict[frozenset[str], str] = {
    frozenset({FLOAT8_BACKEND, CCE_BACKEND}): "compile fuses float8's casts: float8 beside Cut Cross-Entropy is "
    "offered compiled, whole or per layer",
    frozenset({LIGER_BACKEND, FLOAT8_BACKEND, COMPILE_BACKEND}): "Liger beside float8 is offered uncompiled and "
    "compiled per layer (its kernels between each layer's compiled pieces); under whole-model compile Liger is "
    "offered alone",
    frozenset({LIGER_BACKEND, CCE_BACKEND, COMPILE_BACKEND}): "Liger beside Cut Cross-Entropy is offered uncompiled; "
    "under whole-model compile Liger is offered alone",
    **{frozenset({linear, *others, COMPILE_BACKEND}): f"{linear} is offered compiled layer by layer (its kernels "
       "called between each layer's compiled pieces), not under whole-model compile"
       for linear in (FLA_BACKEND, FLASHQLA_BACKEND) for others in ((), (LIGER_BACKEND,))},
}  # fmt: skip


def offer_rules(families: Iterable[ModelFamily] = FAMILIES.values()) -> OfferRules:
    """What the table offers beyond what combines: a combination some family runs, of at most MAX_PARTS parts, each
    Liger part keeping a switch to itself, none of NOT_OFFERED."""
    return OfferRules(tuple(families), LIGER_KERNELS, MAX_PARTS, NOT_OFFERED)


def build_table(
    elementary: Sequence[KernelBackend], families: Iterable[ModelFamily] = FAMILIES.values()
) -> dict[str, KernelBackend]:
    """Name -> backend: every elementary backend, each followed by the composites it completes (offer_rules)."""
    by_name = {backend.name: backend for backend in elementary}
    offered = offered_combinations(elementary, offer_rules(families))
    composites = {tuple(p.name for p in parts): compose(*parts) for parts in offered}
    order = table_order(list(by_name), composites)
    return {"+".join(names): composites.get(names) or by_name[names[0]] for names in order}


KERNEL_BACKEND_TABLE = build_table(ELEMENTARY_BACKENDS)
KERNEL_BACKENDS = tuple(KERNEL_BACKEND_TABLE)  # the values RunConfig.kernels allows
# The patch report: every key some backend verifies, and what is checked for it.
KERNEL_CHECKS: dict[str, str] = {key: text for b in ELEMENTARY_BACKENDS for key, text in b.checks.items()}
REPORT_KEYS = tuple(KERNEL_CHECKS)


def family_kernel_refusal(family: ModelFamily, name: str, table: Mapping[str, KernelBackend] | None = None) -> str:
    """'' when a model family takes a backend (it has every capability the backend's parts need, and lists no gap
    for it) or the table lacks the name, else why not, with the backends it takes."""
    table = KERNEL_BACKEND_TABLE if table is None else table
    backend = table.get(name)
    if backend is None:
        return ""
    missing = missing_capabilities(backend, family)
    if not missing and name not in family.kernel_gaps:
        return ""
    why = family.kernel_gaps.get(name) or "it needs " + "; ".join(MODEL_CAPABILITIES.get(c, c) for c in missing)
    supported = ", ".join(repr(n) for n in family_kernel_backends(family, table)) or "none"
    return f"kernels={name!r} is not supported by the {family.name} family: {why} (supported: {supported})"


def family_kernel_backends(family: ModelFamily, table: Mapping[str, KernelBackend] | None = None) -> tuple[str, ...]:
    """The backends a model family takes, in the table's order."""
    table = KERNEL_BACKEND_TABLE if table is None else table
    return tuple(n for n, b in table.items() if not missing_capabilities(b, family) and n not in family.kernel_gaps)


def kernel_backend(name: str) -> KernelBackend:
    """The table entry of a backend; BackendUnavailable naming the backends when there is none."""
    backend = KERNEL_BACKEND_TABLE.get(name)
    if backend is None:
        raise BackendUnavailable(f"kernels={name!r}: backends are {', '.join(KERNEL_BACKENDS)}")
    return backend


def find_backend(name: str) -> KernelBackend | None:
    """The table entry of a backend, or None (a record from elsewhere may name one this table lacks)."""
    return KERNEL_BACKEND_TABLE.get(name)


def uses_liger_switches(name: str) -> bool:
    """Whether a backend reads RunConfig.liger_kernels (False for a name the table lacks)."""
    backend = find_backend(name)
    return backend is not None and backend.uses_liger_switches


def requested_kernels(name: str, liger_kernels: Iterable[str]) -> tuple[str, ...]:
    """The patch-report keys a backend asks for (its Liger switches, 'compile', ...); () for an unknown name."""
    backend = find_backend(name)
    return backend.requested(tuple(liger_kernels)) if backend is not None else ()


def cpu_tolerance(name: str) -> Tolerance:
    """A backend's parity tolerance in fp32 on a CPU (the baseline's for a name the table lacks)."""
    backend = find_backend(name)
    return backend.cpu_tolerance if backend is not None else SAME_KERNELS_CPU


def precision_tolerance(name: str) -> Tolerance | None:
    """A lower-precision backend's first-step parity tolerance (float8), None for one in the baseline's precision."""
    backend = find_backend(name)
    return backend.precision if backend is not None else None


def token_multiple(name: str) -> int:
    """What a step's rows are padded to a multiple of under a backend (1 for a name the table lacks)."""
    backend = find_backend(name)
    return backend.token_multiple if backend is not None else 1


def curve_tolerance(name: str) -> CurveTolerance:
    """How far a backend's loss curve may stray from the baseline's (its precision class; the default for a name
    the table lacks)."""
    backend = find_backend(name)
    return backend.curve if backend is not None else EAGER.curve


def liger_switches_for(name: str, switches: Iterable[str]) -> tuple[str, ...]:
    """The Liger switches a backend runs of ``switches`` in the grids and the tuner: () for one without Liger, and
    without the switches a part replaces itself (Liger's cross-entropy beside Cut Cross-Entropy) or compiles itself
    (Liger's RoPE, RMSNorm and SwiGLU beside regional compile, unless nothing else is left)."""
    backend = find_backend(name)
    if backend is None or not backend.uses_liger_switches:
        return ()
    runnable = tuple(s for s in switches if s not in backend.replaces_switches)
    return tuple(s for s in runnable if s not in backend.compiled_switches) or runnable


def switch_conflict(name: str, switches: Iterable[str]) -> str:
    """'' when a backend can run these Liger switches, else what must be left out (a part replaces them)."""
    backend = find_backend(name)
    clash = [s for s in switches if backend is not None and s in backend.replaces_switches]
    return f"without {', '.join(clash)} under kernels={name!r} (it computes the loss itself)" if clash else ""


def model_setup_parts(name: str) -> tuple[KernelBackend, ...]:
    """The parts of a backend that a trainer has no flag for and that set up the model itself (fla), in order."""
    backend = find_backend(name)
    parts = [KERNEL_BACKEND_TABLE[part] for part in backend.components] if backend is not None else []
    return tuple(part for part in parts if part.model_setup_code)


def training_kwargs(name: str, liger_kernels: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """What TrainingArguments/SFTConfig need for a backend, with a comment per key.

    Every backend's flag appears (on for the backend's parts, off for the others), followed by the
    options of the parts that are on (Liger's ``liger_kernel_config``).
    """
    backend = find_backend(name)
    parts = backend.components if backend is not None else ()  # a name the table lacks: every flag off
    switches = tuple(liger_kernels)
    kwargs: dict[str, Any] = {}
    comments: dict[str, str] = {}
    for part in ELEMENTARY_BACKENDS:
        if not part.training_flag:
            continue
        on = part.name in parts
        kwargs[part.training_flag] = on
        comments[part.training_flag] = f"kernels={name!r}"
        if on and part.training_options is not None:
            options = part.training_options(switches)
            kwargs.update(options)
            comments.update(dict.fromkeys(options, part.training_options_comment))
    return kwargs, comments
