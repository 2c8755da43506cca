"""ingest.tasks.decode_records: the per-batch entry point, and the dead letters it produces."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import time
from decimal import Decimal
from typing import Any, Optional

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.tasks.changes import OpField
from ingest.tasks.dead_letters import (
    DEAD_LETTER_SCHEMA,
    DeadLetterDeliveryError,
    DeadLetterSink,
    build_dead_letters,
)
from ingest.tasks.decode_records import INTERNAL_FIELDS, DecodedRecords, DecodeSpec, decode_records
from ingest.tasks.record_errors import FieldError
from table.arrow_schema import schema_to_arrow
from table.schema import Schema
from table.types import (
    BinaryType,
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)
from tests.ingest.test_e2e_debezium import (
    ANNE,
    ANNE_2,
    BOB,
    CARLA,
    CARLA_30,
    CUSTOMERS,
    DAN,
    DAN_2,
    EVE,
    TRUNCATE_ERROR,
    Debezium,
    customers_history,
    table_row,
)

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)

ORDERS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "amount", DecimalType(10, 2)),
    NestedField(3, "at", TimestamptzType()),
    NestedField(4, "lines", ListType(5, StructType(NestedField(6, "sku", StringType(), required=True)))),
    identifier_field_ids=[1],
)


def kafka_batch(
    values: list[Optional[bytes]],
    keys: Optional[list[Optional[bytes]]] = None,
    headers: Optional[list[Any]] = None,
    partition: int = 4,
    first_offset: int = 100,
) -> pa.RecordBatch:
    """Rows shaped like Spark's Kafka source with includeHeaders=true."""
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array(keys or [None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["orders"] * n),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(first_offset, first_offset + n), pa.int64()),
            "timestamp": pa.array([T0 + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("us", "Europe/Paris")),
            "timestampType": pa.array([0] * n, pa.int32()),
            "headers": pa.array(headers or [[]] * n, HEADERS),
        }
    )


