"""Kafka metadata columns: table columns filled from a record's key, headers,
topic, partition, offset or timestamp instead of its value.

A table column is mapped to a source (:func:`check_kafka_source` validates the
pairing when the job is configured): ``key`` (the whole key), ``key.<path>``
(a field of the key read as a JSON object), ``headers.<name>`` (the last
header of that name), ``topic``, ``partition``, ``offset``, ``timestamp``.
:func:`kafka_column` reads the values of one source for a batch of Kafka
rows; a per-record problem is a :class:`~ingest.tasks.record_errors.FieldError`,
and the record goes to the dead letters like any other bad value.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.changes import parse_json_key
from ingest.tasks.mapping import ColumnValues, describe, lookup
from ingest.tasks.record_errors import FieldError
from table.schema import Schema
from table.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

KEY = "key"
KEY_FIELD_PREFIX = "key."
HEADER_PREFIX = "headers."
_TYPED_SOURCES: dict[str, tuple[type, ...]] = {
    "topic": (StringType,),
    "partition": (IntegerType, LongType),
    "offset": (LongType,),
    "timestamp": (TimestamptzType, TimestampType),
}
_JSON_SCALARS = (BooleanType, IntegerType, LongType, FloatType, DoubleType)


KAFKA_SOURCES = "key, key.<path>, headers.<name>, topic, partition, offset or timestamp"
"""The sources a column may name, as messages list them."""


def is_kafka_source(source: str) -> bool:
    """Whether ``source`` names Kafka metadata; needs no schema, so a configuration checks it early."""
    named = any(source.startswith(p) and len(source) > len(p) for p in (KEY_FIELD_PREFIX, HEADER_PREFIX))
    return named or source == KEY or source in _TYPED_SOURCES


def kafka_source_problem(source: str, column: str, schema: Schema) -> str | None:
    """Why Kafka metadata ``source`` cannot fill top-level ``column``, or None when it can.

    The one statement of the rules: the job check (:func:`check_kafka_source`)
    and the service's configuration validation both use it, so a configuration
    that passes ``floe check`` does not fail at start-up.
    """
    if not is_kafka_source(source):
        return f"unknown Kafka metadata source {source!r} for column {column!r}; expected {KAFKA_SOURCES}"
    field = next((f for f in schema.fields if f.name == column), None)
    if field is None:
        return f"Kafka metadata column {column!r} is not a top-level column of the table"
    if source in _TYPED_SOURCES:
        allowed = _TYPED_SOURCES[source]
        if not isinstance(field.field_type, allowed):
            names = " or ".join(str(a()) for a in allowed)
            return f"column {column!r} is {field.field_type}; Kafka {source} needs {names}"
    elif not source.startswith(KEY_FIELD_PREFIX) and field.field_type.is_nested:  # a key field: any type
        return f"column {column!r} is {field.field_type}; {source} fills primitive columns only"
    return None


def check_kafka_source(source: str, column: str, schema: Schema) -> None:
    """Raise ValueError unless Kafka metadata ``source`` can fill top-level ``column``.

    Sources: ``key`` (the whole key), ``key.<path>`` (a field of the key read
    as a JSON object), ``headers.<name>`` (the last header of that name),
    ``topic``, ``partition``, ``offset``, ``timestamp``.
    """
    problem = kafka_source_problem(source, column, schema)
    if problem is not None:
        raise ValueError(problem)


def kafka_column(kafka: pa.RecordBatch, source: str, field: NestedField) -> tuple[ColumnValues, dict[int, FieldError]]:
    """Values of Kafka metadata ``source`` for ``field``, one per record, and per-record errors.

    Typed metadata (topic, partition, offset, timestamp) stays Arrow. Keys and
    headers are bytes: a binary or fixed column takes them as they are, other
    columns as UTF-8 text, which boolean and numeric columns read as JSON.
    """
    if source in _TYPED_SOURCES:
        column = kafka.column(source)
        return (utc_micros(column) if source == "timestamp" else column), {}
    if source.startswith(KEY_FIELD_PREFIX):
        return _key_field(kafka.column(KEY).to_pylist(), source[len(KEY_FIELD_PREFIX) :], field.name)
    raw = kafka.column(KEY).to_pylist() if source == KEY else header_values(kafka, source[len(HEADER_PREFIX) :])
    what = "Kafka key" if source == KEY else f"header {source[len(HEADER_PREFIX) :]!r}"
    return _interpret_bytes(raw, field, what)


def header_values(kafka: pa.RecordBatch, name: str) -> list[bytes | None]:
    """The value of the last header called ``name`` of each record (None: absent)."""
    values: list[bytes | None] = [None] * kafka.num_rows
    if kafka.schema.get_field_index("headers") < 0:
        return values
    headers = kafka.column("headers")
    entries = headers.flatten()
    matches = pc.indices_nonzero(pc.fill_null(pc.equal(entries.field("key"), name), False))
    if len(matches) == 0:
        return values
    owners = pc.take(pc.list_parent_indices(headers), matches).to_pylist()
    found = pc.take(entries.field("value"), matches).to_pylist()
    for owner, value in zip(owners, found):
        values[owner] = value  # in header order, so the last one wins
    return values


def _interpret_bytes(raw: list[bytes | None], field: NestedField, what: str) -> tuple[list[Any], dict[int, FieldError]]:
    if isinstance(field.field_type, (BinaryType, FixedType)):
        return raw, {}
    errors: dict[int, FieldError] = {}
    values: list[Any] = [None] * len(raw)
    as_json = isinstance(field.field_type, _JSON_SCALARS)
    for i, data in enumerate(raw):
        if data is None:
            continue
        try:
            text = data.decode("utf-8")
            values[i] = json.loads(text) if as_json else text
        except UnicodeDecodeError:
            errors[i] = FieldError(f"{what} is not valid UTF-8", field.name)
        except ValueError as exc:  # json.JSONDecodeError
            errors[i] = FieldError(f"{what} is {describe(text)}, not a JSON {field.field_type}: {exc}", field.name)
    return values, errors


def _key_field(keys: list[bytes | None], path: str, column: str) -> tuple[list[Any], dict[int, FieldError]]:
    """Field ``path`` of each key, read as deletes read keys (:func:`~ingest.tasks.changes.parse_json_key`)."""
    errors: dict[int, FieldError] = {}
    values: list[Any] = [None] * len(keys)
    for i, data in enumerate(keys):
        if data is None:
            continue
        try:
            obj = parse_json_key(data)
        except ValueError as exc:  # also covers invalid UTF-8
            errors[i] = FieldError(f"Kafka key is not JSON: {exc}", column)
            continue
        values[i] = lookup(obj, path)
    return values, errors


def utc_micros(timestamps: pa.Array) -> pa.Array:
    """Kafka timestamps as ``timestamp[us, UTC]``; zone-less ones are taken as UTC."""
    if timestamps.type.tz is None:
        timestamps = pc.cast(pc.cast(timestamps, pa.int64()), pa.timestamp(timestamps.type.unit, "UTC"))
    return pc.cast(timestamps, pa.timestamp("us", "UTC"))
