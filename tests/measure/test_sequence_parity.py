"""The parity probe: the same sequences batched by every strategy give the same per-sequence summed losses,
total loss and gradient norm on a CPU (fp32, eager, sdpa); a packed row that mixes its sequences does not."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from nbhelpers.analysis.parity import FAIL, PASS, check_parity
from nbhelpers.data.loading import load_examples
from nbhelpers.data.strategies import PaddingSettings
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.kernels.registry import cpu_tolerance
from nbhelpers.measure.config import RunConfig
from nbhelpers.measure.env import safe_environment
from nbhelpers.measure.sequence_parity import NO_LOGITS_NOTE, filled_rows, probe_fill_rows, probe_size, run_probe
from nbhelpers.measure.store import RunRecord
from nbhelpers.models.loading import build_model, model_source

MAX_LENGTH = 40
TOLERANCE = cpu_tolerance("eager").rel  # the baseline's cpu_tolerance: same kernels (spec.SAME_KERNELS_CPU says why)
# fp32 sums of the same ~130 token losses grouped otherwise: log2(130) = 7 roundings of 2^-24 (4e-7); 1e-6 leaves room
# and is 1/10 of TOLERANCE.
REGROUPED_SUM = 1e-6
ROWS = [  # six samples of uneven length, the longest cut at MAX_LENGTH
    ("Name a colour.", "Blue."),
    ("Explain in a few words why the sky looks blue during the day.", "Air scatters short blue wavelengths of "
     "sunlight more strongly than the longer red ones, so blue light reaches the eye from every direction."),
    ("What is two plus two?", "Four."),
    ("Write one sentence about rivers.", "Rivers carry water, sediment and life from the hills to the sea."),
    ("Translate 'thank you' into French.", "Merci."),
    ("List three prime numbers and say what makes a number prime.", "Two, three and five; a prime has exactly two "
     "divisors, one and itself, and every other whole number is a product of primes."),
]  # fmt: skip
# Two sequences per padded batch; a token budget of 64 tokens and two length buckets cut them otherwise.
SETTINGS = {
    "static": PaddingSettings("static", batch_size=2, max_length=MAX_LENGTH),
    "dynamic": PaddingSettings("dynamic", batch_size=2, max_length=MAX_LENGTH),
    "packed": PaddingSettings("packed", batch_size=2, max_length=MAX_LENGTH),
    "token_budget": PaddingSettings("token_budget", batch_size=2, max_length=MAX_LENGTH, token_budget=64),
    "bucketed": PaddingSettings("bucketed", batch_size=2, max_length=MAX_LENGTH, num_buckets=2),
}


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    data = tmp_path_factory.mktemp("probe") / "rows.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": p, "response": r}) for p, r in ROWS) + "\n")
    return data


@pytest.fixture(scope="module")
def setup(rows_file):
    data = rows_file
    tokenizer = load_tokenizer(model_source("qwen3-tiny"))
    examples = load_examples(str(data), tokenizer, 6, MAX_LENGTH)
    lengths = [len(e["input_ids"]) for e in examples]
    assert len(set(lengths)) >= 4 and max(lengths) == MAX_LENGTH, lengths
    model = build_model("qwen3-tiny", "sdpa", seed=0).train()
    return model, examples, tokenizer.pad_token_id


class Probes(dict):
    """Each strategy's probe, run on first use (a forward and backward per batch: ~0.5 s each on 2 cores)."""

    def __init__(self, setup):
        super().__init__()
        self.setup = setup

    def __missing__(self, name: str) -> dict:
        model, examples, pad = self.setup
        self[name] = run_probe(model, examples, SETTINGS[name], pad)
        return self[name]


@pytest.fixture(scope="module")
def probes(setup):
    return Probes(setup)


# The strategies the first-batch check could not judge run in the fast suite; the rest with the slow tests.
FAST = ["token_budget", "bucketed"]
ALL = [pytest.param(n, marks=[] if n in FAST else [pytest.mark.slow]) for n in SETTINGS if n != "static"]


