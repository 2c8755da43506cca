"""ingest.tasks.changes: op extraction, tombstones, keys."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Optional

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.tasks.changes import Change, ChangeKind, ChangeSpec, OpField, classifier, classify, key_row, missing_keys
from ingest.tasks.mapping import map_rows
from ingest.tasks.record_errors import ChangeError
from table.schema import Schema
from table.types import LongType, NestedField, StringType, StructType

UPSERT_BY_ID = ChangeSpec("upsert", key_fields=("id",))
DEBEZIUM = ChangeSpec("upsert", OpField(), ("id",))
ENVELOPE = ChangeSpec("upsert", OpField(envelope=True), ("id",))


def change_error(value: Any, key: Optional[bytes], spec: ChangeSpec) -> ChangeError:
    with pytest.raises(ChangeError) as info:
        classify(value, key, spec)
    return info.value


# ---------------------------------------------------------------------------
# Append mode
# ---------------------------------------------------------------------------


def test_append_mode_inserts_every_value() -> None:
    assert classify({"id": 1, "op": "d"}, b"k", ChangeSpec()) == Change(ChangeKind.UPSERT, {"id": 1, "op": "d"})


def test_append_mode_rejects_tombstones() -> None:
    error = change_error(None, b'{"id": 1}', ChangeSpec())
    assert error.reason == "a tombstone (null value) cannot be appended"
    assert error.field is None


# ---------------------------------------------------------------------------
# Upsert mode without an op field
# ---------------------------------------------------------------------------


def test_values_upsert_and_tombstones_delete_by_kafka_key() -> None:
    assert classify({"id": 1, "x": 2}, None, UPSERT_BY_ID) == Change(ChangeKind.UPSERT, {"id": 1, "x": 2})
    delete = classify(None, b'{"id": 1, "other": true}', UPSERT_BY_ID)
    assert delete == Change(ChangeKind.DELETE, {"id": 1})
    assert delete.partial


@pytest.mark.parametrize(
    "key, row",
    [
        (b"42", {"id": 42}),
        (b'"abc"', {"id": "abc"}),
        (b"1.50", {"id": Decimal("1.50")}),
        (b'{"schema": {"type": "struct"}, "payload": {"id": 7}}', {"id": 7}),
    ],
)
def test_json_keys(key: bytes, row: dict[str, Any]) -> None:
    assert key_row(key, UPSERT_BY_ID) == row


def test_string_keys() -> None:
    spec = ChangeSpec("upsert", key_fields=("code",), key_format="string")
    assert classify(None, "çà-1".encode(), spec) == Change(ChangeKind.DELETE, {"code": "çà-1"})
    assert change_error(None, b"\xff", spec).reason == "the Kafka key is not UTF-8 text"


def test_nested_and_composite_keys() -> None:
    spec = ChangeSpec("upsert", key_fields=("tenant.id", "id"))
    assert key_row(b'{"tenant": {"id": 3, "name": "x"}, "id": 9}', spec) == {"tenant": {"id": 3}, "id": 9}
    error = change_error(None, b'{"tenant": {}, "id": 9}', spec)
    assert (error.field, error.reason) == ("tenant.id", "key field is missing from the Kafka key")
    error = change_error(None, b"9", spec)
    assert error.reason == "the Kafka key is number 9, not an object with the key fields"


@pytest.mark.parametrize(
    "key, reason",
    [
        (None, "a tombstone (null value) without a Kafka key deletes nothing"),
        (b"{oops", "the Kafka key is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (b"\xff", "the Kafka key is not JSON"),
        (b"[1]", "the Kafka key is array, not an object with the key fields"),
        (b"null", "the Kafka key is null, not an object with the key fields"),
    ],
)
def test_unusable_tombstone_keys(key: Optional[bytes], reason: str) -> None:
    assert change_error(None, key, UPSERT_BY_ID).reason.startswith(reason)


def test_missing_key_field_in_kafka_key_names_the_field() -> None:
    error = change_error(None, b'{"other": 1}', UPSERT_BY_ID)
    assert (error.field, error.reason) == ("id", "key field is missing from the Kafka key")
    assert str(error) == "field 'id': key field is missing from the Kafka key"


# ---------------------------------------------------------------------------
# ChangeKind fields
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op, expected", [("c", ChangeKind.UPSERT), ("r", ChangeKind.UPSERT), ("u", ChangeKind.UPSERT), ("d", ChangeKind.DELETE)])
def test_debezium_ops(op: str, expected: ChangeKind) -> None:
    change = classify({"id": 5, "name": "n", "op": op}, None, DEBEZIUM)
    assert change.op is expected
    assert change.row == ({"id": 5} if expected is ChangeKind.DELETE else {"id": 5, "name": "n", "op": op})


def test_configured_op_values_and_nested_op_field() -> None:
    spec = ChangeSpec(
        "upsert", OpField("meta.kind", inserts=("INSERT",), updates=("UPDATE", 2), deletes=("DELETE", 3)), ("id",)
    )
    assert classify({"id": 1, "meta": {"kind": "INSERT"}}, None, spec).op is ChangeKind.UPSERT
    assert classify({"id": 1, "meta": {"kind": 2}}, None, spec).op is ChangeKind.UPSERT
    assert classify({"id": 1, "meta": {"kind": 3}}, None, spec).op is ChangeKind.DELETE
    error = change_error({"id": 1, "meta": {"kind": "c"}}, None, spec)
    assert (error.field, error.reason) == ("meta.kind", 'unknown operation string "c"; expected one of INSERT, UPDATE, 2, DELETE, 3')


@pytest.mark.parametrize(
    "value, reason",
    [
        ({"id": 1}, "the operation is missing"),
        ({"id": 1, "op": None}, "the operation is missing"),
        ({"id": 1, "op": "t"}, 'unknown operation string "t"; expected one of c, r, u, d'),
        ({"id": 1, "op": True}, "unknown operation boolean true"),
        ({"id": 1, "op": ["c"]}, "unknown operation array"),
    ],
)
def test_bad_ops_name_the_op_field(value: dict[str, Any], reason: str) -> None:
    error = change_error(value, None, DEBEZIUM)
    assert error.field == "op"
    assert error.reason.startswith(reason)


def test_tombstones_still_delete_with_an_op_field() -> None:
    assert classify(None, b'{"id": 4}', DEBEZIUM) == Change(ChangeKind.DELETE, {"id": 4})


def test_a_delete_without_its_key_falls_back_to_the_kafka_key() -> None:
    assert classify({"op": "d"}, b'{"id": 8}', DEBEZIUM) == Change(ChangeKind.DELETE, {"id": 8})
    error = change_error({"op": "d"}, None, DEBEZIUM)
    assert (error.field, error.reason) == ("id", "key field is missing from the deleted row and there is no Kafka key")


# ---------------------------------------------------------------------------
# Debezium envelopes
# ---------------------------------------------------------------------------


def test_envelope_rows_come_from_after_and_deletes_from_before() -> None:
    create = {"before": None, "after": {"id": 1, "name": "a"}, "op": "c", "ts_ms": 1}
    assert classify(create, None, ENVELOPE) == Change(ChangeKind.UPSERT, {"id": 1, "name": "a"})
    delete = {"before": {"id": 1, "name": "a"}, "after": None, "op": "d"}
    assert classify(delete, None, ENVELOPE) == Change(ChangeKind.DELETE, {"id": 1})


def test_envelope_delete_without_before_uses_the_kafka_key() -> None:
    assert classify({"before": None, "after": None, "op": "d"}, b'{"id": 3}', ENVELOPE) == Change(ChangeKind.DELETE, {"id": 3})


def test_envelope_errors_name_the_image() -> None:
    error = change_error({"before": None, "after": None, "op": "u"}, None, ENVELOPE)
    assert (error.field, error.reason) == ("after", "the row image is null")
    error = change_error({"after": [1], "op": "c"}, None, ENVELOPE)
    assert (error.field, error.reason) == ("after", "the row image must be an object, got array")


def connect_json(payload: Any) -> dict[str, Any]:
    """A value as Kafka Connect's JSON converter writes it with ``schemas.enable=true``."""
    return {"schema": {"type": "struct", "fields": [], "optional": False, "name": "pg.public.t.Envelope"}, "payload": payload}


