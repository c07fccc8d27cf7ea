"""Datasets: the shipped default, JSONL/JSON/Parquet files, folders of them or `datasets` names; tokenization.

Rows of any format in ``nbhelpers.data.formats`` become chat messages; tokenization learns every
assistant turn (the prompt's labels are -100). :class:`DataParams` holds the data parameters every
notebook takes, validated together.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbhelpers.resources import DATA_DIR
from nbhelpers.validation import ConfigError, check_choice, check_hub_name, check_text

from .formats import AUTO, DEFAULT_FIELDS, FORMAT_NAMES, DataError, Fields, Message, Where, resolve_format, to_messages
from .tokenizer import tokenizer_cache_dir

DEFAULT_DATASET = DATA_DIR / "default_sft.jsonl.gz"
IGNORE_INDEX = -100
FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")
Example = dict[str, list[int]]  # {"input_ids": [...], "labels": [...]} (labels -100 on the prompt)


@dataclass(frozen=True)
class DataParams:
    """The data parameters of every notebook (DATASET, DATA_FORMAT, PROMPT_FIELD, ...), validated."""

    dataset: str = (
        "default"  # "default", a .jsonl/.jsonl.gz/.json/.parquet file, a folder of them, or a `datasets` name
    )
    data_format: str = AUTO  # "auto" (detected) or one of nbhelpers.data.formats.DATA_FORMATS
    prompt_field: str = "prompt"  # field(s) of the prompt; several joined: "instruction,input"
    response_field: str = "response"  # field of the answer (the loss tokens)
    prompt_template: str = ""  # how several prompt fields are joined, e.g. "{instruction}\n\n{input}"
    use_chat_template: bool = False  # wrap the turns in the tokenizer's chat template

    def __post_init__(self) -> None:
        for name in ("dataset", "prompt_field", "response_field"):
            check_text(name, getattr(self, name))
        check_choice("data_format", self.data_format, FORMAT_NAMES)
        if not isinstance(self.prompt_template, str):
            raise ConfigError("prompt_template", self.prompt_template, "a string ('' joins fields with a blank line)")
        if not isinstance(self.use_chat_template, bool):
            raise ConfigError("use_chat_template", self.use_chat_template, "True or False")

    @property
    def fields(self) -> Fields:
        return Fields(self.prompt_field, self.response_field, self.prompt_template)

    def config_fields(self) -> dict[str, Any]:
        """The RunConfig fields these parameters set: ``RunConfig(**data.config_fields(), ...)``."""
        return {"dataset": self.dataset, **self.kwargs()}

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`load_examples` and :func:`token_lengths` (all but the dataset)."""
        return {
            "prompt_field": self.prompt_field, "response_field": self.response_field,
            "use_chat_template": self.use_chat_template, "data_format": self.data_format,
            "prompt_template": self.prompt_template,
        }  # fmt: skip


# Notebook parameter -> DataParams field; the defaults are DataParams' own.
DATA_PARAMETERS = {
    "DATASET": "dataset", "DATA_FORMAT": "data_format", "PROMPT_FIELD": "prompt_field",
    "RESPONSE_FIELD": "response_field", "PROMPT_TEMPLATE": "prompt_template", "USE_CHAT_TEMPLATE": "use_chat_template",
}  # fmt: skip


def resolve_source(source: str) -> str:
    """A path for "default" or a file; otherwise the string is taken as a `datasets` name."""
    if source == "default":
        if not DEFAULT_DATASET.exists():
            raise FileNotFoundError(f"dataset='default': the shipped file {DEFAULT_DATASET} is missing")
        return str(DEFAULT_DATASET)
    return source


def _read_json_lines(path: Path) -> list[Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path} line {number}: not UTF-8 text (byte {error.start} of the line)") from None
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as error:
                reason = error.args[0] if error.args else error
                raise DataError(f"{path} line {number}: not valid JSON ({reason})") from None
            if not isinstance(rows[-1], dict):
                raise DataError(f"{path} line {number}: holds a JSON {type(rows[-1]).__name__}, not an object")
    return rows