def as_record(probe: dict, padding: str) -> RunRecord:
    """A step record of the tiny workload carrying this probe, as the worker writes it."""
    config = RunConfig(model="qwen3-tiny", max_length=MAX_LENGTH, padding=padding, label=padding).to_dict()
    metrics = {"parity_probe": probe | {"samples": list(range(6))}, "compute_dtype": "fp32"}
    return RunRecord(config=config, metrics=metrics, environment=safe_environment("cpu"))


def test_the_strategies_batch_the_probe_otherwise(probes):
    assert probes["static"]["batches"] == [[0, 1], [2, 3], [4, 5]]
    assert probes["token_budget"]["batches"] == [[0, 1, 2], [3, 4], [5]]  # 7 + 40 + 9 tokens fit in 64
    buckets = probes["bucketed"]["batches"]  # lengths 7, 9, 12 | 22, 40, 40, two a batch, shuffled
    assert sorted(map(sorted, buckets)) == [[0, 2], [1, 3], [4], [5]]


@pytest.mark.parametrize("name", ALL)
def test_the_probe_is_the_same_however_the_sequences_are_batched(probes, name):
    reference, probe = probes["static"], probes[name]
    assert all(count > 0 for count in reference["sequence_loss_tokens"])
    assert math.fsum(reference["sequence_loss_sums"]) == pytest.approx(reference["total_loss"], rel=REGROUPED_SUM)
    assert sorted(i for batch in probe["batches"] for i in batch) == list(range(6))
    assert probe["sequence_loss_tokens"] == reference["sequence_loss_tokens"]
    for got, want in zip(probe["sequence_loss_sums"], reference["sequence_loss_sums"]):
        assert abs(got - want) <= TOLERANCE * abs(want)
    assert probe["total_loss"] == pytest.approx(reference["total_loss"], rel=TOLERANCE)
    assert probe["grad_norm"] == pytest.approx(reference["grad_norm"], rel=TOLERANCE)
    assert probe["param_grad_norms"].keys() == reference["param_grad_norms"].keys()
    verdict = check_parity(as_record(probe, name), as_record(reference, "static"))
    assert verdict["status"] == PASS and verdict["method"] == "probe", verdict
    assert verdict["per_sequence_max_rel_diff"] <= TOLERANCE
    assert verdict["note"] == "6 sequences compared one by one"


@pytest.mark.parametrize("broken", ["continuous_positions", pytest.param("mask_ignored", marks=pytest.mark.slow)])
def test_a_packed_row_that_mixes_its_sequences_fails(setup, probes, broken):
    """Packed rows without position resets, or with a mask that joins them: later sequences see earlier ones."""
    model, examples, pad = setup
    mixed = run_probe(model, examples, SETTINGS["token_budget"], pad, broken=broken)
    verdict = check_parity(as_record(mixed, "token_budget"), as_record(probes["static"], "static"))
    assert verdict["status"] == FAIL
    # Measured on the tiny preset: ~1e-3 per sequence and ~5e-2 on the gradient norm, 100x the tolerance.
    assert verdict["per_sequence_max_rel_diff"] > 10 * TOLERANCE
    first = probes["static"]["batches"][0][0]
    # the first sequence has nothing before it to mix with: the same kernels, other rows (pytest's 1e-6, REGROUPED_SUM)
    assert mixed["sequence_loss_sums"][first] == pytest.approx(probes["static"]["sequence_loss_sums"][first])


class _Wrapped:
    """A model whose output drops its logits (as Liger's fused linear cross-entropy), or whose loss sums its
    tokens where the timed step's model takes their mean; it keeps the keyword names of each call."""

    def __init__(self, model, summed: bool = False):
        self.model, self.summed, self.calls = model, summed, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def __call__(self, **inputs):
        self.calls.append(sorted(inputs))
        if self.summed:
            output = self.model(**inputs, num_items_in_batch=1)
            return SimpleNamespace(loss=output.loss, logits=output.logits)
        return SimpleNamespace(loss=self.model(**inputs).loss, logits=None)


