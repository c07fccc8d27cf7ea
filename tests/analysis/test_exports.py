"""The exported code builds HF Trainer and TRL SFTTrainer on a CPU, and their batches are the measured plan.

For every padding strategy a record is recommended, its exported code is executed (the model id pointed at a
tiny model this test saves), and the first batches of ``trainer.get_train_dataloader()`` are compared with
the workbook's own batches of the same samples (:func:`plan_batches` + :func:`collate`).
"""

from __future__ import annotations

import pytest

from nbhelpers.analysis.recommend import recommend
from nbhelpers.data.collate import collate
from nbhelpers.data.loading import IGNORE_INDEX, load_examples
from nbhelpers.data.strategies import PADDING_STRATEGIES, STRATEGIES, PaddingSettings, plan_batches
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.models.loading import build_model, model_source

pytest.importorskip("accelerate", reason="Trainer needs accelerate>=1.1")
datasets = pytest.importorskip("datasets", reason="the exports' train_dataset is a datasets.Dataset")
torch = pytest.importorskip("torch")

MAX_LENGTH = 128
BATCH = 3
BUDGET = 300
CPU = {"device_name": "cpu", "hostname": "ci", "device_type": "cpu"}
FIRST_BATCHES = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A saved tiny model with its tokenizer, and 12 tokenized samples of the default data."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer = load_tokenizer(model_source("qwen3-tiny"))
    build_model("qwen3-tiny", "sdpa", 0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    examples = load_examples("default", tokenizer, 12, MAX_LENGTH)
    rows = [{"input_ids": e["input_ids"], "labels": e["labels"]} for e in examples]
    assert all(any(t != IGNORE_INDEX for t in r["labels"]) for r in rows)  # TRL drops rows without loss tokens
    return folder, tokenizer, rows


def _recommendation(make_record, padding: str):
    record = make_record(
        "best", 300.0, padding=padding, batch_size=BATCH, max_length=MAX_LENGTH, token_budget=BUDGET,
        model="qwen3-tiny", liger_kernels=["rope", "rms_norm", "swiglu", "cross_entropy"], **CPU,
    )  # fmt: skip
    return recommend([record])


def _run(code: str, namespace: dict) -> dict:
    exec(compile(code, "<exported>", "exec"), namespace)
    return namespace


def _namespace(rec, folder, rows, tmp_path, monkeypatch) -> dict:
    """The exported model code, run with the model id pointed at the saved tiny model."""
    monkeypatch.chdir(tmp_path)  # output_dir="outputs" lands here
    code = rec.model_code()
    line = next(x for x in code.splitlines() if x.startswith("MODEL_ID = "))
    namespace = _run(code.replace(line, f"MODEL_ID = {str(folder)!r}"), {})
    namespace["train_dataset"] = datasets.Dataset.from_list(rows)
    return namespace


def _expected(rows, settings: PaddingSettings, pad_token_id: int) -> list[dict]:
    plan = plan_batches([len(r["input_ids"]) for r in rows], settings)
    return [collate([rows[i] for i in batch], settings, pad_token_id) for batch in plan]


def _first_batches(trainer, count: int = FIRST_BATCHES) -> list[dict]:
    batches = []
    for batch in trainer.get_train_dataloader():
        batches.append(batch)
        if len(batches) == count:
            break
    return batches


def _assert_same(got: dict, want: dict, keys: tuple[str, ...]) -> None:
    for key in keys:
        assert torch.equal(got[key].cpu(), want[key]), key


def _keys(settings: PaddingSettings) -> tuple[str, ...]:
    return ("input_ids", "labels", "position_ids" if settings.entry.packed else "attention_mask")


@pytest.mark.parametrize("padding", PADDING_STRATEGIES)
def test_trainer_export_batches_as_the_plan(make_record, tiny, tmp_path, monkeypatch, padding):
    folder, tokenizer, rows = tiny
    rec = _recommendation(make_record, padding)
    namespace = _namespace(rec, folder, rows, tmp_path, monkeypatch)
    _run(rec.training_arguments_code(), namespace)
    args = namespace["training_args"]
    assert args.activation_checkpointing is False and args.lr_scheduler_type == "constant"
    _run(rec.trainer_code(), namespace)
    expected = _expected(rows, rec.padding_settings, tokenizer.pad_token_id)
    got = _first_batches(namespace["trainer"], len(expected))
    assert len(got) == len(expected)  # the whole epoch: every step of the plan, no more
    for have, want in zip(got, expected):
        _assert_same(have, want, _keys(rec.padding_settings))


def _tokens(batch: dict) -> int:
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())


