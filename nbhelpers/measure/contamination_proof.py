"""The contamination proof of one model, run and recorded: the checks of :mod:`nbhelpers.data.contamination`
on real tokenized examples (packed vs padded; a hybrid's packed vs alone), and their outcome as a record of
kind "parity" for the report."""

from __future__ import annotations

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
from nbhelpers.models.families import packs_with_boundaries
from nbhelpers.models.loading import build_model, model_source

from .env import environment
from .store import RunRecord


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
    """The correct check, then each broken mode, on real tokenized examples and one model.

    A family whose packed rows carry their boundaries (the Qwen3.5 hybrid) gets
    :func:`~nbhelpers.data.contamination.hybrid_checks` instead: each CPU path of its Gated DeltaNet layers,
    packed vs each sequence alone.
    """
    tokenizer = load_tokenizer(model_source(model_name))
    examples = load_examples(
        dataset, tokenizer, num_sequences, max_length, prompt_field, response_field, use_chat_template,
        data_format=data_format, prompt_template=prompt_template,
    )  # fmt: skip
    prepare_attention(attn_implementation)
    model = build_model(model_name, attn_implementation, seed).eval()
    if packs_with_boundaries(model_name):
        return hybrid_checks(model, examples, tokenizer.pad_token_id, max_length, hybrid_paths_for("cpu"))
    reference = padded_losses(model, examples, tokenizer.pad_token_id, max_length)
    return [
        check_contamination(model, examples, tokenizer.pad_token_id, max_length, mode, tolerance, reference)
        for mode in ("", *broken_modes)
    ]



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
    base = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    against = "alone" if hybrid else "padded"
    return RunRecord(
        config=base | {"label": f"contamination proof: packed vs {against}", "padding": "packed"},
        kind="parity",
        notebook=notebook,
        metrics={"parity": parity},
        environment=environment("cpu"),
    )