def js(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def assert_accounted(out: DecodedRecords, batch: pa.RecordBatch) -> None:
    """Every input row is in exactly one output."""
    assert out.rows.num_rows + out.dead_letters.num_rows == batch.num_rows
    seen = out.rows.column("_floe_offset").to_pylist() + out.dead_letters.column("source_offset").to_pylist()
    assert sorted(seen) == batch.column("offset").to_pylist()


# ---------------------------------------------------------------------------
# Mixed good and bad records
# ---------------------------------------------------------------------------


def test_mixed_batch_counts_add_up_and_each_bad_record_carries_its_reason() -> None:
    values = [
        js({"id": 1, "amount": "12.30", "at": "2024-05-01T10:00:00Z", "lines": [{"sku": "a"}]}),
        b"{not json",
        js({"id": 2, "amount": "abc"}),
        js({"amount": "1.00"}),
        js({"id": 3, "lines": [{"sku": None}]}),
        js([1, 2]),
        None,
        js({"id": 4, "at": 1714557600000, "extra": "ignored"}),
    ]
    batch = kafka_batch(values, headers=[[{"key": "trace", "value": b"t-1"}]] * len(values))
    out = decode_records(batch, DecodeSpec(ORDERS))
    assert_accounted(out, batch)
    assert out.rows.column("id").to_pylist() == [1, 4]
    assert out.rows.column("amount").to_pylist() == [Decimal("12.30"), None]
    letters = {d["source_offset"]: d for d in out.dead_letters.to_pylist()}
    assert {o: (d["error_class"], d["error_field"], d["error_message"]) for o, d in letters.items()} == {
        101: ("DecodeError", None, "invalid JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        102: ("FieldError", "amount", """field 'amount': expected decimal(10,2), got string "abc\""""),
        103: ("FieldError", "id", "field 'id': required field is missing"),
        104: ("FieldError", "lines.element.sku", "field 'lines.element.sku': required field is null"),
        105: ("DecodeError", None, "expected a JSON object, got an array"),
        106: ("ChangeError", None, "a tombstone (null value) cannot be appended"),
    }


def test_dead_letters_keep_the_original_record_and_add_floe_headers() -> None:
    batch = kafka_batch([js({"id": "x"})], keys=[b"k-1"], headers=[[{"key": "trace", "value": b"t-1"}]], partition=7)
    letter = decode_records(batch, DecodeSpec(ORDERS)).dead_letters.to_pylist()[0]
    assert letter["key"] == b"k-1"
    assert letter["value"] == js({"id": "x"})
    assert letter["headers"] == [
        {"key": "trace", "value": b"t-1"},
        {"key": "floe.source.topic", "value": b"orders"},
        {"key": "floe.source.partition", "value": b"7"},
        {"key": "floe.source.offset", "value": b"100"},
        {"key": "floe.error.class", "value": b"FieldError"},
        {"key": "floe.error.message", "value": b"""field 'id': expected long, got string "x\""""},
        {"key": "floe.error.field", "value": b"id"},
    ]
    assert (letter["source_topic"], letter["source_partition"], letter["source_offset"]) == ("orders", 7, 100)


def test_rows_follow_the_table_schema_plus_floe_columns() -> None:
    batch = kafka_batch([js({"id": 1}), js({"id": "bad"}), js({"id": 2})], partition=9, first_offset=40)
    out = decode_records(batch, DecodeSpec(ORDERS))
    assert out.rows.schema == pa.schema(list(schema_to_arrow(ORDERS)) + list(INTERNAL_FIELDS))
    assert out.dead_letters.schema == DEAD_LETTER_SCHEMA
    assert out.rows.select(["_floe_op", "_floe_partition", "_floe_offset", "_floe_kafka_ts"]).to_pylist() == [
        {"_floe_op": 0, "_floe_partition": 9, "_floe_offset": 40, "_floe_kafka_ts": T0},
        {"_floe_op": 0, "_floe_partition": 9, "_floe_offset": 42, "_floe_kafka_ts": T0 + dt.timedelta(seconds=2)},
    ]
    assert str(out.rows.schema.field("_floe_kafka_ts").type) == "timestamp[us, tz=UTC]"


def test_empty_batch() -> None:
    out = decode_records(kafka_batch([]), DecodeSpec(ORDERS))
    assert out.rows.num_rows == 0 and out.dead_letters.num_rows == 0
    assert out.rows.schema == pa.schema(list(schema_to_arrow(ORDERS)) + list(INTERNAL_FIELDS))


def test_sliced_input_batches() -> None:
    batch = kafka_batch([js({"id": 1}), js({"id": "x"}), js({"id": 3}), b"]"]).slice(1)
    out = decode_records(batch, DecodeSpec(ORDERS))
    assert_accounted(out, batch)
    assert out.rows.column("id").to_pylist() == [3]
    assert out.dead_letters.column("source_offset").to_pylist() == [101, 103]


def test_a_batch_without_the_kafka_columns_is_a_bug_not_a_dead_letter() -> None:
    batch = kafka_batch([js({"id": 1})]).drop_columns(["offset"])
    with pytest.raises(ValueError, match=r"lacks columns \['offset'\]"):
        decode_records(batch, DecodeSpec(ORDERS))
    spec = DecodeSpec(ORDERS, metadata_columns={"amount": "headers.amount"})
    with pytest.raises(ValueError, match=r"lacks columns \['headers'\]"):
        decode_records(kafka_batch([js({"id": 1})]).drop_columns(["headers"]), spec)


# ---------------------------------------------------------------------------
# Upserts, deletes and Kafka metadata
# ---------------------------------------------------------------------------

USERS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=True),
    NestedField(3, "source", StringType()),
    NestedField(4, "tenant", IntegerType()),
    NestedField(5, "raw_key", BinaryType()),
    NestedField(6, "kafka_offset", LongType()),
    identifier_field_ids=[1],
)