@pytest.mark.parametrize("padding", PADDING_STRATEGIES)
def test_sft_trainer_export_batches_as_the_plan(make_record, tiny, tmp_path, monkeypatch, padding):
    """Where TRL can batch as measured (dataset order: static, dynamic, multiple, packed) the batches are equal;
    bucketed (TRL's length grouping) and token budget (TRL's bfd packing) hold the same tokens in other steps."""
    pytest.importorskip("trl", reason="TRL is in the test extras: pip install trl")
    folder, tokenizer, rows = tiny
    rec = _recommendation(make_record, padding)
    namespace = _namespace(rec, folder, rows, tmp_path, monkeypatch)
    _run(rec.sft_config_code(), namespace)
    config = namespace["sft_config"]
    assert config.gradient_checkpointing is False and config.bf16 is False  # TRL's defaults are True
    _run(rec.sft_trainer_code(), namespace)
    settings = rec.padding_settings
    expected = _expected(rows, settings, tokenizer.pad_token_id)
    got = _first_batches(namespace["trainer"], len(expected) + 1)
    lengths = sorted(len(r["input_ids"]) for r in rows)
    if STRATEGIES[padding].length_grouped:
        assert sum(_tokens(b) for b in got) == sum(lengths)
        assert all(b["input_ids"].shape[0] <= BATCH for b in got)
        for batch in got:  # padded to the batch's longest row
            assert batch["input_ids"].shape[1] == int(batch["attention_mask"].sum(dim=1).max())
    elif settings.entry.trl.packing:
        assert len(got) <= len(expected)  # best-fit decreasing fills rows at least as well as in-order greedy
        seen = []
        for batch in got:
            assert batch["input_ids"].shape[0] == 1 and batch["input_ids"].shape[1] <= BUDGET
            starts = (batch["position_ids"][0] == 0).nonzero().flatten().tolist() + [batch["input_ids"].shape[1]]
            seen += [b - a for a, b in zip(starts, starts[1:])]
            assert (batch["labels"][0][starts[:-1]] == IGNORE_INDEX).all()  # no label crosses a boundary
        assert sorted(seen) == lengths
    else:
        assert len(got) == len(expected)
        for have, want in zip(got, expected):
            _assert_same(have, want, _keys(settings))


def test_a_hybrid_s_packed_rows_carry_their_boundaries_in_the_trainer_export(make_record):
    hybrid = recommend([make_record("p", 100.0, padding="packed", model="qwen3.5-tiny", **CPU)])
    assert "boundaries=True" in hybrid.trainer_code()
    dense = recommend([make_record("p", 100.0, padding="packed", model="qwen3-tiny", **CPU)])
    assert "boundaries" not in dense.trainer_code()


def test_strategy_trainer_names_a_bad_padding_argument():
    from nbhelpers.data.trainer_batching import StrategyTrainer

    with pytest.raises(TypeError, match="padding must be a PaddingSettings, not str"):
        StrategyTrainer(padding="packed")


def test_checkpointing_every_k_layers_is_exported_as_measured(make_record):
    every = recommend([make_record("ck", 100.0, activation_checkpointing="every_k", checkpoint_every=3, **CPU)])
    kwargs = every.training_arguments_kwargs()
    assert kwargs["activation_checkpointing"] is True  # transformers 5.24's spelling (layers 0, 3, 6, ...)
    assert kwargs["activation_checkpointing_kwargs"] == {"every_n_layers": 3}
    full = recommend([make_record("ck", 100.0, activation_checkpointing="full", **CPU)])
    assert full.sft_config_kwargs()["activation_checkpointing"] is True
    assert "activation_checkpointing_kwargs" not in full.sft_config_kwargs()


def test_a_backend_without_a_trainer_flag_is_set_up_on_the_model_in_the_export(make_record):
    from nbhelpers.kernels.registry import model_setup_parts

    assert [p.name for p in model_setup_parts("fla+liger")] == ["fla"]
    assert model_setup_parts("liger") == () and model_setup_parts("eager") == () and model_setup_parts("nope") == ()
    hybrid = {"padding": "token_budget", "model": "qwen3.5-tiny", **CPU}
    fused = recommend([make_record("f", 100.0, kernels="fla+liger", **hybrid)])
    code = fused.model_code()
    assert "use_fla(model)" in code.splitlines()[-1]  # after the model is loaded
    _run("from nbhelpers.kernels.fla import use_fla", {})  # the exported import resolves
    assert "use_liger_kernel" in fused.sft_config_code()  # Liger keeps its TRL flag
    plain = recommend([make_record("p", 100.0, kernels="liger", **hybrid)])
    assert "use_fla" not in plain.model_code()


def test_the_export_of_a_miniature_preset_fails_with_what_to_replace(make_record, tiny, tmp_path, monkeypatch):
    from nbhelpers.models.families import NO_CHECKPOINT

    rec = _recommendation(make_record, "packed")
    code = rec.model_code()
    assert f'MODEL_ID = "{NO_CHECKPOINT}"' in code and "qwen3-tiny" in code
    with pytest.raises(SystemExit, match="set MODEL_ID to your checkpoint"):
        _run(code, {})  # as printed: it stops before any download, saying what to do
    folder, _, rows = tiny
    namespace = _namespace(rec, folder, rows, tmp_path, monkeypatch)  # with a real checkpoint it loads
    assert namespace["model"].config.model_type == "qwen3"
