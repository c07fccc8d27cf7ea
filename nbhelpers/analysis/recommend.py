"""The recommended configuration, chosen from measurements only, exported as JSON and ready-to-paste code.

:func:`recommend` picks the fastest measured step record (real tok/s) whose parity verdict is "pass" (or
that is the baseline itself); ties go to the lower peak memory. Faster records without a passing verdict
(failed, or never checked) are named as passed over, with the reason. Nothing is extrapolated: the
recommendation is one record, and its settings are translated to ``transformers.TrainingArguments``,
TRL ``SFTConfig`` and ``from_pretrained``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nbhelpers.analysis.parity import BASELINE, FAIL, PASS
from nbhelpers.analysis.records import (
    CrossMachineError,
    choose_baselines,
    fastest,
    group_key,
    group_records,
    is_measured,
    is_workbook,
    metric_value,
    parity_status,
    record_label,
    run_name_of,
    speedup,
    step_records,
    tokens_per_s,
)
from nbhelpers.analysis.repeats import nearest_baseline
from nbhelpers.data.strategies import STRATEGIES, PaddingSettings, Strategy
from nbhelpers.formatting import MISSING, fmt_gib, fmt_rate, fmt_speedup
from nbhelpers.kernels.attention import (
    ATTENTION_TABLE,
    DEFAULT_ATTENTION,
    attention_setup_code,
    keeps_packed_apart,
)
from nbhelpers.kernels.registry import BASELINE_BACKEND, model_setup_parts
from nbhelpers.measure.padding import padding_settings_of
from nbhelpers.measure.store import RunRecord
from nbhelpers.measure.trainer_args import model_init_settings, resolved_dtype, sft_settings, trainer_settings
from nbhelpers.models.adapters import AdapterSettings
from nbhelpers.models.families import NO_CHECKPOINT, hub_id

from .exports import call_code, literal, sft_trainer_code, trainer_code
from .references import NOT_MEASURED, over, references_of
from .start_cost import without_needless_compile
from .tuner_choice import prefer_tuner_winner


@dataclass
class Recommendation:
    """One measured configuration recommended for one machine, with the evidence it was chosen on."""

    label: str
    machine: str
    run_name: str
    record_id: str
    config: dict[str, Any]
    device_type: str
    real_tokens_per_s: float
    peak_memory_gib: float | None
    mfu: float | None
    speedup: float
    baseline_label: str
    parity: str
    candidates: int
    excluded: dict[str, int] = field(default_factory=dict)  # why other records were not eligible
    passed_over: list[dict[str, Any]] = field(default_factory=list)  # faster records without a parity pass
    note: str = ""  # why a faster record that compiles at start was set aside (analysis.start_cost), or ''
    over_without: float | None = None  # over the run's "without the workbook" record (analysis.references)
    without_label: str = ""  # that record's label, or why there is none

    # -- settings -------------------------------------------------------------------------------

    @property
    def padding(self) -> str:
        return str(self.config.get("padding", "dynamic"))

    @property
    def strategy(self) -> Strategy:
        """The padding strategy's table entry (a name the table lacks is treated as RunConfig's default)."""
        return STRATEGIES.get(self.padding) or STRATEGIES[PaddingSettings().strategy]

    @property
    def padding_settings(self) -> PaddingSettings:
        """The measured padding setting (strategy, batch shape, multiple, buckets, budget, seed, token
        multiple)."""
        return padding_settings_of(self.config)

    @property
    def kernels(self) -> str:
        return str(self.config.get("kernels", BASELINE_BACKEND))

    @property
    def attn_implementation(self) -> str:
        return str(self.config.get("attn_implementation", DEFAULT_ATTENTION))

    @property
    def dtype(self) -> str:
        return resolved_dtype(self.config, self.device_type)

    @property
    def batch_size(self) -> int:
        return int(self.config.get("batch_size", 1))

    @property
    def max_length(self) -> int:
        return int(self.config.get("max_length", 1024))

    @property
    def pad_to_multiple_of(self) -> int:
        return self.padding_settings.pad_to_multiple_of

    @property
    def token_budget(self) -> int:
        return self.padding_settings.effective_token_budget

    def summary(self) -> str:
        extra = ", ".join(f"{n} {why}" for why, n in self.excluded.items() if n)
        return (
            f"{self.label} (run {self.run_name}, {self.machine}): "
            f"{fmt_rate(self.real_tokens_per_s)} real tok/s, "
            f"{fmt_speedup(self.speedup)} over {self.baseline_label}, peak memory "
            + (f"{fmt_gib(self.peak_memory_gib)} GiB" if self.peak_memory_gib is not None else "not measured")
            + f", parity {self.parity}. {'Chosen' if self.note else 'Fastest'} of {self.candidates} eligible "
            "measured configuration(s)"
            + (f"; not eligible: {extra}" if extra else "")
            + "."
            + (f" Passed over though faster: {passed_over_text(self.passed_over)}." if self.passed_over else "")
            + (f" {self.note[0].upper()}{self.note[1:]}." if self.note else "")
            + " "
            + self.without_text()
        )

    def without_text(self) -> str:
        """Its speedup over the second reference, "without the workbook", or why it is missing."""
        if self.over_without is None:
            return f"Over without the workbook: {MISSING} ({self.without_label or NOT_MEASURED})."
        return f"{fmt_speedup(self.over_without)} over without the workbook ({self.without_label})."

    # -- keyword arguments ----------------------------------------------------------------------

    def training_arguments_kwargs(self) -> dict[str, Any]:
        return trainer_settings(self.config, self.device_type)[0]

    def sft_config_kwargs(self) -> dict[str, Any]:
        return sft_settings(self.config, self.device_type)[0]

    def peft_config_kwargs(self) -> dict[str, Any] | None:
        """PEFT's config keyword arguments of the measured adapter (LoraConfig's), None without one."""
        adapter = AdapterSettings.from_config(self.config)
        return adapter.entry.peft_kwargs(adapter) if adapter.active else None

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        return model_init_settings(self.config, self.device_type)

    # -- code -----------------------------------------------------------------------------------

    def training_arguments_code(self) -> str:
        """Executable on its own: imports TrainingArguments and builds ``training_args``."""
        kwargs, comments = trainer_settings(self.config, self.device_type)
        return "from transformers import TrainingArguments\n\n" + call_code(
            "training_args", "TrainingArguments", kwargs, comments
        )

    def trainer_code(self) -> str:
        """Executable given ``model``, ``tokenizer``, ``training_args`` and ``train_dataset``: the plain Trainer."""
        return trainer_code(self.config)

    def sft_config_code(self) -> str:
        """Executable where TRL is installed: builds ``sft_config``."""
        kwargs, comments = sft_settings(self.config, self.device_type)
        lines = ["from trl import SFTConfig", ""]
        if kwargs["padding_free"] and not keeps_packed_apart(self.attn_implementation):
            apart = ", ".join(name for name in ATTENTION_TABLE if keeps_packed_apart(name))
            lines.append(
                f"# note: measured with attn_implementation={self.attn_implementation!r}; TRL's padding-free "
                f"batches keep sequences apart only with one of: {apart}"
            )
        lines.append(call_code("sft_config", "SFTConfig", kwargs, comments))
        return "\n".join(lines)

    def sft_trainer_code(self) -> str:
        """Executable given ``model``, ``tokenizer``, ``sft_config`` and ``train_dataset``: TRL's SFTTrainer."""
        return sft_trainer_code(self.config)

    def model_code(self) -> str:
        """The model and tokenizer: ``from_pretrained`` as measured (attention, weights dtype, no KV cache)."""
        model = str(self.config.get("model", "your-model"))
        hub = hub_id(model)
        note = "the measured model" if hub == model else f"the measured preset {model!r} has this shape"
        args = ", ".join(f"{k}={literal(v)}" for k, v in self.from_pretrained_kwargs().items())
        lines = ["from transformers import AutoModelForCausalLM, AutoTokenizer", ""]
        lines += attention_setup_code(self.attn_implementation)  # e.g. torch_varlen's register()
        if hub == NO_CHECKPOINT:  # a miniature preset: no released weights to load, said where it would fail
            missing = (f"the measured preset {model!r} is a random-weight miniature that no released checkpoint has "
                       "the shape of: set MODEL_ID to your checkpoint (a hub id or a local folder)")  # fmt: skip
            lines += [
                f"MODEL_ID = {literal(hub)}  # your checkpoint: no released one has the shape of {model!r}",
                f"if MODEL_ID == {literal(NO_CHECKPOINT)}:",
                f"    raise SystemExit({literal(missing)})",
            ]
        else:
            lines.append(f"MODEL_ID = {literal(hub)}  # {note}; use your checkpoint")
        lines += [
            f"model = AutoModelForCausalLM.from_pretrained(MODEL_ID, {args})",
            "tokenizer = AutoTokenizer.from_pretrained(MODEL_ID)",
        ]
        if self.strategy.packed:
            lines.append(
                "model.config.use_cache = False  # with a KV cache, transformers attends across packed sequences"
            )
        for part in model_setup_parts(str(self.config.get("kernels", ""))):
            lines += part.model_setup_code
        return "\n".join(lines)

    def to_python(self) -> str:
        """Ready-to-paste code: the model, TrainingArguments and its Trainer, TRL's SFTConfig and SFTTrainer.

        ``train_dataset``: your tokenized rows with ``input_ids`` and ``labels`` (prompt tokens -100), truncated
        to the measured max_length."""
        header = [
            f"# Recommended by nbhelpers from measurements: {self.label!r}, run {self.run_name!r}, "
            + " ".join(self.machine.split()),
            f"# {fmt_rate(self.real_tokens_per_s)} real tok/s = {fmt_speedup(self.speedup)} "
            f"over {self.baseline_label!r}"
            + (f", peak {fmt_gib(self.peak_memory_gib)} GiB" if self.peak_memory_gib is not None else "")
            + f", parity {self.parity}",
            f"# train_dataset: your tokenized rows (input_ids, labels with prompt tokens -100), at most "
            f"{self.max_length} tokens each",
        ]
        return "\n".join(
            header
            + ["", self.model_code(), "", "# With the plain Trainer:", self.training_arguments_code(), ""]
            + [self.trainer_code(), "", f"# Or with TRL (pip install trl){self._fresh_model_note()}:"]
            + [self.sft_config_code(), ""]
            + [self.sft_trainer_code(), ""]
        )

    def _fresh_model_note(self) -> str:
        """With an adapter, the Trainer's get_peft_model changed ``model`` in place: TRL takes a fresh one."""
        return ", on a freshly loaded model" if AdapterSettings.from_config(self.config).active else ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "machine": self.machine,
            "run_name": self.run_name,
            "record_id": self.record_id,
            "measured": {
                "real_tokens_per_s": self.real_tokens_per_s,
                "speedup": self.speedup,
                "baseline": self.baseline_label,
                "vs_without_the_workbook": self.over_without,
                "without_the_workbook": self.without_label,
                "peak_memory_gib": self.peak_memory_gib,
                "mfu": self.mfu,
                "parity": self.parity,
                "eligible_configurations": self.candidates,
                "not_eligible": dict(self.excluded),
                "passed_over": list(self.passed_over),
                "note": self.note,
            },
            "config": self.config,
            "training_arguments": self.training_arguments_kwargs(),
            "sft_config": self.sft_config_kwargs(),
            "peft_config": self.peft_config_kwargs(),
            "from_pretrained": {
                "pretrained_model_name_or_path": hub_id(str(self.config.get("model", ""))),
                **self.from_pretrained_kwargs(),
            },
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, default=str)

    def _repr_markdown_(self) -> str:
        return f"**Recommended:** {self.summary()}\n\n```python\n{self.to_python()}```\n"