def test_envelopes_wrapped_by_connects_json_converter_are_unwrapped() -> None:
    create = {"before": None, "after": {"id": 1, "name": "a"}, "source": {"snapshot": "true"}, "op": "r", "ts_ms": 1}
    assert classify(connect_json(create), None, ENVELOPE) == Change(ChangeKind.UPSERT, {"id": 1, "name": "a"})
    delete = {"before": {"id": 1}, "after": None, "op": "d"}
    assert classify(connect_json(delete), None, ENVELOPE) == Change(ChangeKind.DELETE, {"id": 1})
    key = json.dumps(connect_json({"id": 2})).encode()
    assert classify(connect_json({**delete, "before": None}), key, ENVELOPE) == Change(ChangeKind.DELETE, {"id": 2})
    error = change_error(connect_json({"source": {}, "op": "t", "ts_ms": 1}), None, ENVELOPE)
    assert (error.field, error.reason) == ("op", 'unknown operation string "t"; expected one of c, r, u, d')
    error = change_error(connect_json(None), None, ENVELOPE)
    assert (error.field, error.reason) == ("op", "the operation is missing")


def test_values_are_unwrapped_only_as_envelopes() -> None:
    """A row may have exactly the columns ``schema`` and ``payload``: without an envelope it is the row."""
    row = {"schema": "s", "payload": {"id": 1, "op": "c"}}
    assert classify(row, None, UPSERT_BY_ID) == Change(ChangeKind.UPSERT, row)
    assert classify(row, None, ChangeSpec()) == Change(ChangeKind.UPSERT, row)
    assert change_error(row, None, DEBEZIUM).reason == "the operation is missing"


