"""Dataset formats (one table): detect a row's format and turn any row into chat messages.

Every format becomes a list of ``{"role", "content"}`` messages; the loss is on every ``assistant``
message (the role ``text`` is the whole row, learned as a whole). Adding a format is one entry in
``DATA_FORMATS`` plus its own ``detect`` and ``convert``.

| format | a row looks like |
|---|---|
| prompt_response | ``{PROMPT_FIELD: ..., RESPONSE_FIELD: ...}``; several prompt fields joined ("instruction,input") |
| alpaca | ``{"instruction": ..., "input": ..., "output": ...}`` (instruction and input joined) |
| messages | ``{"messages": [{"role": "user", "content": ...}, {"role": "assistant", ...}, ...]}`` |
| sharegpt | ``{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}, ...]}`` |
| prompt_completion | TRL's ``{"prompt": ..., "completion": ...}`` (text, or lists of messages) |
| text | TRL's ``{"text": ...}``: language modelling, every token learned |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, str]
AUTO = "auto"
DEFAULT_PROMPT_FIELD = "prompt"
DEFAULT_RESPONSE_FIELD = "response"
SHAREGPT_ROLES = {
    "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
    "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "system": "system", "tool": "tool",
    "function": "tool", "observation": "tool", "function_call": "assistant",
}  # fmt: skip
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")


class DataError(ValueError):
    """A dataset row that cannot be used, named by source, row (the first is 1) and field."""


@dataclass(frozen=True)
class Fields:
    """The field names and template a row is read with."""

    prompt_field: str = DEFAULT_PROMPT_FIELD  # one field, or several joined: "instruction,input"
    response_field: str = DEFAULT_RESPONSE_FIELD
    prompt_template: str = ""  # e.g. "{instruction}\n\nInput: {input}"; "" = non-empty fields joined by a blank line

    @property
    def prompt_fields(self) -> list[str]:
        return [f.strip() for f in self.prompt_field.split(",") if f.strip()]


@dataclass(frozen=True)
class Where:
    """Where a row came from, for error messages."""

    source: str = ""
    row: int = 1

    def error(self, field: str, problem: str) -> DataError:
        return DataError(f"dataset {self.source!r} row {self.row}, field {field!r}: {problem}")


def text_of(row: Mapping[str, Any], field: str, where: Where, required: bool = True) -> str:
    """The string in ``row[field]``; a list, dict, number or null is an error naming field and row."""
    if field not in row:
        if not required:
            return ""
        raise where.error(field, f"missing; the row's fields are {sorted(row)}")
    value = row[field]
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        kind = "null" if value is None else type(value).__name__
        raise where.error(field, f"holds {kind}, not text (a text field must be a string)")
    return value


def _join_prompt(row: Mapping[str, Any], fields: Sequence[str], template: str, where: Where) -> str:
    values = {f: text_of(row, f, where, required=i == 0) for i, f in enumerate(fields)}
    if template:
        try:
            return template.format(**values)
        except (KeyError, IndexError, ValueError) as error:
            raise DataError(
                f"prompt_template={template!r} cannot be filled from fields {list(values)} ({error!r}); "
                "name each field in braces, e.g. '{instruction}\\n\\n{input}'"
            ) from None
    return "\n\n".join(v for v in values.values() if v.strip())


def _chat(
    turns: Any, field: str, role_key: str, text_key: str, roles: Mapping[str, str], where: Where
) -> list[Message]:
    if not isinstance(turns, list) or not turns:
        raise where.error(field, f"must be a non-empty list of {{{role_key!r}, {text_key!r}}} objects")
    messages = []
    for number, turn in enumerate(turns, start=1):
        here = f"{field}[{number}]"
        if not isinstance(turn, Mapping) or role_key not in turn:
            raise where.error(here, f"must be an object with {role_key!r} and {text_key!r}")
        role = roles.get(str(turn[role_key]).lower())
        if role is None:
            raise where.error(f"{here}.{role_key}", f"role {turn[role_key]!r} is not one of {sorted(roles)}")
        messages.append({"role": role, "content": text_of(turn, text_key, Where(where.source, where.row))})
    if not any(m["role"] == "assistant" for m in messages):
        raise where.error(field, "has no assistant turn: nothing to learn")
    return messages


def _detect_prompt_response(row: Mapping[str, Any], fields: Fields) -> bool:
    return bool(fields.prompt_fields) and fields.prompt_fields[0] in row and fields.response_field in row


def _convert_prompt_response(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    prompt = _join_prompt(row, fields.prompt_fields, fields.prompt_template, where)
    response = text_of(row, fields.response_field, where)
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]


def _convert_alpaca(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    prompt = _join_prompt(row, ["instruction", "input"], fields.prompt_template, where)
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": text_of(row, "output", where)}]


def _is_chat_list(value: Any, role_key: str) -> bool:
    return isinstance(value, list) and bool(value) and isinstance(value[0], Mapping) and role_key in value[0]


def _convert_messages(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    return _chat(row.get("messages"), "messages", "role", "content", {r: r for r in CHAT_ROLES}, where)


def _convert_sharegpt(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    return _chat(row.get("conversations"), "conversations", "from", "value", SHAREGPT_ROLES, where)


def _convert_prompt_completion(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    roles = {r: r for r in CHAT_ROLES}
    prompt: list[Message]
    if isinstance(row.get("prompt"), list):  # TRL's conversational prompt-completion
        prompt = _chat(
            row["prompt"] + [{"role": "assistant", "content": ""}], "prompt", "role", "content", roles, where
        )
        prompt = prompt[:-1]
    else:
        prompt = [{"role": "user", "content": text_of(row, "prompt", where)}]
    if isinstance(row.get("completion"), list):
        completion = _chat(row["completion"], "completion", "role", "content", roles, where)
    else:
        completion = [{"role": "assistant", "content": text_of(row, "completion", where)}]
    return prompt + completion


def _convert_text(row: Mapping[str, Any], fields: Fields, where: Where) -> list[Message]:
    return [{"role": "text", "content": text_of(row, "text", where)}]


DEFAULT_FIELDS = Fields()
NO_WHERE = Where()


@dataclass(frozen=True)
class DataFormat:
    """One row layout: how to recognise it and how to turn a row into messages."""

    name: str
    looks_like: str  # what a row holds, for messages
    detect: Callable[[Mapping[str, Any], Fields], bool]
    convert: Callable[[Mapping[str, Any], Fields, Where], list[Message]]


DATA_FORMATS: dict[str, DataFormat] = {
    f.name: f
    for f in (
        DataFormat("prompt_response", "PROMPT_FIELD and RESPONSE_FIELD",
                   _detect_prompt_response, _convert_prompt_response),
        DataFormat("messages", "'messages': [{role, content}, ...]",
                   lambda r, f: _is_chat_list(r.get("messages"), "role"), _convert_messages),
        DataFormat("sharegpt", "'conversations': [{from, value}, ...]",
                   lambda r, f: _is_chat_list(r.get("conversations"), "from"), _convert_sharegpt),
        DataFormat("alpaca", "'instruction', optional 'input', 'output'",
                   lambda r, f: "instruction" in r and "output" in r, _convert_alpaca),
        DataFormat("prompt_completion", "'prompt' and 'completion' (TRL)",
                   lambda r, f: "prompt" in r and "completion" in r, _convert_prompt_completion),
        DataFormat("text", "'text' (TRL language modelling)", lambda r, f: "text" in r, _convert_text),
    )
}  # fmt: skip
FORMAT_NAMES = (AUTO, *DATA_FORMATS)


def detect_format(row: Mapping[str, Any], fields: Fields = DEFAULT_FIELDS, source: str = "") -> DataFormat:
    """The first format of the table that fits ``row``; an error listing the row's fields and the formats.

    Field names given explicitly (not the defaults "prompt"/"response") must be in the row.
    """
    if not isinstance(row, Mapping):
        raise DataError(f"dataset {source!r} row 1 is {type(row).__name__}, not an object with fields")
    custom = (fields.prompt_field, fields.response_field) != (DEFAULT_PROMPT_FIELD, DEFAULT_RESPONSE_FIELD)
    if custom and not _detect_prompt_response(row, fields):
        missing = [f for f in (fields.prompt_fields[:1] + [fields.response_field]) if f not in row]
        raise DataError(
            f"dataset {source!r}: prompt_field={fields.prompt_field!r} / response_field={fields.response_field!r}: "
            f"{', '.join(repr(m) for m in missing)} not in the first row; its fields are {sorted(row)}"
        )
    if (fields.prompt_field, fields.response_field) == ("instruction", "output") and "input" in row:
        return DATA_FORMATS["alpaca"]  # Alpaca named by its fields: keep its input, joined to the instruction
    for data_format in DATA_FORMATS.values():
        if data_format.detect(row, fields):
            return data_format
    known = "; ".join(f"{f.name}: {f.looks_like}" for f in DATA_FORMATS.values())
    raise DataError(
        f"dataset {source!r}: no known format fits the first row: its fields are {sorted(row)}, without "
        f"prompt_field={fields.prompt_field!r} and response_field={fields.response_field!r}; set PROMPT_FIELD and "
        f"RESPONSE_FIELD to its fields, or DATA_FORMAT to one of: {known}"
    )


def resolve_format(name: str, row: Mapping[str, Any], fields: Fields = DEFAULT_FIELDS, source: str = "") -> DataFormat:
    """``name`` from the table, or the detected format when ``name`` is "auto"."""
    if name == AUTO:
        return detect_format(row, fields, source)
    if name not in DATA_FORMATS:
        raise DataError(f"data_format={name!r} is not allowed: data_format must be one of {FORMAT_NAMES}")
    return DATA_FORMATS[name]


def to_messages(
    row: Any, data_format: DataFormat, fields: Fields = DEFAULT_FIELDS, where: Where = NO_WHERE
) -> list[Message]:
    """``row`` as messages in ``data_format``; a row that does not fit names its source, number and field."""
    if not isinstance(row, Mapping):
        raise DataError(f"dataset {where.source!r} row {where.row} is {type(row).__name__}, not an object")
    messages = data_format.convert(row, fields, where)
    learned = [m["content"] for m in messages if m["role"] in ("assistant", "text")]
    if not any(text.strip() for text in learned):  # else the loss falls on the end-of-turn token alone
        raise DataError(
            f"dataset {where.source!r} row {where.row}: the text to learn is empty (format {data_format.name!r}): "
            "nothing to train on; drop the row or fill its response"
        )
    return messages


def describe(data_format: DataFormat, detected: bool) -> str:
    """One line for a notebook: which format is used and how to override it."""
    how = "detected" if detected else "set by DATA_FORMAT"
    return f"data format {data_format.name!r} ({how}): rows hold {data_format.looks_like}; set DATA_FORMAT to override"