def eligible(record: RunRecord, baseline_ids: set[str]) -> bool:
    """A measured record with a parity verdict of "pass", or the baseline of its group itself (unless a
    verdict against another reference failed it)."""
    status = parity_status(record)
    return is_measured(record) and (status in (PASS, BASELINE) or (record.record_id in baseline_ids and status != FAIL))


def _why_not(record: RunRecord) -> str:
    """Why a measured record is not eligible: its parity status and the verdict's note."""
    parity = record.metrics.get("parity")
    note = str(parity.get("note") or "") if isinstance(parity, dict) else ""
    return f"parity {parity_status(record)}" + (f" ({note})" if note else "")


def passed_over_text(passed_over: list[dict[str, Any]]) -> str:
    """'label (rate real tok/s, parity ...)' for each passed-over record."""
    return "; ".join(f"{p['label']} ({fmt_rate(p['real_tokens_per_s'])} real tok/s, {p['why']})" for p in passed_over)


def recommend(
    records: Iterable[RunRecord],
    machine: str | None = None,
    baseline_label: str | None = None,
    adapter: AdapterSettings | None = None,
) -> Recommendation:
    """The fastest measured step record with a parity pass (ties: less memory) of one machine, or the tuner's
    winner where its interval reaches that record's (:mod:`.tuner_choice`); one that compiles kernels at start only
    where the data say it is faster than every one that does not (:mod:`.start_cost`).

    Eligible: parity "pass", or the group's baseline itself (see :func:`eligible`); a faster record without
    a pass is listed in ``passed_over``. Records from several machines need ``machine=`` (or
    :func:`recommend_all`): a throughput on one machine says nothing about another. ``adapter`` (a notebook's
    ADAPTER and LORA_* settings) keeps the records that train that adapter; None keeps all. Raises ValueError
    when nothing is eligible.
    """
    records = list(records)
    steps = [r for r in step_records(records) if is_workbook(r)]  # peer rows (TRL) are compared, not recommended
    if adapter is not None:
        steps = [r for r in steps if adapter.matches(r.config)]
    if machine is not None:
        steps = [r for r in steps if r.machine == machine]
        records = [r for r in records if r.machine == machine]
    machines = list(dict.fromkeys(r.machine for r in steps))
    if len(machines) > 1:
        raise CrossMachineError(
            f"records come from {len(machines)} machines ({', '.join(machines)}); a recommendation compares "
            "measurements of one machine: pass machine=... or use recommend_all()"
        )
    baselines = choose_baselines(records, baseline_label)
    baseline_ids = {b.record_id for b in baselines.values() if b is not None}
    candidates = [r for r in steps if eligible(r, baseline_ids)]
    unverified = [r for r in steps if is_measured(r) and not eligible(r, baseline_ids)]
    excluded = {
        "failed": sum(1 for r in steps if not r.ok),
        "failed parity": sum(1 for r in unverified if parity_status(r) == FAIL),
        "parity not checked": sum(1 for r in unverified if parity_status(r) != FAIL),
    }
    if not candidates:
        where = f" on {machines[0]}" if machines else ""
        raise ValueError(
            f"no configuration to recommend{where}: no ok step record with a throughput and a parity pass "
            f"({excluded['failed']} failed, {excluded['failed parity']} failed parity, "
            f"{excluded['parity not checked']} parity not checked, {len(steps)} step records in all)"
        )
    best, tuner_note = prefer_tuner_winner(fastest(candidates), candidates)
    best, start_note = without_needless_compile(best, candidates)
    start_note = "; ".join(note for note in (tuner_note, start_note) if note)
    base = nearest_baseline(best, baselines[group_key(best)], group_records(records)[group_key(best)])
    faster = sorted(
        (r for r in unverified if float(tokens_per_s(r)) > float(tokens_per_s(best))),
        key=lambda r: -float(tokens_per_s(r)),
    )
    passed_over = [
        {"label": record_label(r), "record_id": r.record_id, "real_tokens_per_s": float(tokens_per_s(r)),
         "parity": parity_status(r), "why": _why_not(r)}
        for r in faster
    ]  # fmt: skip
    _, without, why = references_of(records, baseline_label)[group_key(best)]
    return Recommendation(
        label=record_label(best),
        machine=best.machine,
        run_name=run_name_of(best),
        record_id=best.record_id,
        config=dict(best.config),
        device_type=str(best.environment.get("device_type", "cuda")),
        real_tokens_per_s=float(tokens_per_s(best)),
        peak_memory_gib=metric_value(best, "peak_memory_gib", None),
        mfu=metric_value(best, "mfu", None),
        speedup=speedup(best, base),
        baseline_label=record_label(base),
        parity=parity_status(best) if best.record_id not in baseline_ids else BASELINE,
        candidates=len(candidates),
        excluded=excluded,
        passed_over=passed_over,
        note=start_note,
        over_without=over(best, without)[0] if without is not None else None,
        without_label=record_label(without) if without is not None else why,
    )