def test_without_logits_the_total_and_gradients_are_still_compared(setup, probes):
    model, examples, pad = setup
    probe = run_probe(_Wrapped(model), examples, SETTINGS["token_budget"], pad)
    assert probe["sequence_loss_sums"] is None and probe["note"] == NO_LOGITS_NOTE
    assert probe["total_loss"] == pytest.approx(probes["static"]["total_loss"], rel=TOLERANCE)
    verdict = check_parity(as_record(probe, "token_budget"), as_record(probes["static"], "static"))
    assert verdict["status"] == PASS and verdict["per_sequence_max_rel_diff"] is None
    assert "per-sequence losses not compared" in verdict["note"] and NO_LOGITS_NOTE in verdict["note"]


def test_the_model_is_called_as_the_timed_step_calls_it(setup):
    """The collated batch's keys and nothing more (a compiled model then meets the graph it traced when timed)."""
    from nbhelpers.data.collate import collate

    model, examples, pad = setup
    wrapped = _Wrapped(model)
    run_probe(wrapped, examples, SETTINGS["static"], pad)
    keys = sorted(collate(examples[:2], SETTINGS["static"], pad))
    assert wrapped.calls == [keys] * 3 and "num_items_in_batch" not in keys


def test_a_model_whose_loss_is_not_a_token_mean_is_refused(setup):
    model, examples, pad = setup
    with pytest.raises(RuntimeError, match="is not the sum of its per-token cross-entropy"):
        run_probe(_Wrapped(model, summed=True), examples, SETTINGS["static"], pad)
    assert all(p.grad is None for p in model.parameters())  # the next probe starts from clean gradients


def test_a_batch_with_nothing_to_predict_adds_nothing(setup, probes):
    """A sequence whose labels are all ignored: its batch is skipped (a mean over no tokens is not a number)."""
    model, examples, pad = setup
    silent = [dict(e, labels=[-100] * len(e["labels"])) if i < 2 else e for i, e in enumerate(examples)]
    probe = run_probe(model, silent, SETTINGS["static"], pad)
    assert probe["sequence_loss_sums"][:2] == [0.0, 0.0] and probe["sequence_loss_tokens"][:2] == [0, 0]
    rest = run_probe(model, examples[2:], SETTINGS["static"], pad)  # the same last two batches alone
    assert probe["sequence_loss_sums"][2:] == pytest.approx(probes["static"]["sequence_loss_sums"][2:], rel=TOLERANCE)
    # the same batches as `rest` plus a skipped one: exact but for the order of the fp32 sums (REGROUPED_SUM)
    assert probe["total_loss"] == pytest.approx(rest["total_loss"], rel=REGROUPED_SUM)
    assert math.isfinite(probe["grad_norm"])
    assert probe["grad_norm"] == pytest.approx(rest["grad_norm"], rel=REGROUPED_SUM)


def test_rows_that_fill_a_batch_to_the_timed_shape_change_nothing(setup, probes):
    """Four rows a batch, the second batch filled from two rows to four: the probe reads the same, and the filler
    rows carry no labels."""
    model, examples, pad = setup
    settings = PaddingSettings("static", batch_size=4, max_length=MAX_LENGTH)
    planned = run_probe(model, examples, settings, pad)
    filled = run_probe(model, examples, settings, pad, fill_rows=4)
    assert planned["batches"] == filled["batches"] == [[0, 1, 2, 3], [4, 5]]
    assert (planned["filled_to_rows"], filled["filled_to_rows"]) == (0, 4)
    assert filled["sequence_loss_tokens"] == planned["sequence_loss_tokens"]
    for got, want in zip(filled["sequence_loss_sums"], planned["sequence_loss_sums"]):  # the baseline's tolerance
        assert got == pytest.approx(want, rel=TOLERANCE)
    assert filled["grad_norm"] == pytest.approx(planned["grad_norm"], rel=TOLERANCE)
    for name, norm in planned["param_grad_norms"].items():
        assert filled["param_grad_norms"][name] == pytest.approx(norm, rel=TOLERANCE)

    import torch

    batch = {"input_ids": torch.tensor([[5, 6, 7]]), "labels": torch.tensor([[-100, 6, 7]]),
             "attention_mask": torch.tensor([[1, 1, 1]])}  # fmt: skip
    grown = filled_rows(batch, 3)
    assert grown["input_ids"].tolist() == [[5, 6, 7]] * 3 and grown["attention_mask"].tolist() == [[1, 1, 1]] * 3
    assert grown["labels"].tolist() == [[-100, 6, 7], [-100] * 3, [-100] * 3]
    assert filled_rows(batch, 1) is batch