def test_upserts_and_deletes_from_op_fields_and_tombstones() -> None:
    spec = DecodeSpec(USERS, mode="upsert", op_field=OpField(envelope=True))
    values = [
        js({"op": "c", "after": {"id": 1, "name": "ann"}}),
        js({"op": "u", "after": {"id": 1, "name": "anne"}}),
        js({"op": "d", "before": {"id": 1, "name": "anne"}}),
        None,
        js({"op": "c", "after": {"name": "no id"}}),
        js({"op": "x", "after": {"id": 5, "name": "e"}}),
        None,
    ]
    keys = [None, None, None, b'{"id": 2}', None, None, b'{"name": "no id"}']
    batch = kafka_batch(values, keys=keys)
    out = decode_records(batch, spec)
    assert_accounted(out, batch)
    assert out.rows.select(["id", "name", "_floe_op", "_floe_offset"]).to_pylist() == [
        {"id": 1, "name": "ann", "_floe_op": 0, "_floe_offset": 100},
        {"id": 1, "name": "anne", "_floe_op": 0, "_floe_offset": 101},
        {"id": 1, "name": None, "_floe_op": 1, "_floe_offset": 102},
        {"id": 2, "name": None, "_floe_op": 1, "_floe_offset": 103},
    ]
    letters = {d["source_offset"]: (d["error_class"], d["error_field"]) for d in out.dead_letters.to_pylist()}
    assert letters == {104: ("FieldError", "id"), 105: ("ChangeError", "op"), 106: ("ChangeError", "id")}


def test_an_optional_key_field_must_still_be_present_in_upsert_mode() -> None:
    schema = Schema(NestedField(1, "code", StringType()), NestedField(2, "n", LongType()))
    spec = DecodeSpec(schema, mode="upsert", key_fields=("code",))
    out = decode_records(kafka_batch([js({"code": "a", "n": 1}), js({"n": 2})]), spec)
    assert out.rows.column("code").to_pylist() == ["a"]
    assert out.dead_letters.select(["error_class", "error_message"]).to_pylist() == [
        {"error_class": "ChangeError", "error_message": "field 'code': key field is missing"}
    ]


def test_kafka_metadata_columns() -> None:
    spec = DecodeSpec(
        USERS,
        mode="upsert",
        metadata_columns={"id": "key.id", "source": "topic", "tenant": "headers.tenant", "raw_key": "key", "kafka_offset": "offset"},
    )
    batch = kafka_batch(
        [js({"id": 999, "name": "a"}), js({"name": "b"}), js({"name": "c"}), js({"name": "d"})],
        keys=[b'{"id": 1}', b'{"id": 2}', b"not json", b'{"id": 4}'],
        headers=[[{"key": "tenant", "value": b"7"}], [], [], [{"key": "tenant", "value": b"seven"}]],
    )
    out = decode_records(batch, spec)
    assert_accounted(out, batch)
    assert out.rows.select(["id", "name", "source", "tenant", "raw_key", "kafka_offset"]).to_pylist() == [
        {"id": 1, "name": "a", "source": "orders", "tenant": 7, "raw_key": b'{"id": 1}', "kafka_offset": 100},
        {"id": 2, "name": "b", "source": "orders", "tenant": None, "raw_key": b'{"id": 2}', "kafka_offset": 101},
    ]
    letters = out.dead_letters.select(["source_offset", "error_field"]).to_pylist()
    assert letters == [{"source_offset": 102, "error_field": "id"}, {"source_offset": 103, "error_field": "tenant"}]
    assert "Kafka key is not JSON" in out.dead_letters.column("error_message")[0].as_py()


def test_string_kafka_keys_delete() -> None:
    schema = Schema(NestedField(1, "code", StringType(), required=True), identifier_field_ids=[1])
    spec = DecodeSpec(schema, mode="upsert", key_format="string")
    out = decode_records(kafka_batch([None], keys=[b"sku-9"]), spec)
    assert out.rows.select(["code", "_floe_op"]).to_pylist() == [{"code": "sku-9", "_floe_op": 1}]


def test_epoch_unit_applies_to_numeric_timestamps() -> None:
    spec = DecodeSpec(ORDERS, epoch_unit="s")
    out = decode_records(kafka_batch([js({"id": 1, "at": 1714557600})]), spec)
    assert out.rows.column("at")[0].as_py() == dt.datetime(2024, 5, 1, 10, tzinfo=dt.timezone.utc)


# ---------------------------------------------------------------------------
# Debezium change events (fixtures: tests/ingest/test_e2e_debezium.py)
# ---------------------------------------------------------------------------

DEBEZIUM_SPEC = DecodeSpec(CUSTOMERS, mode="upsert", op_field=OpField(envelope=True))


