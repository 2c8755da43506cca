"""Iceberg <-> Arrow schema conversion and conforming incoming data."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from table.arrow_schema import (
    FIELD_ID_KEY,
    arrow_to_schema,
    cast_to_schema,
    field_id_of,
    schema_to_arrow,
)
from table.errors import SchemaError, ValidationError
from table.schema import Schema
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

PRIMITIVES = [
    (BooleanType(), pa.bool_()),
    (IntegerType(), pa.int32()),
    (LongType(), pa.int64()),
    (FloatType(), pa.float32()),
    (DoubleType(), pa.float64()),
    (DecimalType(9, 2), pa.decimal128(9, 2)),
    (DecimalType(38, 10), pa.decimal128(38, 10)),
    (DateType(), pa.date32()),
    (TimeType(), pa.time64("us")),
    (TimestampType(), pa.timestamp("us")),
    (TimestamptzType(), pa.timestamp("us", tz="UTC")),
    (StringType(), pa.string()),
    (UUIDType(), pa.uuid()),
    (FixedType(7), pa.binary(7)),
    (BinaryType(), pa.binary()),
]


def nested_schema() -> Schema:
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2,
            "point",
            StructType(NestedField(3, "x", DoubleType(), required=True), NestedField(4, "y", DoubleType())),
        ),
        NestedField(5, "tags", ListType(6, StringType(), element_required=False)),
        NestedField(
            7, "props", MapType(8, StringType(), 9, LongType(), value_required=True), required=True
        ),
    )


def ids(field: pa.Field) -> int:
    return int(field.metadata[FIELD_ID_KEY])


@pytest.mark.parametrize("iceberg_type,arrow_type", PRIMITIVES, ids=lambda v: str(v))
def test_primitive_types_follow_appendix_a(iceberg_type, arrow_type):
    schema = Schema(NestedField(10, "c", iceberg_type, required=True), NestedField(11, "o", iceberg_type))
    arrow = schema_to_arrow(schema)
    assert arrow.field("c").type == arrow_type
    assert not arrow.field("c").nullable
    assert arrow.field("o").nullable
    assert ids(arrow.field("c")) == 10 and ids(arrow.field("o")) == 11


def test_nested_fields_carry_ids():
    arrow = schema_to_arrow(nested_schema())
    point = arrow.field("point").type
    assert [ids(f) for f in point] == [3, 4]
    assert not point.field("x").nullable
    tags = arrow.field("tags").type
    assert ids(tags.value_field) == 6 and tags.value_field.nullable
    props = arrow.field("props").type
    assert ids(props.key_field) == 8 and not props.key_field.nullable
    assert ids(props.item_field) == 9 and not props.item_field.nullable
    assert not arrow.field("props").nullable


def test_parquet_file_carries_ids_and_logical_types(tmp_path):
    schema = Schema(
        *(NestedField(i + 1, f"c{i}", t) for i, (t, _) in enumerate(PRIMITIVES)),
        NestedField(100, "l", ListType(101, IntegerType())),
        NestedField(102, "m", MapType(103, StringType(), 104, IntegerType(), value_required=False)),
    )
    arrow = schema_to_arrow(schema)
    path = tmp_path / "f.parquet"
    pq.write_table(arrow.empty_table(), path, store_schema=False)
    parquet_schema = pq.read_metadata(path).schema
    by_path = {parquet_schema.column(i).path: parquet_schema.column(i) for i in range(len(parquet_schema))}
    assert by_path["c12"].logical_type.type == "UUID"
    assert by_path["c12"].physical_type == "FIXED_LEN_BYTE_ARRAY"
    assert '"isAdjustedToUTC": false' in by_path["c9"].logical_type.to_json()
    assert '"isAdjustedToUTC": true' in by_path["c10"].logical_type.to_json()
    assert '"timeUnit": "microseconds"' in by_path["c8"].logical_type.to_json()
    assert "l.list.element" in by_path and "m.key_value.value" in by_path
    # The Parquet schema alone (no stored Arrow schema) gives back the same ids.
    read_back = pq.ParquetFile(path).schema_arrow
    assert arrow_to_schema(read_back) == schema


def test_arrow_to_schema_round_trips_nested():
    schema = nested_schema()
    assert arrow_to_schema(schema_to_arrow(schema)) == schema


def test_arrow_to_schema_names_the_column_without_id():
    arrow = pa.schema([pa.field("a", pa.list_(pa.int32()), metadata={FIELD_ID_KEY: b"1"})])
    with pytest.raises(SchemaError, match=r"'a\.element' has no field id"):
        arrow_to_schema(arrow)


def test_arrow_to_schema_rejects_unsupported_types():
    arrow = pa.schema([pa.field("t", pa.timestamp("ns"), metadata={FIELD_ID_KEY: b"1"})])
    with pytest.raises(SchemaError, match="'t'.*nanosecond"):
        arrow_to_schema(arrow)
    arrow = pa.schema([pa.field("u", pa.uint64(), metadata={FIELD_ID_KEY: b"1"})])
    with pytest.raises(SchemaError, match="'u'.*uint64"):
        arrow_to_schema(arrow)


def test_field_id_of_rejects_garbage():
    with pytest.raises(SchemaError, match="'x'.*non-integer"):
        field_id_of(pa.field("x", pa.int32(), metadata={FIELD_ID_KEY: b"abc"}), "x")


# ----------------------------------------------------------------- property


_names = st.text(alphabet="abcdefgh", min_size=1, max_size=6)
_primitive = st.sampled_from([t for t, _ in PRIMITIVES])


@st.composite
def _schemas(draw) -> Schema:
    """Random nested schemas with unique ids."""
    counter = iter(range(1, 10_000))

    def build(depth: int):
        kind = draw(st.sampled_from(["p", "p", "s", "l", "m"] if depth < 3 else ["p"]))
        if kind == "p":
            return draw(_primitive)
        if kind == "s":
            return StructType(*fields(depth + 1))
        if kind == "l":
            return ListType(next(counter), build(depth + 1), draw(st.booleans()))
        key_id, value_id = next(counter), next(counter)
        return MapType(key_id, draw(_primitive), value_id, build(depth + 1), draw(st.booleans()))

    def fields(depth: int) -> list[NestedField]:
        names = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
        return [NestedField(next(counter), n, build(depth), draw(st.booleans())) for n in names]

    return Schema(*fields(0))


@settings(max_examples=60, deadline=None)
@given(_schemas())
def test_schema_round_trip_property(schema):
    assert arrow_to_schema(schema_to_arrow(schema)) == schema


# ----------------------------------------------------------------- cast


def test_cast_promotes_and_relabels():
    schema = Schema(
        NestedField(1, "i", LongType(), required=True),
        NestedField(2, "s", StringType()),
        NestedField(3, "f", DoubleType()),
        NestedField(4, "ts", TimestampType()),
        NestedField(5, "tz", TimestamptzType()),
        NestedField(6, "u", UUIDType()),
        NestedField(7, "d", DecimalType(20, 2)),
        NestedField(8, "missing", DateType()),
    )
    u = uuid.uuid4()
    batch = pa.record_batch(
        {
            "s": pa.array(["a", None], pa.large_string()),
            "i": pa.array([1, 2], pa.int32()),
            "f": pa.array([1.5, None], pa.float32()),
            "ts": pa.array([1, 2], pa.timestamp("ms")),
            "tz": pa.array([3, 4], pa.timestamp("s", tz="Europe/Paris")),
            "u": pa.array([u.bytes, None], pa.binary(16)),
            "d": pa.array([Decimal("1.25"), None], pa.decimal128(5, 2)),
        }
    )
    out = cast_to_schema(batch, schema)
    assert out.schema == schema_to_arrow(schema)
    assert [ids(f) for f in out.schema] == list(range(1, 9))
    assert out.column("i").to_pylist() == [1, 2]
    assert out.column("ts").to_pylist() == [datetime.datetime(1970, 1, 1, 0, 0, 0, 1000)] + [
        datetime.datetime(1970, 1, 1, 0, 0, 0, 2000)
    ]
    assert out.column("tz").cast(pa.int64()).to_pylist() == [3_000_000, 4_000_000]
    assert out.column("u").to_pylist() == [u, None]
    assert out.column("d").to_pylist() == [Decimal("1.25"), None]
    assert out.column("missing").null_count == 2


def test_cast_table_with_chunks_and_dictionary():
    schema = Schema(NestedField(1, "s", StringType(), required=True))
    table = pa.Table.from_batches(
        [
            pa.record_batch({"s": pa.array(["x", "y"]).dictionary_encode()}),
            pa.record_batch({"s": pa.array(["z"]).dictionary_encode()}),
        ]
    )
    out = cast_to_schema(table, schema)
    assert isinstance(out, pa.Table)
    assert out.column("s").to_pylist() == ["x", "y", "z"]
    assert out.schema == schema_to_arrow(schema)


def test_cast_nested():
    schema = nested_schema()
    batch = pa.record_batch(
        {
            "id": pa.array([1, 2, 3], pa.int16()),
            "point": pa.array(
                [{"x": 1.0, "y": None}, None, {"x": 3, "y": 4.0}],
                pa.struct([("x", pa.float32()), ("y", pa.float64())]),
            ),
            "tags": pa.array([["a", None], None, []], pa.large_list(pa.large_string())),
            "props": pa.array([[("k", 1)], [], [("a", 2), ("b", 3)]], pa.map_(pa.string(), pa.int32())),
        }
    ).slice(0)
    out = cast_to_schema(batch, schema)
    assert out.schema == schema_to_arrow(schema)
    assert out.column("point").to_pylist() == [{"x": 1.0, "y": None}, None, {"x": 3.0, "y": 4.0}]
    assert out.column("tags").to_pylist() == [["a", None], None, []]
    assert out.column("props").to_pylist() == [[("k", 1)], [], [("a", 2), ("b", 3)]]


def test_cast_sliced_nested_input():
    schema = nested_schema()
    batch = pa.record_batch(
        {
            "id": pa.array([0, 1, 2], pa.int64()),
            "point": pa.array([None, {"x": 1.0, "y": 2.0}, {"x": 3.0, "y": None}]),
            "tags": pa.array([["z"], ["a"], None]),
            "props": pa.array([[("q", 9)], [("k", 1)], []], pa.map_(pa.string(), pa.int64())),
        }
    ).slice(1, 2)
    out = cast_to_schema(batch, schema)
    assert out.to_pylist() == [
        {"id": 1, "point": {"x": 1.0, "y": 2.0}, "tags": ["a"], "props": [("k", 1)]},
        {"id": 2, "point": {"x": 3.0, "y": None}, "tags": None, "props": []},
    ]


def test_cast_required_child_may_be_null_under_null_parent():
    schema = Schema(NestedField(1, "p", StructType(NestedField(2, "x", LongType(), required=True))))
    ok = pa.record_batch({"p": pa.array([{"x": 1}, None])})
    assert cast_to_schema(ok, schema).column("p").to_pylist() == [{"x": 1}, None]
    bad = pa.record_batch({"p": pa.array([{"x": None}, None], pa.struct([("x", pa.int64())]))})
    with pytest.raises(ValidationError, match=r"'p\.x' is required"):
        cast_to_schema(bad, schema)


@pytest.mark.parametrize(
    "batch,message",
    [
        (pa.record_batch({"id": pa.array([1, None])}), r"'id' is required but has 1 null"),
        (
            pa.record_batch({"id": pa.array([1]), "extra": pa.array([1])}),
            r"\['extra'\] are not in the table",
        ),
        (pa.record_batch({"other": pa.array([1])}), r"not in the table"),
        (
            pa.record_batch({"id": pa.array(["1"])}),
            r"'id': cannot write Arrow type string to Iceberg type long",
        ),
        (pa.record_batch({"id": pa.array([1], pa.uint64())}), r"'id': cannot write Arrow type uint64"),
        (pa.record_batch({"id": pa.array([1.0])}), r"'id': cannot write Arrow type double"),
    ],
)
def test_cast_errors_name_the_column(batch, message):
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "o", IntegerType()))
    with pytest.raises((SchemaError, ValidationError), match=message):
        cast_to_schema(batch, schema)


def test_cast_missing_required_column():
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "o", IntegerType()))
    with pytest.raises(SchemaError, match="required column 'id' is missing"):
        cast_to_schema(pa.record_batch({"o": pa.array([1], pa.int32())}), schema)


def test_cast_timezone_rules():
    tz_schema = Schema(NestedField(1, "t", TimestamptzType()))
    with pytest.raises(SchemaError, match="'t' is timestamptz but the data has timestamps without a zone"):
        cast_to_schema(pa.record_batch({"t": pa.array([1], pa.timestamp("us"))}), tz_schema)
    naive_schema = Schema(NestedField(1, "t", TimestampType()))
    with pytest.raises(SchemaError, match="'t' is timestamp without zone"):
        cast_to_schema(pa.record_batch({"t": pa.array([1], pa.timestamp("us", tz="UTC"))}), naive_schema)


def test_cast_nanoseconds_only_when_lossless():
    schema = Schema(NestedField(1, "t", TimestampType()))
    ok = cast_to_schema(pa.record_batch({"t": pa.array([5000], pa.timestamp("ns"))}), schema)
    assert ok.column("t").cast(pa.int64()).to_pylist() == [5]
    with pytest.raises(ValidationError, match="'t'"):
        cast_to_schema(pa.record_batch({"t": pa.array([5001], pa.timestamp("ns"))}), schema)


def test_cast_required_list_elements_and_map_values():
    schema = Schema(
        NestedField(1, "l", ListType(2, LongType(), element_required=True)),
        NestedField(3, "m", MapType(4, StringType(), 5, LongType(), value_required=True)),
    )
    with pytest.raises(ValidationError, match=r"'l\.element' is required"):
        cast_to_schema(pa.record_batch({"l": pa.array([[1, None]])}), schema)
    with pytest.raises(ValidationError, match=r"'m\.value' is required"):
        maps = pa.array([[("a", None)]], pa.map_(pa.string(), pa.int64()))
        cast_to_schema(pa.record_batch({"m": maps}), schema)


def test_cast_rejects_shape_mismatch():
    schema = Schema(NestedField(1, "l", ListType(2, LongType())))
    with pytest.raises(SchemaError, match="'l' is a list in the table"):
        cast_to_schema(pa.record_batch({"l": pa.array([1])}), schema)


def test_cast_decimal_rescales_only_losslessly():
    schema = Schema(NestedField(1, "d", DecimalType(10, 2)))
    out = cast_to_schema(pa.record_batch({"d": pa.array([Decimal("12.5")], pa.decimal128(5, 1))}), schema)
    assert out.column("d").to_pylist() == [Decimal("12.50")]
    for narrower in (pa.decimal128(5, 3), pa.decimal128(10, 1)):
        with pytest.raises(SchemaError, match="'d': cannot write Arrow type decimal128"):
            cast_to_schema(pa.record_batch({"d": pa.array([Decimal("1")], narrower)}), schema)


def test_cast_null_typed_column_to_optional():
    schema = Schema(NestedField(1, "s", StringType()))
    out = cast_to_schema(pa.record_batch({"s": pa.nulls(2)}), schema)
    assert out.column("s").type == pa.string() and out.column("s").null_count == 2


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_pyiceberg_reads_the_same_schema():
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import Schema as PyIcebergSchema

    primitives = Schema(
        *(NestedField(i + 1, f"c{i}", t, required=i % 2 == 0) for i, (t, _) in enumerate(PRIMITIVES))
    )
    for schema in (primitives, nested_schema()):
        expected = PyIcebergSchema.model_validate(schema.to_json())
        assert pyarrow_to_schema(schema_to_arrow(schema)) == expected