# ---------------------------------------------------------------------------
# Spec validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "merge"}, "mode must be 'append' or 'upsert'"),
        ({"op_field": OpField()}, "an op field needs upsert mode"),
        ({"mode": "upsert"}, "upsert mode needs key fields"),
        ({"mode": "upsert", "key_fields": ("a", "b"), "key_format": "string"}, "a string Kafka key can fill one key field"),
        ({"mode": "upsert", "key_fields": ("a",), "key_format": "avro"}, "key_format must be"),
    ],
)
def test_invalid_specs(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ChangeSpec(**kwargs)


def test_an_op_value_cannot_mean_two_operations() -> None:
    with pytest.raises(ValueError, match="listed for two operations"):
        OpField(inserts=("c",), deletes=("c",))


def test_op_field_lists_are_normalised_to_tuples() -> None:
    op_field = OpField(deletes=["d", "x"])  # type: ignore[arg-type]
    assert op_field.deletes == ("d", "x")
    assert hash(op_field) == hash(OpField(deletes=("d", "x")))


# ---------------------------------------------------------------------------
# Keys after mapping
# ---------------------------------------------------------------------------


def test_missing_keys_checks_only_the_given_positions_and_names_the_field() -> None:
    schema = Schema(
        NestedField(1, "id", LongType()),
        NestedField(2, "tenant", StructType(NestedField(3, "id", StringType()))),
    )
    rows = [{"id": 1, "tenant": {"id": "a"}}, {"tenant": {"id": "b"}}, {"id": 3, "tenant": None}, {"id": 4, "tenant": {}}, {}]
    batch = map_rows(rows, schema).batch
    errors = missing_keys(batch, ("id", "tenant.id"), [0, 1, 2, 3])
    assert {i: (e.field, e.reason) for i, e in errors.items()} == {
        1: ("id", "key field is missing"),
        2: ("tenant.id", "key field is missing"),
        3: ("tenant.id", "key field is missing"),
    }
    assert missing_keys(batch, ("id",), []) == {}


def test_missing_keys_on_a_batch_type() -> None:
    batch = pa.RecordBatch.from_pydict({"id": pa.array([1, None], pa.int64())})
    assert list(missing_keys(batch, ("id",), [0, 1])) == [1]


# ---------------------------------------------------------------------------
# Hypothesis
# ---------------------------------------------------------------------------

scalars = st.integers() | st.text() | st.booleans()


@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), scalars, min_size=1), st.data())
def test_kafka_key_objects_yield_exactly_the_key_fields(key: dict[str, Any], data: st.DataObject) -> None:
    fields = tuple(data.draw(st.lists(st.sampled_from(sorted(key)), min_size=1, unique=True)))
    spec = ChangeSpec("upsert", key_fields=fields)
    change = classify(None, json.dumps(key).encode(), spec)
    assert change == Change(ChangeKind.DELETE, {f: key[f] for f in fields})


@given(st.dictionaries(st.text(min_size=1, max_size=3), scalars), st.sampled_from(["c", "r", "u"]))
def test_upserts_pass_the_value_through_untouched(value: dict[str, Any], op: str) -> None:
    value = {**value, "op": op, "id": 1}
    assert classify(value, None, DEBEZIUM) == Change(ChangeKind.UPSERT, value)


# ---------------------------------------------------------------------------
# classifier: classify with its common record answered first
# ---------------------------------------------------------------------------

_OP_VALUES = st.one_of(
    st.sampled_from(["c", "r", "u", "d", "x", "", "C"]),
    st.integers(-2, 4),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False),
    st.lists(st.just("c"), max_size=1),
    st.dictionaries(st.just("kind"), st.sampled_from(["c", "d"]), max_size=1),
)
_VALUES = st.one_of(
    st.none(),
    st.just([1]),
    st.just("c"),
    st.fixed_dictionaries({"id": st.integers(0, 3)}, optional={"op": _OP_VALUES, "meta": st.fixed_dictionaries(
        {}, optional={"op": _OP_VALUES}), "before": st.none(), "after": st.none()}),
)
_SPECS = [
    ChangeSpec(),
    UPSERT_BY_ID,
    DEBEZIUM,
    ENVELOPE,
    ChangeSpec("upsert", OpField(inserts=(1,), updates=(2,), deletes=(0,)), ("id",)),
    ChangeSpec("upsert", OpField("meta.op"), ("id",)),
]


def _outcome(classify_: Any, value: Any, key: Optional[bytes]) -> Any:
    try:
        return classify_(value, key)
    except ChangeError as error:
        return ("error", error.reason, error.field)


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: f"{s.mode}-{s.op_field}")
@given(value=_VALUES, key=st.sampled_from([None, b'{"id": 7}', b"7", b"not json"]))
def test_the_classifier_answers_every_record_as_classify_does(spec: ChangeSpec, value: Any,
                                                              key: Optional[bytes]) -> None:
    expected = _outcome(lambda v, k: classify(v, k, spec), value, key)
    got = _outcome(classifier(spec), value, key)
    assert got == expected
    if isinstance(got, Change):
        assert type(got.op) is ChangeKind
