"""ingest.tasks.kafka_columns: a record's key, headers, topic, partition, offset and timestamp as table columns."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from ingest.tasks.changes import ChangeSpec, key_row
from ingest.tasks.kafka_columns import check_kafka_source, header_values, kafka_column, utc_micros
from ingest.tasks.mapping import map_rows
from table.schema import Schema
from table.types import (
    BinaryType,
    DecimalType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def kafka_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([b'{"id": 7, "tenant": {"name": "acme"}}', b"plain", None, b"\xff"], pa.binary()),
            "value": pa.array([b"{}"] * 4, pa.binary()),
            "topic": pa.array(["orders"] * 4),
            "partition": pa.array([3] * 4, pa.int32()),
            "offset": pa.array([10, 11, 12, 13], pa.int64()),
            "timestamp": pa.array([1_000] * 4, pa.timestamp("ms")),
            "headers": pa.array(
                [
                    [{"key": "n", "value": b"1"}, {"key": "n", "value": b"2"}],
                    [{"key": "other", "value": b"x"}],
                    None,
                    [{"key": "n", "value": b"oops"}, {"key": "z", "value": None}],
                ],
                HEADERS,
            ),
        }
    )


def test_header_values_take_the_last_of_a_name_and_survive_slicing() -> None:
    batch = kafka_batch()
    assert header_values(batch, "n") == [b"2", None, None, b"oops"]
    assert header_values(batch.slice(1), "n") == [None, None, b"oops"]
    assert header_values(batch.drop_columns(["headers"]), "n") == [None] * 4


def test_key_and_headers_follow_the_column_type() -> None:
    batch = kafka_batch()
    as_bytes, errors = kafka_column(batch, "key", NestedField(1, "k", BinaryType()))
    assert as_bytes[1] == b"plain" and errors == {}
    as_text, errors = kafka_column(batch, "key", NestedField(1, "k", StringType()))
    assert as_text[:3] == ['{"id": 7, "tenant": {"name": "acme"}}', "plain", None]
    assert errors[3].field == "k" and "not valid UTF-8" in errors[3].reason
    as_long, errors = kafka_column(batch, "headers.n", NestedField(1, "n", LongType()))
    assert as_long[:3] == [2, None, None]
    assert errors[3].reason.startswith('header \'n\' is string "oops", not a JSON long: Expecting value')
    field, errors = kafka_column(batch, "key.tenant.name", NestedField(1, "t", StringType()))
    assert field[0] == "acme" and field[2] is None
    assert "Kafka key is not JSON" in errors[1].reason


def test_a_header_value_that_is_not_json_is_shown_clipped() -> None:
    batch = kafka_batch().slice(3, 1).drop_columns(["headers"])
    batch = batch.append_column("headers", pa.array([[{"key": "n", "value": b"x" * 100}]], HEADERS))
    _, errors = kafka_column(batch, "headers.n", NestedField(1, "n", LongType()))
    assert f'is string "{"x" * 40}...", not a JSON long' in errors[0].reason


def test_a_key_field_is_read_as_deletes_read_keys_connect_wrapper_and_exact_decimals() -> None:
    wrapped = b'{"schema": {"type": "struct"}, "payload": {"id": 7, "price": 0.1}}'
    batch = pa.RecordBatch.from_pydict({"key": pa.array([wrapped, b'{"price": 12345678901234567.89}'], pa.binary())})
    ids, errors = kafka_column(batch, "key.id", NestedField(1, "id", LongType()))
    assert ids == [7, None] and errors == {}
    prices, errors = kafka_column(batch, "key.price", NestedField(2, "price", DecimalType(19, 2)))
    assert prices == [Decimal("0.1"), Decimal("12345678901234567.89")] and errors == {}
    spec = ChangeSpec("upsert", key_fields=("price",))
    assert prices == [key_row(k, spec)["price"] for k in batch.column("key").to_pylist()]


def test_metadata_columns_land_through_map_rows() -> None:
    schema = Schema(
        NestedField(1, "topic", StringType(), True),
        NestedField(2, "part", IntegerType()),
        NestedField(3, "off", LongType()),
        NestedField(4, "at", TimestamptzType()),
        NestedField(5, "id", LongType()),
    )
    batch = kafka_batch().slice(0, 1)
    sources = {"topic": "topic", "part": "partition", "off": "offset", "at": "timestamp", "id": "key.id"}
    columns = {c: kafka_column(batch, s, schema.find_field(c))[0] for c, s in sources.items()}
    mapped = map_rows([{"id": 999}], schema, columns=columns)
    assert mapped.errors == {}
    row = mapped.batch.to_pylist()[0]
    assert row == {"topic": "orders", "part": 3, "off": 10, "at": dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=row["at"].tzinfo), "id": 7}


def test_a_required_metadata_column_that_is_null_fails_the_record() -> None:
    schema = Schema(NestedField(1, "k", BinaryType(), True))
    values, _ = kafka_column(kafka_batch(), "key", schema.find_field("k"))
    mapped = map_rows([{}] * 4, schema, columns={"k": values})
    assert {i: str(e) for i, e in mapped.errors.items()} == {2: "field 'k': required field is null"}


def test_utc_micros_accepts_zoned_and_zoneless_timestamps() -> None:
    naive = pa.array([1_500], pa.timestamp("ms"))
    zoned = pa.array([1_500_000], pa.timestamp("us", "Europe/Paris"))
    for array in (naive, zoned):
        result = utc_micros(array)
        assert result.type == pa.timestamp("us", "UTC")
        assert result.cast(pa.int64()).to_pylist() == [1_500_000]


@pytest.mark.parametrize(
    "source, t, message",
    [
        ("topic", LongType(), "Kafka topic needs string"),
        ("partition", StringType(), "Kafka partition needs int or long"),
        ("offset", IntegerType(), "Kafka offset needs long"),
        ("timestamp", LongType(), "Kafka timestamp needs timestamptz or timestamp"),
        ("key", StructType(NestedField(9, "a", LongType())), "fills primitive columns only"),
        ("headers.x", ListType(9, LongType()), "fills primitive columns only"),
        ("headers.", StringType(), "unknown Kafka metadata source"),
        ("value", StringType(), "unknown Kafka metadata source"),
    ],
)
def test_check_kafka_source_refuses_bad_mappings(source: str, t: IcebergType, message: str) -> None:
    schema = Schema(NestedField(1, "c", t))
    with pytest.raises(ValueError, match=message):
        check_kafka_source(source, "c", schema)


def test_check_kafka_source_needs_a_top_level_column() -> None:
    with pytest.raises(ValueError, match="not a top-level column"):
        check_kafka_source("topic", "nope", Schema(NestedField(1, "c", StringType())))
    check_kafka_source("key.a.b", "c", Schema(NestedField(1, "c", StructType(NestedField(2, "x", LongType())))))
