"""Proof that packing does not leak attention across sequences: per-sequence loss, packed vs padded.

Each sequence's mean next-token loss (logits, then cross-entropy per token, grouped by sequence) is
computed twice: in a padded batch (one row per sequence, attention mask) and in one packed row
(``position_ids`` restarting at 0 per sequence, no attention mask). With correct boundaries the two
agree to fp32 rounding; a token that attends across a boundary changes its sequence's loss.

The same check run on a deliberately broken packed row must fail. Broken modes:

- ``"mask_ignored"``: an all-ones attention mask is passed with the packed row; transformers then
  treats the row as one causal sequence (RoPE positions still restart, only the boundaries are lost).
- ``"continuous_positions"``: position ids 0..N-1 over the whole row: no boundary information at all.
- ``"cache_on"``: the model's default ``use_cache=True`` during the forward; transformers only detects
  packed sequences without a cache, so the row silently becomes one causal sequence. A training step
  on packed rows must call the model with ``use_cache=False``.

The first sequence of a row has nothing before it, so it matches even when broken; the others do not.
The proof on a model built by name, and its record: :mod:`nbhelpers.measure.contamination_proof`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .collate import collate
from .loading import IGNORE_INDEX, Example
from .strategies import PaddingSettings

RELATIVE_TOLERANCE = 1e-5  # fp32 on CPU: packed and padded agree to ~1e-7 relative; leaks move it by >= 1e-4
BROKEN_MODES = ("mask_ignored", "continuous_positions", "cache_on")


def sequence_ids(position_ids: Any) -> Any:
    """Index of the sequence each position of a packed row belongs to (a new one at every 0)."""
    import torch

    flat = position_ids.reshape(-1)
    return torch.cumsum((flat == 0).long(), dim=0) - 1


def per_sequence_loss(logits: Any, labels: Any, ids: Any) -> list[tuple[float, int]]:
    """(mean next-token cross-entropy, loss tokens) per sequence of one row; ``ids`` as sequence_ids.

    The prediction at position t is for label t+1 and belongs to the sequence of position t+1; a
    packed sequence's first label is -100, so no prediction crosses a boundary into the loss.
    """
    import torch

    losses = torch.nn.functional.cross_entropy(
        logits[:-1].float(), labels[1:], reduction="none", ignore_index=IGNORE_INDEX
    )
    valid = labels[1:] != IGNORE_INDEX
    targets = ids[1:]
    result = []
    for sequence in range(int(ids.max()) + 1):
        chosen = valid & (targets == sequence)
        count = int(chosen.sum())
        result.append((float(losses[chosen].sum() / count) if count else float("nan"), count))
    return result


def padded_losses(model: Any, examples: Sequence[Example], pad_token_id: int, max_length: int) -> list[float]:
    """Each sequence's loss in a right-padded batch (dynamic padding, attention mask)."""
    import torch

    batch = collate(examples, PaddingSettings("dynamic", max_length=max_length), pad_token_id)
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    losses = []
    for row in range(len(examples)):
        n = int(batch["attention_mask"][row].sum())
        zeros = torch.zeros(n, dtype=torch.long)
        losses.append(per_sequence_loss(logits[row, :n], batch["labels"][row, :n], zeros)[0][0])
    return losses


def packed_losses(
    model: Any, examples: Sequence[Example], pad_token_id: int, max_length: int, broken: str = ""
) -> tuple[list[float], list[int]]:
    """Each sequence's loss (and loss tokens) in one packed row, optionally with a broken boundary."""
    import torch

    if broken and broken not in BROKEN_MODES:
        raise ValueError(f"broken={broken!r}: one of '', " + ", ".join(repr(m) for m in BROKEN_MODES))
    batch = collate(examples, PaddingSettings("packed", max_length=max_length), pad_token_id)
    ids = sequence_ids(batch["position_ids"])
    inputs: dict[str, Any] = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"]}
    inputs["use_cache"] = broken == "cache_on"
    if broken == "mask_ignored":
        inputs["attention_mask"] = torch.ones_like(batch["input_ids"])
    elif broken == "continuous_positions":
        inputs["position_ids"] = torch.arange(batch["input_ids"].shape[-1]).unsqueeze(0)
    with torch.no_grad():
        logits = model(**inputs).logits[0]
    pairs = per_sequence_loss(logits, batch["labels"][0], ids)
    return [loss for loss, _ in pairs], [count for _, count in pairs]


