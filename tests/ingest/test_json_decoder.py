"""ingest.tasks.decoding.json_decoder: one JSON object per Kafka value."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.tasks.decoding import JsonDecoder, JsonFormat, decoder_for
from ingest.tasks.mapping import map_rows
from ingest.tasks.record_errors import DecodeError
from table.schema import Schema
from table.types import DecimalType, DoubleType, ListType, LongType, NestedField, StringType, StructType


def test_decodes_an_object() -> None:
    value = JsonDecoder().decode(b'{"id": 1, "name": "caf\xc3\xa9", "tags": ["a"], "n": null, "x": 1.5}')
    assert value == {"id": 1, "name": "café", "tags": ["a"], "n": None, "x": 1.5}
    assert type(value["x"]) is float


def test_exact_decimals_keep_every_digit() -> None:
    value = JsonDecoder(exact_decimals=True).decode(b'{"amount": 12345678901234567890.123456789, "n": 3}')
    assert value == {"amount": Decimal("12345678901234567890.123456789"), "n": 3}
    assert type(value["n"]) is int


def test_exact_decimals_reach_a_decimal_column_unrounded() -> None:
    schema = Schema(NestedField(1, "amount", DecimalType(38, 9)), NestedField(2, "x", DoubleType()))
    row = JsonDecoder(exact_decimals=True).decode(b'{"amount": 12345678901234567890.123456789, "x": 0.1}')
    batch = map_rows([row], schema).batch
    assert batch.column("amount")[0].as_py() == Decimal("12345678901234567890.123456789")
    assert batch.column("x")[0].as_py() == 0.1


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"{bad", "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (b"", "invalid JSON: Expecting value: line 1 column 1 (char 0)"),
        (b'{"a": 1} {"b": 2}', "invalid JSON: Extra data: line 1 column 10 (char 9)"),
        (b'{"a": NaN}', "invalid JSON: NaN is not valid JSON"),
        (b'{"a": -Infinity}', "invalid JSON: -Infinity is not valid JSON"),
        (b'{"a": "\xff"}', "invalid JSON: not UTF-8 (invalid start byte at byte 7)"),
        (b"[1, 2]", "expected a JSON object, got an array"),
        (b'"text"', "expected a JSON object, got a string"),
        (b"42", "expected a JSON object, got a number"),
        (b"true", "expected a JSON object, got a boolean"),
        (b"null", "expected a JSON object, got null"),
        (b"[" * 100_000, "invalid JSON: nested too deeply"),
    ],
)
def test_bad_payloads_raise_decode_errors(payload: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        JsonDecoder().decode(payload)
    assert info.value.reason == reason
    assert info.value.field is None


def test_whitespace_and_newlines_inside_a_value_are_fine() -> None:
    assert JsonDecoder().decode(b'\n{\n  "a": "x\\ny"\n}\n') == {"a": "x\ny"}


def test_duplicate_keys_keep_the_last_value() -> None:
    assert JsonDecoder().decode(b'{"a": 1, "a": 2}') == {"a": 2}


def test_decoder_for_parses_decimals_exactly_only_when_the_table_has_some() -> None:
    plain = Schema(NestedField(1, "x", DoubleType()), NestedField(2, "s", StringType()))
    nested = Schema(
        NestedField(1, "items", ListType(2, StructType(NestedField(3, "price", DecimalType(9, 2))))),
        NestedField(4, "id", LongType()),
    )
    assert decoder_for(JsonFormat(), plain).exact_decimals is False  # type: ignore[attr-defined]
    assert decoder_for(JsonFormat(), nested).exact_decimals is True  # type: ignore[attr-defined]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6), st.booleans())
def test_any_json_object_round_trips(obj: dict[str, Any], ensure_ascii: bool) -> None:
    payload = json.dumps(obj, ensure_ascii=ensure_ascii).encode("utf-8")
    assert JsonDecoder().decode(payload) == obj


@given(st.decimals(allow_nan=False, allow_infinity=False, places=6))
def test_exact_decimal_parse_is_lossless(value: Decimal) -> None:
    decoded = JsonDecoder(exact_decimals=True).decode(f'{{"v": {value:f}}}'.encode())
    assert decoded["v"] == value


@pytest.mark.parametrize(
    "payload",
    [
        b'{"a": 18446744073709551616}',  # beyond 64 bits: orjson alone gives a float
        b'{"a": -9223372036854775809}',
        b'{"a": 18446744073709551615, "b": -9223372036854775808}',
        b'{"a": 1e400}',  # json: infinity; orjson refuses
        b'{"a": "\\ud800"}',  # a lone surrogate: json keeps it; orjson refuses
        b'\xef\xbb\xbf{"a": 1}',  # a byte order mark
        b'{"a": "x\ty"}',  # a raw control character
        b'{"a": -0.0, "b": -0, "c": 1E5, "d": 0.1}',
        b'{"a": 1, "a": 2}',
        b'{"n": "1234567890123456789012"}',  # a long digit run inside a string
        b"[" * 2000 + b"]" * 2000,
        b'{"a": ' + b"[" * 1500 + b"]" * 1500 + b"}",
    ],
)
def test_the_fast_parser_gives_exactly_what_json_gives(payload: bytes) -> None:
    assert _outcome(JsonDecoder().decode, payload) == _outcome(JsonDecoder()._decode_exactly, payload)


def test_an_integer_beyond_64_bits_stays_an_integer() -> None:
    value = JsonDecoder().decode(b'{"a": 18446744073709551616, "b": -9223372036854775809}')
    assert value == {"a": 18446744073709551616, "b": -9223372036854775809}
    assert type(value["a"]) is int and type(value["b"]) is int


number_literals = st.from_regex(r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?", fullmatch=True)


@given(st.lists(number_literals | st.text(max_size=6).map(json.dumps), max_size=6))
def test_fast_and_exact_parses_agree_on_numbers_and_strings(literals: list[str]) -> None:
    payload = ("{" + ", ".join(f'"f{i}": {v}' for i, v in enumerate(literals)) + "}").encode("utf-8")
    assert _outcome(JsonDecoder().decode, payload) == _outcome(JsonDecoder()._decode_exactly, payload)


def _outcome(decode: Any, payload: bytes) -> Any:
    """The value with each number's type, or the refusal's message."""
    try:
        return _typed(decode(payload))
    except DecodeError as exc:
        return ("refused", exc.reason)


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))
