"""Property-based tests (Hypothesis) of what parses user input: RunConfig, grid values and CLI parameters, data rows
of every format. Each generated value ends in a valid result or in the project's own clear error (ConfigError
naming the parameter, ValueError saying what the form is, DataError naming the row), never in a traceback from
deeper down."""

from __future__ import annotations

import dataclasses
import math

import pytest

hypothesis = pytest.importorskip("hypothesis", reason="the property-based tests need hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nbhelpers.cli import _parse_params  # noqa: E402
from nbhelpers.data.formats import DATA_FORMATS, DataError, Fields, detect_format, to_messages  # noqa: E402
from nbhelpers.data.strategies import PADDING_STRATEGIES  # noqa: E402
from nbhelpers.kernels.attention import ATTENTION_IMPLEMENTATIONS  # noqa: E402
from nbhelpers.kernels.registry import KERNEL_BACKENDS  # noqa: E402
from nbhelpers.measure.config import (  # noqa: E402
    DTYPES,
    LORA_INPUT_CASTS,
    TIMINGS,
    RunConfig,  # noqa: E402
)
from nbhelpers.models.checkpointing import CHECKPOINTING_NAMES  # noqa: E402
from nbhelpers.planning.sweep_grid import parse_grid  # noqa: E402
from nbhelpers.validation import ConfigError  # noqa: E402

FIELDS = [f.name for f in dataclasses.fields(RunConfig)]
PROPERTIES = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
)  # fmt: skip
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=3), max_leaves=6)
# Values a user would plausibly type: in-range numbers and every table's names (most make a valid RunConfig).
CHOICES = [*PADDING_STRATEGIES, *ATTENTION_IMPLEMENTATIONS, *KERNEL_BACKENDS, *DTYPES, *TIMINGS, *CHECKPOINTING_NAMES,
           *LORA_INPUT_CASTS, "lora", "none", "cpu", "auto", "all-linear", "q_proj,v_proj", "qwen3-tiny"]  # fmt: skip
plausible = st.one_of(st.integers(0, 5000), st.sampled_from(CHOICES), st.floats(1e-6, 0.5), st.booleans())
values = st.one_of(junk, plausible)


@PROPERTIES
@given(field=st.sampled_from(FIELDS), value=values)
def test_any_value_of_any_run_config_field_is_accepted_or_named(field, value):
    try:
        config = RunConfig(**{field: value})
    except ConfigError as error:
        assert error.parameter, error  # names a parameter (the field, or the one the value conflicts with)
        assert error.parameter in FIELDS, error.parameter
        return
    again = RunConfig.from_dict(config.to_dict())
    assert again == config


@PROPERTIES
@given(items=st.lists(st.text(alphabet="abz_09=,[]. -", max_size=20), max_size=4))
def test_grid_text_parses_or_says_what_form_it_needs(items):
    try:
        grid = parse_grid(items)
    except ValueError as error:  # ConfigError is one too
        assert str(error)
        return
    assert all(isinstance(key, str) and key and values for key, values in grid.items())


@PROPERTIES
@given(name=st.from_regex(r"[a-z_]{1,10}", fullmatch=True), numbers=st.lists(st.integers(-999, 999), min_size=1,
                                                                              max_size=4))
def test_a_grid_of_numbers_round_trips(name, numbers):
    assert parse_grid([f"{name}={','.join(map(str, numbers))}"]) == {name: numbers}


@PROPERTIES
@given(items=st.lists(st.text(max_size=20), max_size=4))
def test_cli_parameters_parse_or_say_their_form(items):
    try:
        params = _parse_params(items)
    except ValueError as error:
        assert "NAME=VALUE" in str(error) or "grid values" in str(error)
        return
    assert all(isinstance(key, str) and key.strip() == key and key for key in params)


row_values = st.one_of(
    st.text(max_size=30), st.none(), st.integers(), st.floats(allow_nan=True), st.booleans(),
    st.lists(st.one_of(st.text(max_size=10), st.dictionaries(st.sampled_from(["role", "content", "from", "value"]),
                                                             st.one_of(st.text(max_size=10), st.none()), max_size=2)),
             max_size=3),
)  # fmt: skip
known_keys = ["prompt", "response", "messages", "conversations", "instruction", "input", "output", "completion",
              "text", "role", "content"]  # fmt: skip
junk_rows = st.dictionaries(st.one_of(st.sampled_from(known_keys), st.text(max_size=6)), row_values, max_size=4)
words = st.text(max_size=20)
turn = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]), "content": words})
shaped_rows = st.one_of(  # the six formats' shapes, with any text (empty or blank included) in their fields
    st.fixed_dictionaries({"prompt": words, "response": words}),
    st.fixed_dictionaries({"prompt": words, "completion": words}),
    st.fixed_dictionaries({"instruction": words, "input": words, "output": words}),
    st.fixed_dictionaries({"messages": st.lists(turn, max_size=4)}),
    st.fixed_dictionaries({"conversations": st.lists(st.fixed_dictionaries(
        {"from": st.sampled_from(["human", "gpt", "system"]), "value": words}), max_size=4)}),
    st.fixed_dictionaries({"text": words}),
)  # fmt: skip
rows = st.one_of(junk_rows, shaped_rows)


@PROPERTIES
@given(row=rows, name=st.sampled_from(["auto", *DATA_FORMATS]))
def test_any_data_row_in_any_format_becomes_messages_or_a_named_error(row, name):
    fields = Fields()
    try:
        data_format = detect_format(row, fields, "rows.jsonl") if name == "auto" else DATA_FORMATS[name]
        messages = to_messages(row, data_format, fields)
    except DataError as error:
        assert "rows.jsonl" in str(error) or "dataset" in str(error), error
        return
    assert messages and all(isinstance(m["content"], str) for m in messages)
    learned = [m["content"] for m in messages if m["role"] in ("assistant", "text")]
    assert any(text.strip() for text in learned)


def test_the_float_fields_refuse_nan():
    assert math.isnan(float("nan"))
    with pytest.raises(ConfigError, match="learning_rate"):
        RunConfig(learning_rate=float("nan"))
