"""Dataset formats: detection, conversion, multi-turn loss masks, files of every kind, errors naming row and field."""

from __future__ import annotations

import gzip
import json

import pytest

from nbhelpers.data import formats
from nbhelpers.data.formats import DataError, Fields, detect_format, to_messages
from nbhelpers.data.loading import IGNORE_INDEX, DataParams, describe_format, load_examples, load_rows, tokenize_row
from nbhelpers.data.tokenizer import load_tokenizer
from nbhelpers.validation import ConfigError

ALPACA = {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"}
CHAT = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "And of Italy?"},
        {"role": "assistant", "content": "Rome."},
    ]
}
SHAREGPT = {
    "conversations": [
        {"from": "human", "value": "Capital of France?"},
        {"from": "gpt", "value": "Paris."},
        {"from": "human", "value": "And of Italy?"},
        {"from": "gpt", "value": "Rome."},
    ]
}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def learned_text(example, tokenizer) -> list[str]:
    """The learned stretches of an example, decoded."""
    pieces, current = [], []
    for token, label in zip(example["input_ids"], example["labels"], strict=True):
        if label == IGNORE_INDEX:
            if current:
                pieces.append(tokenizer.decode(current))
            current = []
        else:
            assert label == token
            current.append(token)
    if current:
        pieces.append(tokenizer.decode(current))
    return pieces


@pytest.mark.parametrize(
    ("row", "name"),
    [
        ({"prompt": "p", "response": "r"}, "prompt_response"),
        (CHAT, "messages"),
        (SHAREGPT, "sharegpt"),
        (ALPACA, "alpaca"),
        ({"prompt": "p", "completion": "c"}, "prompt_completion"),
        ({"text": "all of it"}, "text"),
    ],
)
def test_each_format_is_detected(row, name):
    assert detect_format(row).name == name
    assert name in formats.describe(detect_format(row), detected=True)


def test_unknown_row_lists_its_fields_and_the_formats():
    with pytest.raises(DataError, match=r"fields are \['a', 'b'\].*DATA_FORMAT to one of: prompt_response"):
        detect_format({"a": "x", "b": "y"}, source="mine.jsonl")


@pytest.mark.parametrize("use_chat_template", [False, True])
@pytest.mark.parametrize("row", [CHAT, SHAREGPT], ids=["messages", "sharegpt"])
def test_multi_turn_learns_every_assistant_turn(row, use_chat_template, tokenizer):
    example = tokenize_row(row, tokenizer, use_chat_template=use_chat_template)
    learned = learned_text(example, tokenizer)
    assert learned == ["Paris.<|im_end|>", "Rome.<|im_end|>"]
    text = tokenizer.decode(example["input_ids"])
    assert "Capital of France?" in text and "And of Italy?" in text
    if use_chat_template:
        assert text.startswith("<|im_start|>system\nBe brief.") or text.startswith("<|im_start|>user")


def test_short_answer_is_found_after_its_header_not_in_the_template(tokenizer):
    row = {"messages": [{"role": "user", "content": "Say a"}, {"role": "assistant", "content": "a"}]}
    example = tokenize_row(row, tokenizer, use_chat_template=True)
    assert learned_text(example, tokenizer) == ["a<|im_end|>"]


def test_alpaca_keeps_its_input_joined_to_the_instruction(tokenizer):
    messages = to_messages(ALPACA, detect_format(ALPACA))
    assert messages[0]["content"] == "Add the numbers.\n\n2 and 3"
    named = detect_format(ALPACA, Fields("instruction", "output"))  # the old way of naming Alpaca's fields
    assert named.name == "alpaca"
    no_input = to_messages({**ALPACA, "input": ""}, named)
    assert no_input[0]["content"] == "Add the numbers."
    templated = to_messages(ALPACA, named, Fields(prompt_template="{instruction}\nInput: {input}"))
    assert templated[0]["content"] == "Add the numbers.\nInput: 2 and 3"


def test_several_prompt_fields_with_any_names(tokenizer):
    row = {"task": "Translate", "source": "chat", "target": "cat"}
    fields = Fields("task,source", "target")
    messages = to_messages(row, detect_format(row, fields), fields)
    assert messages == [{"role": "user", "content": "Translate\n\nchat"}, {"role": "assistant", "content": "cat"}]
    with pytest.raises(DataError, match="prompt_template"):
        to_messages(row, detect_format(row, fields), Fields("task,source", "target", "{missing}"))


def test_trl_prompt_completion_and_text(tokenizer):
    example = tokenize_row({"prompt": "2+2=", "completion": "4"}, tokenizer)
    assert learned_text(example, tokenizer) == ["4<|im_end|>"]
    chat = {"prompt": [{"role": "user", "content": "2+2="}], "completion": [{"role": "assistant", "content": "4"}]}
    assert learned_text(tokenize_row(chat, tokenizer), tokenizer) == ["4<|im_end|>"]
    whole = tokenize_row({"text": "every token counts"}, tokenizer)
    assert all(label != IGNORE_INDEX for label in whole["labels"])