@dataclass
class ContaminationCheck:
    """Per-sequence losses packed vs padded, and whether every one is within the tolerance."""

    table: Any  # DataFrame: sequence, tokens, loss_tokens, padded_loss, packed_loss, relative_difference, within
    mode: str  # "correct" or the broken mode
    tolerance: float
    model: str = ""  # the model the check ran on, when another than the one asked for (see proof_model)

    @property
    def passed(self) -> bool:
        return bool(self.table["within_tolerance"].all())

    @property
    def max_relative_difference(self) -> float:
        return float(self.table["relative_difference"].max())

    def verdict(self) -> str:
        outcome = "PASSES" if self.passed else "FAILS"
        on = f" on {self.model}" if self.model else ""
        return (
            f"{self.mode}{on}: {outcome} (max relative difference {self.max_relative_difference:.2e}, "
            f"tolerance {self.tolerance:.0e})"
        )


def check_contamination(
    model: Any,
    examples: Sequence[Example],
    pad_token_id: int,
    max_length: int,
    broken: str = "",
    tolerance: float = RELATIVE_TOLERANCE,
    reference: Sequence[float] | None = None,
) -> ContaminationCheck:
    """Compare each sequence's loss packed (maybe broken) against padded; ``passed`` iff all are within tolerance.

    ``reference`` reuses padded losses already computed by :func:`padded_losses` for these examples.
    """
    import pandas as pd

    if len(examples) < 2:
        raise ValueError("at least two sequences are needed to test a boundary")
    model.eval()  # no dropout: the two forwards must see the same function
    if reference is None:
        reference = padded_losses(model, examples, pad_token_id, max_length)
    packed, counts = packed_losses(model, examples, pad_token_id, max_length, broken)
    rows = []
    for index, (ref, got, count) in enumerate(zip(reference, packed, counts)):
        difference = abs(got - ref) / abs(ref) if ref else abs(got)
        rows.append(
            {
                "sequence": index,
                "tokens": min(len(examples[index]["input_ids"]), max_length),
                "loss_tokens": count,
                "padded_loss": ref,
                "packed_loss": got,
                "relative_difference": difference,
                "within_tolerance": difference <= tolerance,
            }
        )
    return ContaminationCheck(table=pd.DataFrame(rows), mode=broken or "correct", tolerance=tolerance)


def proof_summary(checks: Sequence[ContaminationCheck]) -> Any:
    """One row per check: mode, passed, max relative difference, tolerance, sequences over tolerance."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "mode": c.mode,
                "passed": c.passed,
                "max_relative_difference": c.max_relative_difference,
                "tolerance": c.tolerance,
                "sequences_over_tolerance": int((~c.table["within_tolerance"]).sum()),
                "first_sequence_difference": float(c.table["relative_difference"].iloc[0]),
            }
            for c in checks
        ]
    ).set_index("mode")


def is_hybrid_proof(checks: Sequence[ContaminationCheck]) -> bool:
    """Whether the checks are a hybrid's (one per path of its Gated DeltaNet layers)."""
    names = {p.name for p in HYBRID_PATHS}
    return bool(checks) and all(c.mode in names for c in checks)


def reference_check(checks: Sequence[ContaminationCheck]) -> ContaminationCheck:
    """The check that must pass: "correct" (packed vs padded), or a hybrid's first path that keeps sequences apart."""
    keeping = {p.name for p in HYBRID_PATHS if p.keeps_apart} | {"correct"}
    return next(c for c in checks if c.mode in keeping)


