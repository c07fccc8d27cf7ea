"""What a kernel backend is: the fields of one entry of the backend table (:mod:`nbhelpers.kernels.registry`).

Light on purpose (no torch, no Liger): :class:`nbhelpers.measure.config.RunConfig` reads the table when a
configuration is made, and the heavy imports stay inside each backend's functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Patches a model instance in place: (model, Liger switches of the config, device type "cpu"/"cuda").
ApplyFunction = Callable[[Any, tuple[str, ...], str], None]
# Reads off a model instance which of the backend's report keys are really replaced.
ReportFunction = Callable[[Any], dict[str, bool]]
# The report keys a backend must see replaced, given the config's Liger switches.
RequestedFunction = Callable[[tuple[str, ...]], tuple[str, ...]]
# Extra TrainingArguments/SFTConfig keyword arguments a backend exports when it is on, given the switches.
TrainingOptionsFunction = Callable[[tuple[str, ...]], dict[str, Any]]
# Why the backend cannot run on a device type ('' when it can): missing packages, known refusals.
StatusFunction = Callable[[str], str]
# The correctness probe: the fused kernels against their references on small tensors, on a device type
# (a list of nbhelpers.kernels.probes.ProbeResult).
ProbeFunction = Callable[[str], list[Any]]


@dataclass(frozen=True)
class Tolerance:
    """A relative parity tolerance and why it is what it is."""

    rel: float
    basis: str


# Measured on a 2-core CPU, qwen3-tiny, fp32, 1 x 48, 1 x 64 and 2 x 64 tokens, seeds 0 and 1: torch.compile
# matched eager bit for bit or within 1.2e-7; Liger's interpreted kernels (rope, (fused linear) cross-entropy)
# within 4.8e-7. The tolerances leave about two orders of magnitude of room for other shapes and seeds.
SAME_KERNELS_CPU = Tolerance(1e-5, "fp32 on CPU, same kernels: padded and packed rows of one batch (measured equal)")


@dataclass(frozen=True)
class CurveTolerance:
    """How far a loss curve over many steps may stray from the baseline's, each relative to the baseline's.

    Three checks, each catching what the others let through: ``step_rtol`` on any one step (noise of a single
    batch); ``smoothed_rtol`` on the two curves' moving averages over every ``window`` consecutive steps (a drift that
    lasts a few steps, which single-step noise in lower precision would hide); ``mean_rtol`` on the curves' means
    (a systematic shift of every step: a wrong kernel, a mask that lets sequences see each other).
    """

    step_rtol: float
    smoothed_rtol: float
    window: int  # steps in the moving average (1: the smoothed check is the per-step one)
    mean_rtol: float
    basis: str


# The default precision class: the backend computes in the baseline's precision (bf16 autocast), summing in another
# order (Liger, compile, varlen attention); the difference grows a little as the weights drift apart over steps.
SAME_PRECISION_CURVE = CurveTolerance(
    0.02, 0.02, 1, 0.005, "bf16 autocast, other kernels: sums in another order, weights drifting apart over steps"
)


@dataclass(frozen=True)
class CompiledCache:
    """One on-disk cache of compiled kernels: the variable that points it at a folder, and the variables that
    make it keep what would otherwise be recomputed in every process (autotune results)."""

    name: str
    variable: str  # environment variable naming its folder
    holds: str  # what it keeps, for tables and docs
    switches: Mapping[str, str] = field(default_factory=dict)  # environment that turns its result caching on


# The parts of a training step a backend takes over, in the order a composite applies its parts (Gated DeltaNet's
# kernels and Liger's patches first, the compiler last, over what the others set up). Two backends that take over
# one part do not combine.
LINEAR_ATTENTION = "linear attention"  # Gated DeltaNet's delta rule and short convolution
OPERATORS = "operators"  # RoPE, norms, activations
LINEAR_MATMULS = "linear matmuls"  # the decoder's linear layers
LOSS = "loss"  # the lm head and the cross-entropy
COMPILATION = "compilation"  # how the model's Python runs: compiled whole or layer by layer
STEP_PARTS = (LINEAR_ATTENTION, OPERATORS, LINEAR_MATMULS, LOSS, COMPILATION)


class BackendUnavailable(RuntimeError):
    """The requested kernel backend cannot run here (no Triton driver, unsupported model type, ...)."""


def _apply_nothing(model: Any, switches: tuple[str, ...], device: str) -> None:
    """The apply function of a backend that leaves the model as it is."""


def _report_nothing(model: Any) -> dict[str, bool]:
    return {}


def _request_nothing(switches: tuple[str, ...]) -> tuple[str, ...]:
    return ()


def _runs_anywhere(device: str) -> str:
    return ""


@dataclass(frozen=True)
class KernelBackend:
    """One kernel backend: how to apply it, how to verify it, and what it needs and exports.

    A composite backend (``liger+compile``) is made by :func:`nbhelpers.kernels.registry.compose` from
    its parts; ``parts`` names them in the order they are applied (an elementary backend is its own part).
    """

    name: str
    summary: str  # one line for tables and docs
    apply: ApplyFunction = _apply_nothing
    report: ReportFunction = _report_nothing  # the patch-report keys it owns, read off the model
    checks: Mapping[str, str] = field(default_factory=dict)  # report key -> what the report checks for it
    requested: RequestedFunction = _request_nothing  # the report keys it must see replaced
    cpu_env: Mapping[str, str] = field(default_factory=dict)  # its child process's environment without CUDA
    caches: tuple[str, ...] = ()  # compiled-kernel caches it fills on its first step (keys of COMPILED_CACHES)
    uses_liger_switches: bool = False  # whether RunConfig.liger_kernels means anything to it
    cpu_tolerance: Tolerance = SAME_KERNELS_CPU  # parity against eager in fp32 on a CPU, with its measured basis
    # Lower precision (float8): the looser first-step parity tolerance it is judged by wherever it runs (None: the
    # device's and dtype's), and its loss-curve tolerance against the baseline.
    precision: Tolerance | None = None
    curve: CurveTolerance = SAME_PRECISION_CURVE
    # Liger switches whose work it does itself (Cut Cross-Entropy computes the loss): with Liger they must be off.
    replaces_switches: tuple[str, ...] = ()
    # Liger switches whose operators it compiles itself (regional compile fuses RoPE, RMSNorm and SwiGLU inside the
    # layers): the grids' and the tuner's candidates leave them to it; a configuration may still name them.
    compiled_switches: tuple[str, ...] = ()
    # Token counts must be multiples of it (float8 matmuls contract over the tokens in the weight gradient and need
    # multiples of 16): the collator pads a packed row's end, or a padded batch's width, to it; 1 for none.
    token_multiple: int = 1
    # What it may be composed from (nbhelpers.kernels.compatibility): the step parts it takes over (keys of
    # STEP_PARTS; none for the baseline, which composes with nothing), the step parts its partners may take over (None:
    # any), and the model capabilities it needs (keys of nbhelpers.models.families.MODEL_CAPABILITIES).
    replaces: tuple[str, ...] = ()
    partners: tuple[str, ...] | None = None
    needs: tuple[str, ...] = ()
    training_flag: str = ""  # TrainingArguments/SFTConfig boolean that turns it on in HF Trainer / TRL
    training_options: TrainingOptionsFunction | None = None  # extra keyword arguments exported when on
    training_options_comment: str = ""  # the comment beside those keyword arguments in exported code
    # Without a training flag: the lines that turn it on for a loaded ``model`` in exported Trainer/TRL code (its
    # ``apply`` does the same in the workbook's TRL row); empty for a backend a trainer needs nothing for.
    model_setup_code: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()  # the elementary backends it is made of ((name,) when empty)
    packages: tuple[str, ...] = ()  # distributions it needs (beyond torch), as pip names them
    optional_packages: tuple[str, ...] = ()  # distributions it uses where present (the doctor lists them)
    status: StatusFunction = _runs_anywhere  # '' when it can run on a device type, else why not
    probe: ProbeFunction | None = None  # its correctness probe (None: it is the reference, nothing to probe)

    @property
    def components(self) -> tuple[str, ...]:
        """The elementary backends it applies, in order."""
        return self.parts or (self.name,)

    @property
    def composite(self) -> bool:
        """Whether it is made of more than one elementary backend."""
        return len(self.components) > 1
