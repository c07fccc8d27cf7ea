"""The tuner's candidates: kernel backends x Liger switch sets x padding strategies x attention.

Every value comes from a table (kernel backends from :mod:`nbhelpers.kernels.registry`, strategies from
:mod:`nbhelpers.data.strategies`, attention implementations from :mod:`nbhelpers.kernels.attention`, what a
model family supports from :mod:`nbhelpers.models.families`). A combination that cannot run here is left
out before anything is measured, with the reason (:mod:`nbhelpers.planning.device`). The search over the
candidates is :mod:`nbhelpers.tuning`'s. Regional compile and its Liger composition are backends of the table, so
they are candidates wherever their family and device allow them (the hybrid family does not offer them).

A workload with a memory cap (``RunConfig.gpu_memory_gib``) keeps only the candidates the memory planner fits under
it (:func:`nbhelpers.measure.memory_plan.cap_plan_refusal`); the others are left out with the planner's reason.

The precision setting (``RunConfig.dtype``, e.g. ``bf16-master``) is not searched: it changes the numbers the
step computes (another parity class), and a speedup divides records of one workload, whose dtype is part of it;
the tuner keeps the workload's dtype, and a user compares dtypes as workloads of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nbhelpers.data.strategies import BASELINE_STRATEGY, PADDING_STRATEGIES, STRATEGIES, plan_token_budget
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS, DEFAULT_ATTENTION
from nbhelpers.kernels.liger import LIGER_KERNELS
from nbhelpers.kernels.registry import BASELINE_BACKEND, KERNEL_BACKENDS, liger_switches_for
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.memory_plan import cap_plan_refusal
from nbhelpers.models.shape import ModelShape
from nbhelpers.validation import ConfigError

from .device import refusal
from .lists import parse_list

# A switch set with Liger's fused linear cross-entropy gets a twin with plain (Liger) cross-entropy instead:
# the fused kernel was measured slower than plain cross-entropy on packed rows (benchmarks/gpu/NOTES.md).
FUSED_SWITCH, UNFUSED_SWITCH = "fused_linear_cross_entropy", "cross_entropy"


def parse_switch_sets(text: str | Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """Liger switch sets: ``"rope,rms_norm;rope,cross_entropy"`` (sets split by ';') or a list of sets."""
    raw = [part for part in text.split(";") if part.strip()] if isinstance(text, str) else list(text)
    if not raw:
        raise ConfigError("liger_kernels", text, "one or more comma-separated sets of " + ", ".join(LIGER_KERNELS))
    return [parse_list(part, LIGER_KERNELS, "liger_kernels") for part in raw]


def parse_budgets(text: str | int | Sequence[int]) -> list[int]:
    """Token budgets: ``"0,16384"`` or a list of ints (0 = batch_size x max_length)."""
    try:
        budgets = [int(p) for p in parse_list(str(text) if isinstance(text, int) else text, None, "token_budgets")]
    except ValueError:
        budgets = []
    if not budgets or any(b < 0 for b in budgets):
        raise ConfigError("token_budgets", text, "comma-separated integers >= 0 (0 = batch_size x max_length)")
    return list(dict.fromkeys(budgets))


def plans_by_budget(strategy: str) -> bool:
    """Whether the strategy's plan fills steps up to a token budget (so each budget is its own candidate)."""
    return STRATEGIES[strategy].plan is plan_token_budget


def with_unfused_twin(switches: Sequence[str]) -> list[tuple[str, ...]]:
    """The set itself and, when it fuses the lm head with the loss, the same set with plain cross-entropy."""
    switches = tuple(switches)
    if FUSED_SWITCH not in switches:
        return [switches]
    return [switches, tuple(UNFUSED_SWITCH if s == FUSED_SWITCH else s for s in switches)]