def debezium_expected(tombstones: bool) -> list[tuple[int, dict[str, Any]]]:
    """(``_floe_op``, table columns) of every row :func:`customers_history` decodes to, in Kafka order."""

    def deleted(id: int) -> list[tuple[int, dict[str, Any]]]:
        key_only = (1, {**{f.name: None for f in CUSTOMERS.fields}, "id": id})
        return [key_only, key_only] if tombstones else [key_only]

    return [
        (0, table_row(ANNE)),  # snapshot reads
        (0, table_row(BOB)),
        (0, table_row(CARLA)),
        (0, table_row(DAN)),  # create
        (0, table_row(ANNE_2)),  # update
        *deleted(2),  # delete (full before image) and its tombstone
        (0, table_row(DAN_2)),
        *deleted(3),  # the key change 3 -> 30
        (0, table_row(CARLA_30)),
        (0, table_row(EVE)),  # (the truncate is between these two)
        *deleted(5),  # delete whose before image holds only the key
    ]


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "no-schemas"])
@pytest.mark.parametrize("tombstones", [True, False], ids=["tombstones", "no-tombstones"])
def test_debezium_change_events_decode_to_rows_and_a_dead_lettered_truncate(schemas: bool, tombstones: bool) -> None:
    events = customers_history(Debezium(schemas=schemas, tombstones=tombstones))
    batch = kafka_batch([e.value for e in events], keys=[e.key for e in events])
    out = decode_records(batch, DEBEZIUM_SPEC)
    assert_accounted(out, batch)

    columns = [f.name for f in CUSTOMERS.fields]
    rows = out.rows.to_pylist()
    assert [(r["_floe_op"], {c: r[c] for c in columns}) for r in rows] == debezium_expected(tombstones)
    truncate = 100 + next(i for i, e in enumerate(events) if e.key is None)
    assert [r["_floe_offset"] for r in rows] == [o for o in range(100, 100 + len(events)) if o != truncate]
    [letter] = out.dead_letters.to_pylist()
    assert (letter["source_offset"], letter["key"], letter["value"]) == (truncate, None, events[truncate - 100].value)
    assert (letter["error_class"], letter["error_field"], letter["error_message"]) == TRUNCATE_ERROR


def test_debezium_envelopes_are_rows_only_with_the_envelope_on() -> None:
    """Without ``envelope`` the envelope itself would be the row: no ``id`` column at its top level."""
    events = customers_history(Debezium(schemas=False))[:2]
    out = decode_records(kafka_batch([e.value for e in events], keys=[e.key for e in events]),
                       DecodeSpec(CUSTOMERS, mode="upsert", op_field=OpField()))
    assert out.rows.num_rows == 0
    assert out.dead_letters.column("error_message").to_pylist() == ["field 'id': required field is missing"] * 2


# ---------------------------------------------------------------------------
# The spec
# ---------------------------------------------------------------------------


