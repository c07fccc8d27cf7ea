"""The table of known-bad combinations: package versions and GPUs on which a fused path is wrong or slow.

Each entry is data: the doctor path it concerns (``kernels fla``, ``attention flash_attention_2``, ...), the
version ranges (PEP 440, matched with :mod:`packaging.specifiers`) that must all hold, packages whose absence is
part of the condition, the GPU generations it applies to, what goes wrong, the fix to install and where it is
documented. Adding a combination is one entry here. Light at import: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

BROKEN = "broken"  # wrong results or a refusal: the doctor marks the path broken and notebooks skip it
SLOW = "slow"  # runs and is correct, but measured slower than the plain path: a note, nothing skipped
SEVERITIES = (BROKEN, SLOW)


@dataclass(frozen=True)
class KnownBad:
    """One known-bad combination: when it applies, what goes wrong, the fix, the source."""

    name: str
    path: str  # the doctor path it concerns: "kernels <backend>" or "attention <implementation>"
    effect: str  # what goes wrong, in one sentence
    fix: str  # what to install (or set) instead
    source: str  # where it is documented or measured (URL or a file of this project)
    versions: Mapping[str, str] = field(default_factory=dict)  # distribution -> PEP 440 range that must hold
    absent: tuple[str, ...] = ()  # distributions whose absence is part of the condition
    sm_major: tuple[int, ...] = ()  # CUDA compute-capability majors it applies to (() any device)
    needs_gpu: bool = False  # applies only where a CUDA GPU is present
    severity: str = BROKEN

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity={self.severity!r}: allowed are {', '.join(SEVERITIES)}")
        for package, spec in self.versions.items():
            try:
                SpecifierSet(spec)
            except InvalidSpecifier as error:
                raise ValueError(f"versions[{package!r}]={spec!r} is no PEP 440 range ({error})") from error


def version_in(version: str | None, spec: str) -> bool:
    """Whether an installed version (None: not installed) lies in a PEP 440 range; a local label such as
    ``+cu128`` does not matter, and pre-releases count (a nightly Triton is what a user may have)."""
    if version is None:
        return False
    try:
        Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(spec).contains(version, prereleases=True)


def applies(entry: KnownBad, packages: Mapping[str, str | None], capability: tuple[int, int] | None) -> bool:
    """Whether a combination holds here: every range matches, every ``absent`` package is missing, the GPU fits.

    ``packages`` maps distribution names to installed versions (None or missing: not installed);
    ``capability`` is the CUDA compute capability, None without a GPU.
    """
    if (entry.needs_gpu or entry.sm_major) and capability is None:
        return False
    if entry.sm_major and capability is not None and capability[0] not in entry.sm_major:
        return False
    if any(packages.get(name) is not None for name in entry.absent):
        return False
    return all(version_in(packages.get(name), spec) for name, spec in entry.versions.items())


def matching(
    packages: Mapping[str, str | None], capability: tuple[int, int] | None, table: tuple[KnownBad, ...] | None = None
) -> list[KnownBad]:
    """The entries of the table (default: :data:`KNOWN_BAD`) that hold for these versions and this GPU."""
    return [entry for entry in (KNOWN_BAD if table is None else table) if applies(entry, packages, capability)]


FLA_ISSUE = "https://github.com/fla-org/flash-linear-attention/issues/640"
KNOWN_BAD: tuple[KnownBad, ...] = (
    KnownBad(
        "fla-gated-backward-hopper-triton",
        "kernels fla",
        "fla's gated chunk backward (chunk_bwd_dqkwg) gives wrong results on Hopper with Triton >= 3.4.0, < 3.7.1, "
        "and fla refuses it (RuntimeError) unless its tilelang backend is available",
        "pip install tilelang (it also needs a usable nvcc: CUDA_HOME or the nvidia-cuda-nvcc wheel), or "
        "pip install 'triton>=3.7.1'",
        f"{FLA_ISSUE}; https://github.com/fla-org/flash-linear-attention/blob/main/fla/ops/common/chunk_o.py "
        "(chunk_bwd_dqkwg) and fla/ops/common/backends/tilelang/__init__.py",
        versions={"flash-linear-attention": ">=0.1", "triton": ">=3.4.0,<3.7.1"},
        absent=("tilelang",),
        sm_major=(9,),
    ),
    KnownBad(
        "hybrid-reference-without-fla",
        "kernels eager",
        "transformers runs a hybrid (Qwen3.5) model's Gated DeltaNet layers on its PyTorch reference when "
        "flash-linear-attention is missing and only logs a warning: measured 43,847 kernel launches per step "
        "against 5,075 with fla on an H200 (2.6x slower)",
        "pip install flash-linear-attention tilelang (and causal-conv1d where a wheel exists)",
        "transformers src/transformers/models/qwen3_5/modeling_qwen3_5.py "
        "(use_kernel_func_from_hub_with_fallback); benchmarks/gpu/NOTES.md of this workbook",
        versions={"transformers": ">=5.0"},
        absent=("flash-linear-attention",),
        needs_gpu=True,
        severity=SLOW,
    ),
    KnownBad(
        "hybrid-conv-without-causal-conv1d",
        "kernels fla",
        "without the causal-conv1d package transformers runs the hybrid's causal conv1d on its PyTorch fallback, "
        "which ignores a packed row's boundaries; the fla backend of this workbook uses fla's own Triton conv "
        "instead (fused, boundaries kept), one kernel slower than causal-conv1d's",
        "pip install causal-conv1d (built for this torch and CUDA)",
        "transformers src/transformers/models/qwen3_5/modeling_qwen3_5.py (causal_conv1d_fn fallback); "
        "benchmarks/gpu/NOTES.md of this workbook",
        versions={"flash-linear-attention": ">=0.1"},
        absent=("causal-conv1d",),
        needs_gpu=True,
        severity=SLOW,
    ),
    KnownBad(
        "liger-flce-large-vocabulary",
        "kernels liger",
        "Liger's fused linear cross-entropy cuts a step into ~64 chunks for a 152k vocabulary and adds into the "
        "whole fp32 weight gradient per chunk: measured slower than plain cross-entropy on packed rows",
        "leave the fused_linear_cross_entropy switch off (LIGER_KERNELS uses cross_entropy by default)",
        "benchmarks/gpu/NOTES.md of this workbook (H200, liger-kernel 0.8.5)",
        versions={"liger-kernel": ">=0.1"},
        needs_gpu=True,
        severity=SLOW,
    ),
)