@pytest.mark.parametrize(("value", "kind"), [(["a"], "list"), ({"a": 1}, "dict"), (None, "null"), (3, "int")])
def test_a_non_text_field_names_field_and_row(value, kind, tmp_path, tokenizer):
    path = tmp_path / "d.jsonl"
    rows = [{"prompt": "p", "response": "r"}, {"prompt": "p", "response": value}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=rf"row 2, field 'response': holds {kind}, not text"):
        load_examples(str(path), tokenizer, 2, 64)


def test_a_chat_turn_with_a_bad_role_or_content(tokenizer):
    bad_role = {"messages": [{"role": "wizard", "content": "x"}, {"role": "assistant", "content": "y"}]}
    with pytest.raises(DataError, match=r"messages\[1\].role.*'wizard'"):
        tokenize_row(bad_role, tokenizer)
    no_answer = {"conversations": [{"from": "human", "value": "x"}]}
    with pytest.raises(DataError, match="no assistant turn"):
        tokenize_row(no_answer, tokenizer)
    list_content = {"messages": [{"role": "user", "content": ["x"]}, {"role": "assistant", "content": "y"}]}
    with pytest.raises(DataError, match="field 'content': holds list"):
        tokenize_row(list_content, tokenizer)


def test_every_file_kind_and_a_folder(tmp_path, tokenizer):
    import pandas as pd

    rows = [SHAREGPT, SHAREGPT]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as handle:
        handle.write("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "c.json").write_text(json.dumps({"data": rows}))
    pd.DataFrame([ALPACA] * 2).to_parquet(tmp_path / "d.parquet")
    for name in ("a.jsonl", "b.jsonl.gz", "c.json"):
        examples = load_examples(str(tmp_path / name), tokenizer, 2, 128)
        assert len(examples) == 2 and learned_text(examples[0], tokenizer) == ["Paris.<|im_end|>", "Rome.<|im_end|>"]
    assert learned_text(load_examples(str(tmp_path / "d.parquet"), tokenizer, 2, 128)[0], tokenizer) == ["5<|im_end|>"]
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "part-1.jsonl").write_text(json.dumps(CHAT) + "\n")
    (folder / "part-2.jsonl").write_text(json.dumps(CHAT) + "\n")
    assert len(load_rows(str(folder))) == 2
    assert "'messages'" in describe_format(str(folder))


def test_a_datasets_folder_saved_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([ALPACA] * 3).save_to_disk(str(tmp_path / "saved"))
    assert load_rows(str(tmp_path / "saved"), limit=2) == [ALPACA, ALPACA]


def test_data_params_validate_and_feed_load_examples(tmp_path, tokenizer):
    params = DataParams(dataset="default", data_format="auto")
    assert set(params.kwargs()) == {
        "prompt_field", "response_field", "use_chat_template", "data_format", "prompt_template"
    }  # fmt: skip
    assert len(load_examples(params.dataset, tokenizer, 2, 64, **params.kwargs())) == 2
    from nbhelpers.measure.config import RunConfig

    config = RunConfig(**DataParams("x.jsonl", "sharegpt", prompt_template="{a}").config_fields())
    assert (config.dataset, config.data_format, config.prompt_template) == ("x.jsonl", "sharegpt", "{a}")
    with pytest.raises(ConfigError, match="data_format='csv'"):
        DataParams(data_format="csv")
    with pytest.raises(ConfigError, match="use_chat_template"):
        DataParams(use_chat_template="yes")
    forced = DataParams(dataset="default", data_format="text")
    with pytest.raises(DataError, match="row 1, field 'text': missing"):
        load_examples(forced.dataset, tokenizer, 2, 64, **forced.kwargs())


@pytest.mark.parametrize(
    ("row", "data_format"),
    [
        ({"prompt": "", "response": ""}, "prompt_response"),
        ({"prompt": "Say hi", "response": "   "}, "prompt_response"),
        ({"instruction": "x", "input": "", "output": ""}, "alpaca"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}, "messages"),
        ({"text": "  "}, "text"),
    ],
)
def test_a_row_with_nothing_to_learn_is_an_error_naming_its_source_and_row(row, data_format):
    from nbhelpers.data.formats import DATA_FORMATS, Where, to_messages
    from nbhelpers.data.loading import DataError

    with pytest.raises(DataError, match=r"dataset 'mine.jsonl' row 7: the text to learn is empty"):
        to_messages(row, DATA_FORMATS[data_format], where=Where("mine.jsonl", 7))