@dataclass(frozen=True)
class Candidate:
    """One point of the space: the settings the tuner changes on the workload's RunConfig."""

    kernels: str
    liger_kernels: tuple[str, ...]  # () for a backend that reads no Liger switches
    padding: str
    token_budget: int  # only meaningful for strategies that plan by budget (else the workload's value)
    attn_implementation: str

    @property
    def label(self) -> str:
        kernels = self.kernels
        if self.liger_kernels and FUSED_SWITCH not in self.liger_kernels:
            kernels += " (no fused linear CE)"
        padding = self.padding
        if plans_by_budget(self.padding) and self.token_budget:
            padding += f" {self.token_budget}"
        return f"{kernels} / {padding} / {self.attn_implementation}"

    @property
    def is_baseline(self) -> bool:
        return (self.kernels, self.padding, self.attn_implementation) == (
            BASELINE_BACKEND, BASELINE_STRATEGY, DEFAULT_ATTENTION,
        )  # fmt: skip

    def changes(self) -> int:
        """How many settings differ from the baseline (eager, static padding, default attention)."""
        return sum(
            (self.kernels != BASELINE_BACKEND, self.padding != BASELINE_STRATEGY,
             self.attn_implementation != DEFAULT_ATTENTION)
        )  # fmt: skip

    def config(self, workload: RunConfig, **changes: object) -> RunConfig:
        """The workload's RunConfig with this candidate's settings (validated: ConfigError if refused)."""
        fields: dict[str, object] = {
            "kernels": self.kernels, "padding": self.padding, "attn_implementation": self.attn_implementation,
            "label": self.label, "profile": False,
        }  # fmt: skip
        if self.liger_kernels:
            fields["liger_kernels"] = self.liger_kernels
        if plans_by_budget(self.padding):
            fields["token_budget"] = self.token_budget
        return workload.replace(**(fields | changes))


def baseline_candidate(workload: RunConfig) -> Candidate:
    """Eager kernels, static padding, the default attention: what every speedup and parity compares with."""
    return Candidate(BASELINE_BACKEND, (), BASELINE_STRATEGY, 0, DEFAULT_ATTENTION)


def why_not(
    candidate: Candidate,
    workload: RunConfig,
    device: str,
    broken: Mapping[str, str] | None = None,
    shape: ModelShape | None = None,
) -> str:
    """'' when the candidate can be tried on this device for this model, else why not; ``broken`` holds the paths
    a kernel-doctor verdict marks broken (:func:`nbhelpers.kernels.doctor.broken_paths`); with ``shape`` (the
    model's), a candidate the memory planner puts over the workload's cap is left out with the planner's reason."""
    packed = STRATEGIES[candidate.padding].packed
    reason = refusal(
        candidate.kernels, candidate.attn_implementation, device, model=workload.model, packed=packed, broken=broken,
        liger_kernels=candidate.liger_kernels or workload.liger_kernels,
    )  # fmt: skip
    if reason:
        return reason
    try:
        config = candidate.config(workload)
    except ConfigError as error:
        return str(error)
    return cap_plan_refusal(config, shape) if shape is not None else ""


def capped_shape(workload: RunConfig) -> ModelShape | None:
    """The shape of the workload's model when it names a memory cap (the planner checks each candidate against
    it), else None."""
    if not workload.gpu_memory_gib:
        return None
    from nbhelpers.models.loading import resolve_model

    return resolve_model(workload.model).shape()


def build_space(
    workload: RunConfig,
    kernels: Iterable[str],
    strategies: Iterable[str],
    attentions: Iterable[str],
    *,
    liger_sets: Sequence[Sequence[str]] | None = None,
    token_budgets: Sequence[int] = (0,),
    device: str = "cpu",
    broken: Mapping[str, str] | None = None,
) -> tuple[list[Candidate], list[tuple[Candidate, str]]]:
    """Every combination that can run here, and those left out with why (also the paths ``broken`` names).

    ``liger_sets`` default: the workload's switches and, when they include the fused linear cross-entropy,
    the same set with plain cross-entropy; a backend that computes the loss itself (Cut Cross-Entropy) takes the sets
    without Liger's loss switches. A token-budget strategy takes every value of ``token_budgets``.
    """
    kernels = parse_list(list(kernels), KERNEL_BACKENDS, "kernels")
    strategies = parse_list(list(strategies), PADDING_STRATEGIES, "strategies")
    attentions = parse_list(list(attentions), ATTENTION_IMPLEMENTATIONS, "attention")
    switch_sets = [tuple(s) for s in liger_sets] if liger_sets else with_unfused_twin(workload.liger_kernels)
    runnable: list[Candidate] = []
    dropped: list[tuple[Candidate, str]] = []
    shape = capped_shape(workload)
    for backend in kernels:
        # Each set as the backend runs it (without Liger's loss kernels beside Cut Cross-Entropy), once.
        sets = list(dict.fromkeys(liger_switches_for(backend, s) for s in switch_sets)) or [()]
        for switches in sets:
            for strategy in strategies:
                budgets = token_budgets if plans_by_budget(strategy) else [0]
                for budget in dict.fromkeys(budgets):
                    for attention in attentions:
                        candidate = Candidate(backend, tuple(switches), strategy, budget, attention)
                        reason = why_not(candidate, workload, device, broken, shape)
                        (dropped.append((candidate, reason)) if reason else runnable.append(candidate))
    return runnable, dropped