def test_only_a_compiled_backends_probe_is_filled_to_the_timed_rows():
    assert probe_fill_rows(RunConfig(kernels="compile", batch_size=8)) == 8
    assert probe_fill_rows(RunConfig(kernels="liger+regional_compile", batch_size=4)) == 4
    assert probe_fill_rows(RunConfig(kernels="eager", batch_size=8)) == 0
    assert probe_fill_rows(RunConfig(kernels="liger", batch_size=8)) == 0


def test_probe_size():
    assert probe_size(RunConfig(num_samples=64)) == 6
    assert probe_size(RunConfig(num_samples=3)) == 3
    assert probe_size(RunConfig(extra={"parity_probe_samples": 0})) == 0
    with pytest.raises(ValueError, match="parity_probe_samples"):
        probe_size(RunConfig(extra={"parity_probe_samples": -1}))


@pytest.mark.slow
def test_the_worker_records_the_probe_and_parity_judges_token_budget_by_it(rows_file, runs_root):
    """Two real configurations in their own subprocesses: the probe is in each record, and token_budget passes."""
    from nbhelpers.analysis.parity import check_against_first
    from nbhelpers.measure.runner import run_configs

    base = RunConfig(
        run_name="probe", dataset=str(rows_file), num_samples=6, batch_size=2, max_length=MAX_LENGTH, steps=1, warmup=0,
        padding="static", device="cpu",
    )  # fmt: skip
    configs = [
        base.replace(label="static"),
        base.replace(label="token budget", padding="token_budget", token_budget=64),
    ]
    static, budget = run_configs(configs, progress=False, annotate=check_against_first)
    assert static.ok and budget.ok, (static.reason, budget.reason)
    assert budget.metrics["parity_probe"]["batches"] == [[0, 1, 2], [3, 4], [5]]
    assert budget.metrics["parity_probe"]["method"].startswith("after timing")
    verdict = budget.metrics["parity"]
    assert verdict["status"] == "pass" and verdict["method"] == "probe", verdict
    assert verdict["per_sequence_max_rel_diff"] <= TOLERANCE


def test_the_probes_gradient_norm_of_bf16_weights_is_summed_in_fp32():
    """A bf16 norm (8 mantissa bits) rounds relative differences below 0.4% away; the probe's is fp32's."""
    import torch

    from nbhelpers.measure.sequence_parity import gradient_norm

    layer = torch.nn.Linear(64, 64, bias=True).to(torch.bfloat16)
    assert gradient_norm(layer) == 0.0  # no gradients yet
    torch.manual_seed(0)
    layer.weight.grad = torch.randn(64, 64).to(torch.bfloat16)
    layer.bias.grad = torch.randn(64).to(torch.bfloat16) * 1e-3
    exact = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in layer.parameters()))
    # fp32 sums of 4,160 squares against float64's: log2(4,160) = 12 roundings of 2^-24 = 7e-7, within 1e-6
    assert gradient_norm(layer) == pytest.approx(exact, rel=1e-6)
    layer.weight.grad[0, 0] += 0.125  # a change of about 1e-4 of the norm: invisible at bf16's resolution
    changed = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in layer.parameters()))
    assert gradient_norm(layer) == pytest.approx(changed, rel=1e-6) and changed != exact