def require_proof(checks: Sequence[ContaminationCheck]) -> str:
    """The verdicts, one per line; AssertionError unless the correct check passes and every broken one fails
    (a hybrid's checks: :func:`require_hybrid_proof`)."""
    if is_hybrid_proof(checks):
        return require_hybrid_proof(checks)
    correct = [c for c in checks if c.mode == "correct"]
    broken = [c for c in checks if c.mode != "correct"]
    if not correct or not correct[0].passed:
        raise AssertionError("packed and padded losses differ: packing leaks across sequence boundaries here")
    undetected = [c.mode for c in broken if c.passed]
    if undetected:
        raise AssertionError(f"the check did not catch the broken boundaries of {undetected}: it proves nothing")
    return "\n".join(c.verdict() for c in checks)


# -- the hybrid family: packed vs alone, per path of the Gated DeltaNet layers ----------------------------------

HYBRID_LOSS_TOLERANCE = 1e-5  # relative, fp32 on CPU: the reference run per sequence matches running it alone
HYBRID_LOGIT_TOLERANCE = 1e-4  # absolute, fp32 on CPU; mixing paths move logits by >= 1e-2 (tiny preset)


@dataclass(frozen=True)
class HybridPath:
    """One way of running a hybrid's Gated DeltaNet layers on a packed row, and whether it must keep the
    sequences apart (the proof passes iff every keeping path passes and every mixing path fails)."""

    name: str
    bind: Any  # (model) -> None: binds the path into the model's modeling module (process-wide)
    boundaries: bool  # the packed row carries cu_seq_lens/seq_idx (else position_ids only)
    keeps_apart: bool
    needs_cuda: bool = False


def _reference(model: Any) -> None:
    from nbhelpers.kernels.hybrid_paths import use_reference

    use_reference(model)


def _reference_conv_mixed(model: Any) -> None:
    from nbhelpers.kernels.hybrid_paths import use_reference

    use_reference(model, keep_apart=("delta_rule",))


def _fla(model: Any) -> None:
    from nbhelpers.kernels.fla import use_fla

    use_fla(model)


def _fla_conv_mixed(model: Any) -> None:
    from nbhelpers.kernels.fla import use_fla

    use_fla(model, conv=False)


HYBRID_PATHS = (
    HybridPath("reference, boundaries", _reference, boundaries=True, keeps_apart=True),
    HybridPath("reference, position_ids only", _reference, boundaries=False, keeps_apart=False),
    HybridPath("reference delta rule apart, conv mixed", _reference_conv_mixed, boundaries=True, keeps_apart=False),
    HybridPath("fla, boundaries", _fla, boundaries=True, keeps_apart=True, needs_cuda=True),
    HybridPath("fla delta rule, PyTorch conv", _fla_conv_mixed, boundaries=True, keeps_apart=False, needs_cuda=True),
)


def hybrid_paths_for(device: str) -> tuple[HybridPath, ...]:
    """The paths a device can run (fla's only with CUDA)."""
    return tuple(p for p in HYBRID_PATHS if device == "cuda" or not p.needs_cuda)


def _sequence_outputs(logits: Any, labels: Any, ids: Any) -> tuple[list[tuple[float, int]], list[Any]]:
    pairs = per_sequence_loss(logits, labels, ids)
    return pairs, [logits[ids == s].float() for s in range(len(pairs))]


def alone_outputs(model: Any, examples: Sequence[Example], max_length: int) -> list[tuple[float, Any]]:
    """(loss, logits) of each sequence run alone (batch of one, no padding, no boundaries needed)."""
    import torch

    device = next(model.parameters()).device
    results = []
    for example in examples:
        ids = torch.tensor([example["input_ids"][:max_length]], device=device)
        labels = torch.tensor(example["labels"][:max_length], device=device)
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False).logits[0]
        (loss, _), = per_sequence_loss(logits, labels, torch.zeros_like(labels))
        results.append((loss, logits.float()))
    return results


