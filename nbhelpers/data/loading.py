"""Datasets: the shipped default, any JSONL/JSON/Parquet file or `datasets` name; tokenization; lengths."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nbhelpers.resources import DATA_DIR

from .tokenizer import tokenizer_cache_dir

DEFAULT_DATASET = DATA_DIR / "default_sft.jsonl.gz"
IGNORE_INDEX = -100
Example = dict[str, list[int]]  # {"input_ids": [...], "labels": [...]} (labels -100 on the prompt)


def resolve_source(source: str) -> str:
    """A path for "default" or a file; otherwise the string is taken as a `datasets` name."""
    if source == "default":
        if not DEFAULT_DATASET.exists():
            raise FileNotFoundError(f"dataset='default': the shipped file {DEFAULT_DATASET} is missing")
        return str(DEFAULT_DATASET)
    return source


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_rows(source: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a dataset as dicts, from a file (by suffix) or from ``datasets.load_dataset(name)``."""
    resolved = resolve_source(source)
    path = Path(resolved).expanduser()
    suffixes = "".join(path.suffixes[-2:]).lower()
    if path.exists():
        if suffixes.endswith((".jsonl", ".jsonl.gz")):
            rows = _read_json_lines(path)
        elif suffixes.endswith(".json"):
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data if isinstance(data, list) else data.get("data", data.get("rows"))
            if not isinstance(rows, list):
                raise ValueError(f"dataset={source!r}: a JSON file must hold a list of objects")
        elif suffixes.endswith(".parquet"):
            import pandas as pd

            rows = pd.read_parquet(path).to_dict("records")
        else:
            raise ValueError(f"dataset={source!r}: allowed files are .jsonl, .jsonl.gz, .json and .parquet")
    elif suffixes.endswith((".jsonl", ".gz", ".json", ".parquet")) or resolved.startswith(("/", ".", "~")):
        raise FileNotFoundError(f"dataset={source!r}: no such file")
    else:
        import datasets

        split = datasets.load_dataset(resolved, split="train")
        rows = [dict(row) for row in split.select(range(min(limit or len(split), len(split))))]
    return rows[:limit] if limit else rows


def _field(row: dict[str, Any], name: str, parameter: str) -> str:
    if name not in row:
        raise KeyError(f"{parameter}={name!r} is not a field of the dataset; its fields are {sorted(row)}")
    return str(row[name])


def tokenize_row(
    row: dict[str, Any],
    tokenizer: Any,
    prompt_field: str = "prompt",
    response_field: str = "response",
    max_length: int | None = None,
    use_chat_template: bool = False,
) -> Example:
    """Prompt + response + end token; the prompt's labels are -100 so only the response is learned."""
    prompt = _field(row, prompt_field, "prompt_field")
    response = _field(row, response_field, "response_field")
    if use_chat_template:
        prompt_ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
            prompt_ids = prompt_ids["input_ids"]
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    else:
        prompt_ids = tokenizer(prompt + "\n", add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    response_ids = [*response_ids, tokenizer.eos_token_id]
    input_ids = [*prompt_ids, *response_ids]
    labels = [IGNORE_INDEX] * len(prompt_ids) + response_ids
    if max_length:
        input_ids, labels = input_ids[:max_length], labels[:max_length]
    return {"input_ids": list(input_ids), "labels": list(labels)}


def load_examples(
    source: str,
    tokenizer: Any,
    num_samples: int,
    max_length: int,
    prompt_field: str = "prompt",
    response_field: str = "response",
    use_chat_template: bool = False,
) -> list[Example]:
    """The first ``num_samples`` rows, tokenized and truncated to ``max_length``."""
    rows = load_rows(source, limit=num_samples)
    if not rows:
        raise ValueError(f"dataset={source!r} has no rows")
    return [
        tokenize_row(row, tokenizer, prompt_field, response_field, max_length, use_chat_template)
        for row in rows
    ]


def _fingerprint(source: str, *parts: Any) -> str:
    resolved = resolve_source(source)
    path = Path(resolved).expanduser()
    identity = (
        f"{path.resolve()}:{path.stat().st_size}:{path.stat().st_mtime_ns}" if path.exists() else resolved
    )
    return hashlib.sha256(json.dumps([identity, *parts], default=str).encode()).hexdigest()[:20]


def token_lengths(
    source: str,
    tokenizer: Any,
    prompt_field: str = "prompt",
    response_field: str = "response",
    use_chat_template: bool = False,
    limit: int | None = None,
) -> list[int]:
    """Untruncated token length of every row, computed once and cached on disk."""
    name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
    key = _fingerprint(source, prompt_field, response_field, use_chat_template, limit, name, len(tokenizer))
    cache = tokenizer_cache_dir().parent / "lengths" / f"{key}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    rows = load_rows(source, limit=limit)
    lengths = [
        len(tokenize_row(r, tokenizer, prompt_field, response_field, None, use_chat_template)["input_ids"])
        for r in rows
    ]
    cache.parent.mkdir(parents=True, exist_ok=True)
    staging = cache.with_suffix(f".tmp{os.getpid()}")
    staging.write_text(json.dumps(lengths))
    staging.replace(cache)
    return lengths
