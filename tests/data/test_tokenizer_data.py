"""The offline Qwen3 tokenizer and dataset loading (default, JSONL with a field mapping, Parquet)."""

import json
from pathlib import Path

import pytest

from nbhelpers.data.formats import DataError
from nbhelpers.data.loading import IGNORE_INDEX, load_examples, load_rows, token_lengths, tokenize_row
from nbhelpers.data.tokenizer import load_tokenizer

GSM8K = Path(__file__).resolve().parents[3] / "shared" / "data" / "gsm8k_test.jsonl"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def test_known_qwen_token_ids(tokenizer):
    assert tokenizer("Hello world")["input_ids"] == [9707, 1879]
    assert tokenizer.encode("<think>x</think>") == [151667, 87, 151668]
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, len(tokenizer)) == (151643, 151645, 151669)


def test_chat_template_is_chatml(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n"


def test_prompt_is_masked_and_eos_appended(tokenizer):
    example = tokenize_row({"prompt": "Hello", "response": "world"}, tokenizer)
    n_prompt = len(tokenizer("Hello\n", add_special_tokens=False)["input_ids"])
    assert example["labels"][:n_prompt] == [IGNORE_INDEX] * n_prompt
    assert example["input_ids"][-1] == tokenizer.eos_token_id == example["labels"][-1]
    assert example["input_ids"][n_prompt:] == example["labels"][n_prompt:]


def test_default_dataset_is_long_tailed(tokenizer):
    lengths = token_lengths("default", tokenizer)
    assert len(lengths) == 1000
    ordered = sorted(lengths)
    median, p99 = ordered[500], ordered[990]
    assert 150 < median < 450 and p99 > 3 * median


def test_missing_field_names_the_parameter(tmp_path, tokenizer):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"q": "a", "a": "b"}) + "\n")
    with pytest.raises(DataError, match="fields are \\['a', 'q'\\], without prompt_field='prompt'"):
        load_examples(str(path), tokenizer, 1, 64)


def test_parquet_and_json(tmp_path, tokenizer):
    import pandas as pd

    rows = [{"instruction": "Add 2 and 3", "output": "5"}] * 3
    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    (tmp_path / "d.json").write_text(json.dumps(rows))
    for name in ("d.parquet", "d.json"):
        examples = load_examples(str(tmp_path / name), tokenizer, 2, 64, "instruction", "output")
        assert len(examples) == 2 and examples[0]["labels"][-1] == tokenizer.eos_token_id


def test_unknown_file_type_and_missing_file(tmp_path):
    (tmp_path / "d.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=".jsonl, .jsonl.gz, .json, .parquet"):
        load_rows(str(tmp_path / "d.csv"))
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_rows(str(tmp_path / "absent.jsonl"))


def test_datasets_name_path(tmp_path, tokenizer, monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(name, split):
        calls.append((name, split))
        return datasets.Dataset.from_list([{"prompt": "p", "response": "r"}] * 4)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("nbhelpers.validation.hub_lookup", lambda *a, **k: "")  # the hub says it exists
    assert len(load_rows("someone/some_set", limit=3)) == 3
    assert calls == [("someone/some_set", "train")]


@pytest.mark.skipif(not GSM8K.exists(), reason=f"the shared GSM8K file is absent ({GSM8K})")
def test_gsm8k_with_field_mapping_and_chat_template(tokenizer):
    examples = load_examples(str(GSM8K), tokenizer, 8, 512, "question", "answer", use_chat_template=True)
    assert len(examples) == 8
    first = examples[0]
    text = tokenizer.decode(first["input_ids"])
    assert text.startswith("<|im_start|>user\nJanet") and "<|im_start|>assistant\n" in text
    assert all(label == IGNORE_INDEX for label in first["labels"][:10])
    lengths = token_lengths(str(GSM8K), tokenizer, "question", "answer", limit=50)
    assert len(lengths) == 50 and min(lengths) > 20
    assert token_lengths(str(GSM8K), tokenizer, "question", "answer", limit=50) == lengths  # cached


def test_the_length_cache_follows_the_content_not_the_files_size_and_time(tmp_path):
    """A dataset rewritten in place with the same size and modification time gets its own lengths, not the old ones
    (the cache is keyed by a hash of what was read)."""
    import os

    tokenizer = load_tokenizer()
    path = tmp_path / "rows.jsonl"
    first = '{"prompt": "a", "response": "one two three four five six"}\n'
    second = '{"prompt": "a", "response": "one two three four five sev"}\n'  # the same size, other words
    assert len(first) == len(second)
    path.write_text(first)
    stamp = path.stat().st_mtime_ns
    before = token_lengths(str(path), tokenizer)
    path.write_text(second)
    os.utime(path, ns=(stamp, stamp))
    assert path.stat().st_size == len(first) and path.stat().st_mtime_ns == stamp
    fresh = len(tokenize_row({"prompt": "a", "response": "one two three four five sev"}, tokenizer)["input_ids"])
    assert token_lengths(str(path), tokenizer) == [fresh]
    assert before != [fresh]  # the two contents tokenize to different lengths: the old entry would be wrong