def _read_json(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise DataError(f"{path}: not valid JSON ({error})") from None
    rows = data.get("data", data.get("rows")) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise DataError(
            f'{path}: a JSON file must hold a list of objects (or {{"data": [...]}}); this one holds '
            f"a {type(data).__name__}"
        )
    return rows


def _read_file(path: Path, source: str) -> list[Any]:
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return _read_json_lines(path)
    if name.endswith(".json"):
        return _read_json(path)
    if name.endswith(".parquet"):
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    raise DataError(f"dataset={source!r}: allowed files are {', '.join(FILE_SUFFIXES)}, a folder or a `datasets` name")


def _read_folder(path: Path, source: str, limit: int | None) -> list[Any]:
    if (path / "dataset_info.json").exists() or (path / "state.json").exists():  # datasets.save_to_disk
        import datasets

        loaded = datasets.load_from_disk(str(path))
        split = loaded["train"] if isinstance(loaded, datasets.DatasetDict) else loaded
        return [dict(r) for r in split.select(range(min(limit or len(split), len(split))))]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(FILE_SUFFIXES))
    if not files:
        raise DataError(f"dataset={source!r}: the folder holds no {', '.join(FILE_SUFFIXES)} file")
    rows: list[Any] = []
    for file in files:
        rows.extend(_read_file(file, source))
        if limit and len(rows) >= limit:
            break
    return rows