def test_spec_pickles_small_and_equal() -> None:
    spec = DecodeSpec(USERS, mode="upsert", op_field=OpField(), metadata_columns={"source": "topic"})
    copy = pickle.loads(pickle.dumps(spec))
    assert copy == spec and hash(copy) == hash(spec)
    assert len(pickle.dumps(spec)) < 4000
    assert copy.table_schema() == USERS
    assert isinstance(spec.schema, str)
    assert DecodeSpec(spec.schema, mode="upsert", op_field=OpField(), metadata_columns=(("source", "topic"),)) == spec


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "upsert", "key_fields": ("nope",)}, "key field 'nope' is not a column of the table"),
        ({"metadata_columns": {"name": "partition"}}, "Kafka partition needs int or long"),
        ({"metadata_columns": {"nope": "topic"}}, "not a top-level column"),
        ({"metadata_columns": {"name": "value"}}, "unknown Kafka metadata source"),
        ({"op_field": OpField()}, "an op field needs upsert mode"),
        ({"epoch_unit": "fortnight"}, "epoch_unit must be one of"),
    ],
)
def test_invalid_specs_fail_on_the_driver(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DecodeSpec(USERS, **kwargs)


def test_upsert_without_identifier_fields_needs_key_fields() -> None:
    with pytest.raises(ValueError, match="upsert mode needs key fields"):
        DecodeSpec(Schema(NestedField(1, "id", LongType())), mode="upsert")
    with pytest.raises(ValueError, match="must be a primitive column"):
        DecodeSpec(ORDERS, mode="upsert", key_fields=("lines",))


def test_invalid_schema_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not valid Iceberg schema JSON"):
        DecodeSpec('{"type": "struct", "fields": [{"id": 1}]}')
    with pytest.raises(ValueError, match="not valid Iceberg schema JSON"):
        DecodeSpec("{")


def test_internal_column_names_are_reserved() -> None:
    with pytest.raises(ValueError, match="clash with Floe's internal columns"):
        DecodeSpec(Schema(NestedField(1, "_floe_op", IntegerType())))


# ---------------------------------------------------------------------------
# Hypothesis: every record is accounted for
# ---------------------------------------------------------------------------

GOOD = st.builds(lambda i, a: js({"id": i, "amount": a}), st.integers(0, 2**40), st.sampled_from(["1.5", "0.01", None]))
BAD = st.sampled_from([b"", b"{", js({"id": "1"}), js({"amount": 1}), js({"id": 1, "amount": "1.001"}), b"\xff\xfe"])
RECORD = st.one_of(GOOD, BAD, st.none())


@settings(max_examples=60, deadline=None)
@given(values=st.lists(RECORD, max_size=25), mode=st.sampled_from(["append", "upsert"]))
def test_every_record_lands_exactly_once(values: list[Optional[bytes]], mode: str) -> None:
    keys = [js({"id": i}) if i % 2 else None for i in range(len(values))]
    batch = kafka_batch(values, keys=keys)
    out = decode_records(batch, DecodeSpec(ORDERS, mode=mode))  # type: ignore[arg-type]
    assert_accounted(out, batch)
    assert all(m for m in out.dead_letters.column("error_message").to_pylist())
    ops = out.rows.column("_floe_op").to_pylist()
    tombstones_with_keys = sum(1 for v, k in zip(values, keys) if v is None and k is not None)
    assert ops.count(1) == (tombstones_with_keys if mode == "upsert" else 0)


# ---------------------------------------------------------------------------
# Dead-letter building and publishing
# ---------------------------------------------------------------------------


def test_build_dead_letters_without_headers_or_keys() -> None:
    batch = kafka_batch([b"a", b"b"]).drop_columns(["key", "headers"])
    letters = build_dead_letters(batch, {1: FieldError("bad", "x")}).to_pylist()
    assert len(letters) == 1
    assert letters[0]["key"] is None and letters[0]["value"] == b"b"
    assert [h["key"] for h in letters[0]["headers"]][0] == "floe.source.topic"
    assert build_dead_letters(batch, {}).num_rows == 0


def test_dead_letter_without_a_field_has_a_null_field_header() -> None:
    out = decode_records(kafka_batch([b"{"]), DecodeSpec(ORDERS))
    headers = {h["key"]: h["value"] for h in out.dead_letters.column("headers")[0].as_py()}
    assert headers["floe.error.field"] is None
    assert headers["floe.error.class"] == b"DecodeError"


def test_dead_letter_sink_raises_when_kafka_does_not_acknowledge() -> None:
    letters = decode_records(kafka_batch([b"{", b"["]), DecodeSpec(ORDERS)).dead_letters
    config = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 500, "log_level": 0}
    sink = DeadLetterSink(config, "orders.dlq", flush_timeout=10.0)
    started = time.monotonic()
    with pytest.raises(DeadLetterDeliveryError, match=r"2 of 2 dead letters failed on topic 'orders.dlq' \(written as "):
        sink.send(letters)
    assert time.monotonic() - started < 10.0
    assert sink.send(letters.slice(0, 0)) == 0


def test_librdkafka_lines_go_through_python_logging(caplog) -> None:
    """The dead-letter producer's own lines reach Floe's handlers (and format), not bare stderr."""
    letters = decode_records(kafka_batch([b"{"]), DecodeSpec(ORDERS)).dead_letters
    config = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 1500, "reconnect.backoff.ms": 100}
    with caplog.at_level("INFO", logger="floe.librdkafka"):
        with pytest.raises(DeadLetterDeliveryError):
            DeadLetterSink(config, "orders.dlq", flush_timeout=10.0).send(letters)
    lines = [r for r in caplog.records if r.name == "floe.librdkafka"]
    assert lines and any("127.0.0.1:1" in r.getMessage() for r in lines), [r.getMessage() for r in lines]