def recommend_all(
    records: Iterable[RunRecord], baseline_label: str | None = None, adapter: AdapterSettings | None = None
) -> list[Recommendation]:
    """One recommendation per machine that has an eligible record (of ``adapter``'s workloads, when given), in
    order of first appearance."""
    records = list(records)
    out = []
    for machine in dict.fromkeys(r.machine for r in step_records(records)):
        try:
            out.append(recommend(records, machine=machine, baseline_label=baseline_label, adapter=adapter))
        except CrossMachineError:
            raise
        except ValueError:
            continue
    return out


def other_adapters_note(records: Iterable[RunRecord], adapter: AdapterSettings | None) -> str:
    """A sentence on the measured step records :func:`recommend` left out for training another adapter, or ''."""
    if adapter is None:
        return ""
    others: dict[str, int] = {}
    for record in step_records(records):
        if is_workbook(record) and is_measured(record) and not adapter.matches(record.config):
            name = AdapterSettings.from_config(record.config).label or "none (full fine-tuning)"
            others[name] = others.get(name, 0) + 1
    if not others:
        return ""
    counts = ", ".join(f"{name}: {count}" for name, count in others.items())
    return (
        f"Left out: {sum(others.values())} measured step record(s) of another adapter ({counts}); set ADAPTER "
        "(and LORA_RANK, LORA_ALPHA, LORA_TARGETS) to recommend among them."
    )


def recommendations_markdown(
    recommendations: list[Recommendation], records: Iterable[RunRecord] = (), adapter: AdapterSettings | None = None
) -> Any:
    """The recommendations as one Markdown object for a notebook cell, with :func:`other_adapters_note`."""
    from IPython.display import Markdown

    note = other_adapters_note(records, adapter)
    if not recommendations and note and adapter is not None:
        return Markdown(f"**No recommendation for ADAPTER={adapter.name!r}.** {note}")
    if not recommendations:
        return Markdown("**No recommendation:** no configuration was measured successfully.")
    return Markdown("\n\n".join([*(r._repr_markdown_() for r in recommendations), *([note] if note else [])]))