def load_rows(source: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a dataset: a file (by suffix), a folder of files, or ``datasets.load_dataset(name)``.

    A path that does not exist fails at once; a hub name is checked first (fast, and at once when offline).
    """
    resolved = resolve_source(source)
    path = Path(resolved).expanduser()
    if path.is_dir():
        rows = _read_folder(path, source, limit)
    elif path.exists():
        rows = _read_file(path, source)
    elif path.name.lower().endswith((*FILE_SUFFIXES, ".gz")) or resolved.startswith(("/", ".", "~")):
        raise FileNotFoundError(f"dataset={source!r}: no such file or folder ({path.resolve()})")
    else:
        check_hub_name("dataset", resolved, repo_type="dataset")
        import datasets

        split = datasets.load_dataset(resolved, split="train")
        rows = [dict(row) for row in split.select(range(min(limit or len(split), len(split))))]
    return rows[:limit] if limit else rows


def _ids(encoded: Any) -> list[int]:
    return list(encoded["input_ids"] if isinstance(encoded, dict) or hasattr(encoded, "input_ids") else encoded)


def _plain(messages: list[Message], tokenizer: Any) -> tuple[list[int], list[int]]:
    """No template: other turns + "\\n" masked, each assistant turn + the end token learned; "text" learned whole."""
    input_ids: list[int] = []
    labels: list[int] = []
    for message in messages:
        learned = message["role"] in ("assistant", "text")
        text = message["content"] if learned else message["content"] + "\n"
        ids = _ids(tokenizer(text, add_special_tokens=False))
        if learned:
            ids = [*ids, tokenizer.eos_token_id]
        input_ids += ids
        labels += ids if learned else [IGNORE_INDEX] * len(ids)
    return input_ids, labels


def _templated(messages: list[Message], tokenizer: Any) -> tuple[list[int], list[int]]:
    """The chat template over the whole conversation; each assistant turn's content and end marker learned."""
    if messages and messages[0]["role"] == "text":
        return _plain(messages, tokenizer)
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, position, eos = [], 0, tokenizer.eos_token or ""
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message["content"]:
            continue
        if index:  # search after this turn's header, so a short answer is not found inside the template
            head = tokenizer.apply_chat_template(messages[:index], tokenize=False, add_generation_prompt=True)
            position = max(position, len(head) if text.startswith(head) else position)
        start = text.find(message["content"], position)
        if start < 0:
            continue
        end = start + len(message["content"])
        end += len(eos) if eos and text.startswith(eos, end) else 0
        spans.append((start, end))
        position = end
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids = list(encoded["input_ids"])
    learned = [any(s <= begin < e for s, e in spans) for begin, _ in encoded["offset_mapping"]]
    return input_ids, [t if keep else IGNORE_INDEX for t, keep in zip(input_ids, learned, strict=True)]


def tokenize_messages(
    messages: list[Message], tokenizer: Any, max_length: int | None = None, use_chat_template: bool = False
) -> Example:
    """Messages as input ids and labels (-100 outside the learned turns), truncated to ``max_length``."""
    input_ids, labels = (_templated if use_chat_template else _plain)(messages, tokenizer)
    if max_length:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    return {"input_ids": input_ids, "labels": labels}


def tokenize_row(
    row: dict[str, Any],
    tokenizer: Any,
    prompt_field: str = "prompt",
    response_field: str = "response",
    max_length: int | None = None,
    use_chat_template: bool = False,
    *,
    data_format: str = AUTO,
    prompt_template: str = "",
) -> Example:
    """One row of any format: prompt turns masked, every response turn + end token learned."""
    fields = Fields(prompt_field, response_field, prompt_template)
    messages = to_messages(row, resolve_format(data_format, row, fields), fields)
    return tokenize_messages(messages, tokenizer, max_length, use_chat_template)


def rows_as_messages(
    rows: list[Any], source: str, data_format: str = AUTO, fields: Fields = DEFAULT_FIELDS
) -> list[list[Message]]:
    """Every row as messages in one format (given, or detected on the first row)."""
    chosen = resolve_format(data_format, rows[0], fields, source)
    return [to_messages(row, chosen, fields, Where(source, number)) for number, row in enumerate(rows, start=1)]


def describe_format(source: str, data_format: str = AUTO, prompt_field: str = "prompt",
                    response_field: str = "response") -> str:  # fmt: skip
    """One line for a notebook: the format used for ``source`` and how to override it."""
    from .formats import describe

    rows = load_rows(source, limit=1)
    if not rows:
        raise DataError(f"dataset={source!r} has no rows")
    chosen = resolve_format(data_format, rows[0], Fields(prompt_field, response_field), source)
    return describe(chosen, detected=data_format == AUTO)


def load_examples(
    source: str,
    tokenizer: Any,
    num_samples: int,
    max_length: int,
    prompt_field: str = "prompt",
    response_field: str = "response",
    use_chat_template: bool = False,
    *,
    data_format: str = AUTO,
    prompt_template: str = "",
    min_rows: int = 0,
) -> list[Example]:
    """The first ``num_samples`` rows, tokenized and truncated to ``max_length``.

    Fewer rows than ``min_rows`` (a step's batch) is an error; so is a set where truncation left no
    example a loss token (nothing to learn); some such examples give a warning.
    """
    rows = load_rows(source, limit=num_samples)
    if not rows:
        raise DataError(f"dataset={source!r} has no rows")
    if len(rows) < min_rows:
        raise DataError(
            f"dataset={source!r} gives {len(rows)} row(s) (num_samples={num_samples}), fewer than one batch "
            f"({min_rows}): lower batch_size or use more samples"
        )
    fields = Fields(prompt_field, response_field, prompt_template)
    examples = [
        tokenize_messages(m, tokenizer, max_length, use_chat_template)
        for m in rows_as_messages(rows, source, data_format, fields)
    ]
    empty = [i + 1 for i, e in enumerate(examples) if all(label == IGNORE_INDEX for label in e["labels"])]
    if len(empty) == len(examples):
        raise DataError(
            f"dataset={source!r}: no loss tokens: max_length={max_length} cuts off every response (the prompts "
            "are longer); raise max_length"
        )
    if empty:
        warnings.warn(
            f"dataset={source!r}: {len(empty)} of {len(examples)} example(s) have no loss tokens after truncation "
            f"to max_length={max_length} (rows {empty[:5]}{' ...' if len(empty) > 5 else ''})",
            stacklevel=2,
        )
    return examples


def content_hash(path: Path) -> str:
    """SHA-256 of a file's bytes, read in chunks: a file rewritten in place with the same size and time differs."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(source: str, *parts: Any) -> str:
    """The cache key of what ``source`` holds: a file by its content, a folder or a `datasets` name by its name."""
    resolved = resolve_source(source)
    path = Path(resolved).expanduser()
    identity = content_hash(path) if path.is_file() else str(path.resolve()) if path.exists() else resolved
    return hashlib.sha256(json.dumps([identity, *parts], default=str).encode()).hexdigest()[:20]


def token_lengths(
    source: str,
    tokenizer: Any,
    prompt_field: str = "prompt",
    response_field: str = "response",
    use_chat_template: bool = False,
    limit: int | None = None,
    *,
    data_format: str = AUTO,
    prompt_template: str = "",
) -> list[int]:
    """Untruncated token length of every row, computed once and cached on disk."""
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    key = _fingerprint(
        source, prompt_field, response_field, use_chat_template, limit, name, len(tokenizer), data_format,
        prompt_template, 2,
    )  # fmt: skip
    cache = tokenizer_cache_dir().parent / "lengths" / f"{key}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    rows = load_rows(source, limit=limit)
    fields = Fields(prompt_field, response_field, prompt_template)
    lengths = [
        len(tokenize_messages(m, tokenizer, None, use_chat_template)["input_ids"])
        for m in rows_as_messages(rows, source, data_format, fields)
    ]
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.with_suffix(f".tmp{os.getpid()}")
    staging.write_text(json.dumps(lengths))
    staging.replace(cache)
    return lengths