def check_packed_vs_alone(
    model: Any,
    examples: Sequence[Example],
    pad_token_id: int,
    max_length: int,
    path: HybridPath,
    reference: Sequence[tuple[float, Any]] | None = None,
    loss_tolerance: float = HYBRID_LOSS_TOLERANCE,
    logit_tolerance: float = HYBRID_LOGIT_TOLERANCE,
) -> ContaminationCheck:
    """Bind ``path``, then compare each sequence of one packed row with running it alone: loss (relative)
    and logits (largest absolute difference); a sequence is within tolerance only when both are.

    ``reference`` reuses :func:`alone_outputs`; compute it on a path that runs each sequence correctly
    (alone, every path does: a lone sequence has no boundary to cross).
    """
    import pandas as pd
    import torch

    from .collate import to_device

    if len(examples) < 2:
        raise ValueError("at least two sequences are needed to test a boundary")
    model.eval()
    path.bind(model)
    if reference is None:
        reference = alone_outputs(model, examples, max_length)
    device = next(model.parameters()).device
    batch = to_device(collate(examples, PaddingSettings("packed", max_length=max_length), pad_token_id,
                              boundaries=path.boundaries), str(device))  # fmt: skip
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        logits = model(**inputs, use_cache=False).logits[0]
    ids = sequence_ids(batch["position_ids"])
    pairs, pieces = _sequence_outputs(logits, batch["labels"][0], ids)
    rows = []
    for index, ((ref_loss, ref_logits), (got, count), piece) in enumerate(zip(reference, pairs, pieces)):
        difference = abs(got - ref_loss) / abs(ref_loss) if ref_loss else abs(got)
        logit_difference = float((piece - ref_logits).abs().max())
        rows.append({
            "sequence": index, "tokens": len(piece), "loss_tokens": count, "alone_loss": ref_loss,
            "packed_loss": got, "relative_difference": difference, "max_logit_difference": logit_difference,
            "within_tolerance": difference <= loss_tolerance and logit_difference <= logit_tolerance,
        })  # fmt: skip
    return ContaminationCheck(table=pd.DataFrame(rows), mode=path.name, tolerance=loss_tolerance)


def hybrid_checks(
    model: Any,
    examples: Sequence[Example],
    pad_token_id: int,
    max_length: int,
    paths: Sequence[HybridPath] = HYBRID_PATHS[:3],
    loss_tolerance: float = HYBRID_LOSS_TOLERANCE,
    logit_tolerance: float = HYBRID_LOGIT_TOLERANCE,
) -> list[ContaminationCheck]:
    """:func:`check_packed_vs_alone` for each path; each sequence alone is run once, on the first path."""
    paths[0].bind(model)
    reference = alone_outputs(model.eval(), examples, max_length)
    return [
        check_packed_vs_alone(model, examples, pad_token_id, max_length, path, reference, loss_tolerance,
                              logit_tolerance)  # fmt: skip
        for path in paths
    ]


def require_hybrid_proof(checks: Sequence[ContaminationCheck], paths: Sequence[HybridPath] = HYBRID_PATHS) -> str:
    """The verdicts, one per line; AssertionError unless every path that must keep sequences apart passes and
    every mixing path fails (a check that cannot fail proves nothing)."""
    keeps = {p.name: p.keeps_apart for p in paths}
    leaking = [c.mode for c in checks if keeps[c.mode] and not c.passed]
    if leaking:
        raise AssertionError(f"packed and alone differ on {leaking}: these paths leak across sequence boundaries")
    undetected = [c.mode for c in checks if not keeps[c.mode] and c.passed]
    if undetected:
        raise AssertionError(f"the check did not catch the mixing paths {undetected}: it proves nothing")
    if not any(keeps[c.mode] for c in checks) or all(keeps[c.mode] for c in checks):
        raise AssertionError("the proof needs a path that keeps sequences apart and one that mixes them")
    return "\n".join(c.verdict() for c in checks)
