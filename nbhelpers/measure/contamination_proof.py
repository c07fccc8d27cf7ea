"""The contamination proof of one model, run and recorded: the checks of :mod:`nbhelpers.data.contamination`
on real tokenized examples (packed vs padded; a hybrid's packed vs alone), and their outcome as a record of
kind "parity" for the report."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from nbhelpers.data.contamination import (
    BROKEN_MODES,
    HYBRID_PATHS,
    RELATIVE_TOLERANCE,
    ContaminationCheck,
    check_contamination,
    hybrid_checks,
    hybrid_paths_for,
    is_hybrid_proof,
    padded_losses,
    reference_check,
)
from nbhelpers.data.loading import load_examples
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.attention import prepare_attention
from nbhelpers.models.families import is_preset, model_shape, packs_with_boundaries, preset_config, smallest_preset
from nbhelpers.models.loading import build_model, model_source

from .env import environment
from .store import RunRecord

# The proof builds its model in fp32 in the notebook's own process, on the CPU: a preset beyond this many
# parameters runs the proof on its family's smallest preset, the same layers (the 27B hybrid would need 108 GB;
# the Qwen3-1.7B shape took 44 s of notebook 03 on an H200's host, the tiny preset a second or two).
PROOF_MAX_PARAMETERS = 500_000_000


def proof_model(model_name: str, max_parameters: int = PROOF_MAX_PARAMETERS) -> str:
    """The model the proof runs on: ``model_name``, or for a preset of more than ``max_parameters`` parameters its
    family's smallest preset (packing keeps sequences apart by the layers' code, not their width). A folder or
    hub id is used as given."""
    if not is_preset(model_name) or model_shape(preset_config(model_name)).total_parameters <= max_parameters:
        return model_name
    return smallest_preset(model_name)


def contamination_proof(
    model_name: str = "qwen3-tiny",
    dataset: str = "default",
    prompt_field: str = "prompt",
    response_field: str = "response",
    num_sequences: int = 4,
    max_length: int = 128,
    attn_implementation: str = "sdpa",
    broken_modes: Sequence[str] = BROKEN_MODES,
    tolerance: float = RELATIVE_TOLERANCE,
    seed: int = 0,
    *,
    use_chat_template: bool = False,
    data_format: str = "auto",
    prompt_template: str = "",
) -> list[ContaminationCheck]:
    """The correct check, then each broken mode, on real tokenized examples and one model (:func:`proof_model`:
    a large preset's family's smallest preset, named in each check's ``model``).

    A family whose packed rows carry their boundaries (the Qwen3.5 hybrid) gets
    :func:`~nbhelpers.data.contamination.hybrid_checks` instead: each CPU path of its Gated DeltaNet layers,
    packed vs each sequence alone.
    """
    ran_on = proof_model(model_name)
    tokenizer = load_tokenizer(model_source(ran_on))
    examples = load_examples(
        dataset, tokenizer, num_sequences, max_length, prompt_field, response_field, use_chat_template,
        data_format=data_format, prompt_template=prompt_template,
    )  # fmt: skip
    prepare_attention(attn_implementation)
    model = build_model(ran_on, attn_implementation, seed).eval()
    if packs_with_boundaries(ran_on):
        checks = hybrid_checks(model, examples, tokenizer.pad_token_id, max_length, hybrid_paths_for("cpu"))
    else:
        reference = padded_losses(model, examples, tokenizer.pad_token_id, max_length)
        checks = [
            check_contamination(model, examples, tokenizer.pad_token_id, max_length, mode, tolerance, reference)
            for mode in ("", *broken_modes)
        ]
    return checks if ran_on == model_name else [dataclasses.replace(c, model=ran_on) for c in checks]



def proof_record(checks: Sequence[ContaminationCheck], config: Any, notebook: str = "") -> RunRecord:
    """A RunRecord of kind "parity" holding the proof's outcome (status pass/fail) for the report."""
    correct = reference_check(checks)
    hybrid = is_hybrid_proof(checks)
    kept_apart = {p.name for p in HYBRID_PATHS if p.keeps_apart}
    parity = {
        "status": "pass" if all(c.passed for c in checks if c.mode in kept_apart | {"correct"}) else "fail",
        "check": "per-sequence loss and logits, packed vs alone" if hybrid else "per-sequence loss, packed vs padded",
        "tolerance": correct.tolerance,
        "tolerance_kind": "relative",
        "max_relative_difference": correct.max_relative_difference,
        "sequences": len(correct.table),
        "broken_modes_detected": {c.mode: not c.passed for c in checks if c.mode not in kept_apart | {"correct"}},
    }
    if correct.model:  # run on the family's smallest preset (proof_model), not on the configuration's model
        parity["ran_on_model"] = correct.model
    base = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    against = "alone" if hybrid else "padded"
    return RunRecord(
        config=base | {"label": f"contamination proof: packed vs {against}", "padding": "packed"},
        kind="parity",
        notebook=notebook,
        metrics={"parity": parity},
        environment=environment("cpu"),
    )
