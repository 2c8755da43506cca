"""ingest.tasks.mapping: strict value -> column conversion."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import math
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ingest.tasks.mapping import MappingOptions, fast_column, map_rows, value_converter
from ingest.tasks.record_errors import FieldError
from table.arrow_schema import schema_to_arrow, type_to_arrow
from table.conversions import iso_date, iso_time, iso_timestamp
from table.schema import Schema
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

UTC = dt.timezone.utc
U = uuid.UUID("12345678-1234-5678-1234-567812345678")
TS_2024 = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z in microseconds
POISON = object()  # a value no type accepts: forces the per-value path


def one_column(t: IcebergType, values: list[Any], options: MappingOptions = MappingOptions(), required: bool = False):
    schema = Schema(NestedField(1, "c", t, required))
    mapped = map_rows([{"c": v} for v in values], schema, options)
    return mapped.batch.column(0), mapped.errors


def table_repr(array: pa.Array) -> list[Any]:
    """Values in docs/table-api.md's Python representation."""
    t = array.type
    if pa.types.is_timestamp(t) or pa.types.is_time64(t):
        return array.cast(pa.int64()).to_pylist()
    if pa.types.is_date32(t):
        return array.cast(pa.int32()).to_pylist()
    return array.to_pylist()


# ---------------------------------------------------------------------------
# Every primitive type: accepted encodings, through the fast and the slow path
# ---------------------------------------------------------------------------

ACCEPTED = [
    (BooleanType(), True, True),
    (IntegerType(), -(2**31), -(2**31)),
    (LongType(), 2**63 - 1, 2**63 - 1),
    (FloatType(), 1.5, 1.5),
    (FloatType(), 2, 2.0),
    (DoubleType(), 0.1, 0.1),
    (DoubleType(), 7, 7.0),
    (DoubleType(), Decimal("0.1"), 0.1),
    (DecimalType(10, 2), "12.3", Decimal("12.30")),
    (DecimalType(10, 2), "-1e2", Decimal("-100.00")),
    (DecimalType(10, 2), Decimal("1.500"), Decimal("1.50")),
    (DecimalType(10, 2), 42, Decimal("42.00")),
    (DecimalType(10, 2), 0.1, Decimal("0.10")),
    (DecimalType(38, 0), "9" * 38, Decimal("9" * 38)),
    (DateType(), "2024-01-02", 19724),
    (DateType(), 19724, 19724),
    (DateType(), dt.date(2024, 1, 2), 19724),
    (TimeType(), "12:34:56.789", 45_296_789_000),
    (TimeType(), "00:01", 60_000_000),
    (TimeType(), 1_500, 1_500_000),  # epoch unit ms
    (TimeType(), dt.time(0, 0, 1, 5), 1_000_005),
    (TimestampType(), "2024-01-01T00:00:00", TS_2024),
    (TimestampType(), "2024-01-01 00:00:00.5", TS_2024 + 500_000),
    (TimestampType(), "2024-01-01T00:00:00Z", TS_2024),
    (TimestampType(), "2024-01-01", TS_2024),
    (TimestampType(), dt.datetime(2024, 1, 1), TS_2024),
    (TimestampType(), 1_704_067_200_000, TS_2024),
    (TimestamptzType(), "2024-01-01T02:00:00+02:00", TS_2024),
    (TimestamptzType(), "2024-01-01T00:00:00.123456789Z", TS_2024 + 123_456),
    (TimestamptzType(), "2023-12-31T19:30:00-0430", TS_2024),
    (TimestamptzType(), dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), TS_2024),
    (TimestamptzType(), 1_704_067_200_000, TS_2024),
    (TimestamptzType(), 1_704_067_200_000.5, TS_2024 + 500),
    (StringType(), "héllo", "héllo"),
    (UUIDType(), str(U), U),
    (UUIDType(), U, U),
    (UUIDType(), U.bytes, U),
    (FixedType(3), b"abc", b"abc"),
    (FixedType(3), base64.b64encode(b"abc").decode(), b"abc"),
    (BinaryType(), b"\x00\xff", b"\x00\xff"),
    (BinaryType(), "AP8=", b"\x00\xff"),
]


@pytest.mark.parametrize("t, value, expected", ACCEPTED, ids=lambda x: repr(x)[:40])
def test_accepted_value_fast_path(t: PrimitiveType, value: Any, expected: Any) -> None:
    column, errors = one_column(t, [value, None, value])
    assert errors == {}
    assert column.type == type_to_arrow(t)
    assert table_repr(column) == [expected, None, expected]


@pytest.mark.parametrize("t, value, expected", ACCEPTED, ids=lambda x: repr(x)[:40])
def test_accepted_value_per_value_path(t: PrimitiveType, value: Any, expected: Any) -> None:
    column, errors = one_column(t, [value, POISON, value])
    assert list(errors) == [1]
    assert table_repr(column) == [expected, None, expected]


# ---------------------------------------------------------------------------
# Wrong values: per-record errors naming the field
# ---------------------------------------------------------------------------

REJECTED = [
    (DecimalType(10, 2), "abc", 'expected decimal(10,2), got string "abc"'),
    (DecimalType(10, 2), "1.005", 'string "1.005" has more than 2 fractional digits for decimal(10,2)'),
    (DecimalType(10, 2), "123456789", 'string "123456789" does not fit decimal(10,2)'),
    (DecimalType(10, 2), " 1.5", 'expected decimal(10,2), got string " 1.5"'),
    (DecimalType(10, 2), "1_000", 'expected decimal(10,2), got string "1_000"'),
    (DecimalType(10, 2), True, "expected decimal(10,2), got boolean true"),
    (DecimalType(10, 2), float("nan"), "number nan is not a finite decimal(10,2)"),
    (BooleanType(), 1, "expected boolean, got number 1"),
    (BooleanType(), "true", 'expected boolean, got string "true"'),
    (IntegerType(), 2**31, "number 2147483648 is out of range for int"),
    (IntegerType(), True, "expected int, got boolean true"),
    (LongType(), 1.0, "expected long, got number 1.0"),
    (LongType(), "5", 'expected long, got string "5"'),
    (LongType(), 2**63, "number 9223372036854775808 is out of range for long"),
    (FloatType(), 1e39, "number 1e+39 is out of range for float"),
    (DoubleType(), "1.5", 'expected double, got string "1.5"'),
    (DoubleType(), 10**400, "is out of range for double"),
    (StringType(), 5, "expected string, got number 5"),
    (StringType(), "\ud800", "is not valid Unicode"),
    (StringType(), {"a": 1}, "expected string, got object"),
    (DateType(), "2024-02-30", 'expected date, got string "2024-02-30"'),
    (DateType(), "2024-01-02T00:00:00", "expected date, got string"),
    (DateType(), dt.datetime(2024, 1, 2), "expected date, got datetime 2024-01-02T00:00:00"),
    (TimeType(), "24:00", 'expected time, got string "24:00"'),
    (TimeType(), 86_400_000, "number 86400000 is out of range for time"),
    (TimestamptzType(), "2024-01-01T00:00:00", "without a zone offset"),
    (TimestamptzType(), dt.datetime(2024, 1, 1), "without a zone"),
    (TimestamptzType(), "2024-13-01T00:00:00Z", "expected timestamptz, got string"),
    (TimestamptzType(), "2024-01-01T00:00:00+24:00", "expected timestamptz, got string"),
    (TimestamptzType(), "yesterday", 'expected timestamptz, got string "yesterday"'),
    (TimestamptzType(), 10**30, "is out of range for timestamptz"),
    (TimestamptzType(), Decimal("1e400"), "is out of range for timestamptz"),
    (TimestampType(), "2024-01-01T00:00:00+01:00", "with a non-zero offset"),
    (TimestampType(), dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1))), "non-zero offset"),
    (UUIDType(), "not-a-uuid", 'expected uuid, got string "not-a-uuid"'),
    (UUIDType(), b"short", "expected uuid, got 5 bytes"),
    (FixedType(3), b"ab", "expected fixed[3], got 2 bytes"),
    (BinaryType(), "not base64!", "that is not base64"),
    (BinaryType(), 12, "expected binary, got number 12"),
]


@pytest.mark.parametrize("t, value, reason", REJECTED, ids=lambda x: repr(x)[:40])
def test_rejected_value_names_field_and_reason(t: PrimitiveType, value: Any, reason: str) -> None:
    column, errors = one_column(t, [None, value])
    assert list(errors) == [1]
    error = errors[1]
    assert isinstance(error, FieldError)
    assert error.field == "c"
    assert reason in error.reason
    assert str(error).startswith("field 'c': ")
    assert column[1].as_py() is None


def test_error_message_matches_the_documented_shape() -> None:
    schema = Schema(NestedField(1, "amount", DecimalType(10, 2)))
    errors = map_rows([{"amount": "abc"}], schema).errors
    assert str(errors[0]) == """field 'amount': expected decimal(10,2), got string "abc\""""


def test_long_strings_are_shortened_in_messages() -> None:
    _, errors = one_column(LongType(), ["x" * 500])
    assert len(str(errors[0])) < 120


# ---------------------------------------------------------------------------
# Required fields, nesting, partial rows
# ---------------------------------------------------------------------------

NESTED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(
        2,
        "addr",
        StructType(NestedField(3, "city", StringType(), required=True), NestedField(4, "zip", IntegerType())),
    ),
    NestedField(5, "tags", ListType(6, StringType(), element_required=True)),
    NestedField(7, "attrs", MapType(8, StringType(), 9, LongType(), value_required=True)),
    NestedField(
        10,
        "points",
        ListType(11, StructType(NestedField(12, "x", DoubleType(), required=True)), element_required=False),
    ),
    NestedField(13, "scores", MapType(14, IntegerType(), 15, DecimalType(5, 1), value_required=False)),
)


@pytest.mark.parametrize(
    "row, field, reason",
    [
        ({}, "id", "required field is missing"),
        ({"id": None}, "id", "required field is null"),
        ({"id": 1, "addr": {"zip": 1}}, "addr.city", "required field is missing"),
        ({"id": 1, "addr": {"city": None}}, "addr.city", "required field is null"),
        ({"id": 1, "addr": {"city": 5}}, "addr.city", "expected string, got number 5"),
        ({"id": 1, "addr": "Paris"}, "addr", 'expected struct (object), got string "Paris"'),
        ({"id": 1, "tags": "a"}, "tags", 'expected list<string> (array), got string "a"'),
        ({"id": 1, "tags": ["a", None]}, "tags.element", "required element is null"),
        ({"id": 1, "tags": ["a", 2]}, "tags.element", "expected string, got number 2"),
        ({"id": 1, "attrs": {"a": None}}, "attrs.value", "required map value is null"),
        ({"id": 1, "attrs": {"a": "1"}}, "attrs.value", 'expected long, got string "1"'),
        ({"id": 1, "attrs": 7}, "attrs", "expected map<string, long> (object or [key, value] pairs), got number 7"),
        ({"id": 1, "points": [{"x": 1.0}, {}]}, "points.element.x", "required field is missing"),
        ({"id": 1, "scores": [[None, "1.5"]]}, "scores.key", "map key is null"),
        ({"id": 1, "scores": {"1": "1.5"}}, "scores.key", 'expected int, got string "1"'),
        ({"id": 1, "scores": [[1, "1.55"]]}, "scores.value", "more than 1 fractional digits"),
        ({"id": 1, "scores": [[1, "1.5"], [1, "2.5"]]}, "scores", "a map key appears twice"),
        ({"id": 1, "scores": [[1, "1.5", 2]]}, "scores", "(object or [key, value] pairs), got array"),
    ],
)
def test_nested_errors_name_the_dotted_path(row: dict[str, Any], field: str, reason: str) -> None:
    good = {"id": 7, "addr": {"city": "X"}, "tags": ["t"], "attrs": {"k": 1}, "points": [{"x": 2.0}, None]}
    mapped = map_rows([good, row, good], NESTED)
    assert list(mapped.errors) == [1]
    assert mapped.errors[1].field == field
    assert reason in mapped.errors[1].reason
    assert mapped.batch.slice(0, 1).to_pylist() == mapped.batch.slice(2, 1).to_pylist()
    assert mapped.batch.column("id").to_pylist()[::2] == [7, 7]


def test_nested_values_land() -> None:
    row = {
        "id": 1,
        "addr": {"city": "Lyon", "zip": 69000, "unknown": "ignored"},
        "tags": ("a", "b"),
        "attrs": {"k": 1, "l": 2},
        "points": [{"x": 1}, None, {"x": 2.5}],
        "scores": [[1, "1.5"], [2, None]],
    }
    mapped = map_rows([row, {"id": 2, "addr": None}], NESTED)
    assert mapped.errors == {}
    assert mapped.batch.schema == schema_to_arrow(NESTED)
    assert mapped.batch.to_pylist() == [
        {
            "id": 1,
            "addr": {"city": "Lyon", "zip": 69000},
            "tags": ["a", "b"],
            "attrs": [("k", 1), ("l", 2)],
            "points": [{"x": 1.0}, None, {"x": 2.5}],
            "scores": [(1, Decimal("1.5")), (2, None)],
        },
        {"id": 2, "addr": None, "tags": None, "attrs": None, "points": None, "scores": None},
    ]


def test_null_struct_does_not_make_its_required_children_fail() -> None:
    mapped = map_rows([{"id": 1, "addr": None}, {"id": 2}], NESTED)
    assert mapped.errors == {}


def test_partial_rows_skip_required_checks_but_not_types() -> None:
    schema = Schema(NestedField(1, "id", LongType(), True), NestedField(2, "name", StringType(), True))
    mapped = map_rows([{"id": 1}, {"id": 2}, {"id": "x"}], schema, partial=[True, False, True])
    assert {i: (e.field, e.reason) for i, e in mapped.errors.items()} == {
        1: ("name", "required field is missing"),
        2: ("id", 'expected long, got string "x"'),
    }
    assert mapped.batch.column("id").to_pylist() == [1, 2, None]


def test_a_record_that_is_not_an_object_fails() -> None:
    mapped = map_rows([{"id": 1}, [1, 2]], Schema(NestedField(1, "id", LongType())))  # type: ignore[list-item]
    assert list(mapped.errors) == [1]
    assert str(mapped.errors[1]) == "expected a record (object), got array"
    assert mapped.errors[1].field is None


def test_only_the_first_error_of_a_record_is_kept() -> None:
    schema = Schema(NestedField(1, "a", LongType()), NestedField(2, "b", LongType()))
    mapped = map_rows([{"a": "x", "b": "y"}], schema)
    assert mapped.errors[0].field == "a"


def test_empty_input() -> None:
    mapped = map_rows([], NESTED)
    assert mapped.batch.num_rows == 0
    assert mapped.batch.schema == schema_to_arrow(NESTED)


@pytest.mark.parametrize(
    "unit, value, micros",
    [("s", 1, 1_000_000), ("ms", 1, 1_000), ("us", 1, 1), ("ns", 1_999, 1), ("ns", -1, -1), ("s", 1.25, 1_250_000)],
)
def test_epoch_units(unit: str, value: Any, micros: int) -> None:
    options = MappingOptions(epoch_unit=unit)  # type: ignore[arg-type]
    for values in ([value], [value, POISON]):
        column, _ = one_column(TimestamptzType(), values, options)
        assert column.cast(pa.int64())[0].as_py() == micros


def test_unknown_epoch_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="epoch_unit"):
        MappingOptions(epoch_unit="minutes")  # type: ignore[arg-type]


def test_decimal_json_numbers_keep_every_digit() -> None:
    digits = "1234567890123456789012345678.1234567891"
    column, errors = one_column(DecimalType(38, 10), [Decimal(digits), digits])
    assert errors == {}
    assert column.to_pylist() == [Decimal(digits), Decimal(digits)]


def test_huge_exponents_are_refused_quickly() -> None:
    column, errors = one_column(DecimalType(10, 2), ["1e999999999", "1e-999999999"])
    assert "does not fit" in errors[0].reason
    assert "fractional digits" in errors[1].reason


# ---------------------------------------------------------------------------
# Hypothesis: round trips from the table representation through wire forms
# ---------------------------------------------------------------------------

MIN_DAYS, MAX_DAYS = -719_162, 2_932_896  # 0001-01-01 .. 9999-12-31
MICROS_PER_DAY = 86_400_000_000


def _datetime(micros: int, tz: Any = None) -> dt.datetime:
    naive = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)
    return naive if tz is None else naive.replace(tzinfo=UTC).astimezone(tz)


def _iso_with_offset(micros: int, minutes: int) -> str:
    local = iso_timestamp(micros + minutes * 60_000_000)
    sign = "+" if minutes >= 0 else "-"
    return f"{local}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


timestamps = st.integers((MIN_DAYS + 1) * MICROS_PER_DAY, MAX_DAYS * MICROS_PER_DAY - 1)  # any zone stays in 1..9999
offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59)
zones = offsets.map(lambda m: dt.timezone(dt.timedelta(minutes=m)))


@st.composite
def decimal_cases(draw: st.DrawFn) -> tuple[DecimalType, Decimal, Any]:
    precision = draw(st.integers(1, 38))
    scale = draw(st.integers(0, precision))
    unscaled = draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    value = Decimal(unscaled).scaleb(-scale, context=decimal.Context(prec=40))
    wire = draw(st.sampled_from([str(value), value, f"{value:E}"] + ([int(value)] if scale == 0 else [])))
    return DecimalType(precision, scale), value, wire


def _cases(t: PrimitiveType, values: st.SearchStrategy, *wires: Any) -> st.SearchStrategy:
    """(type, table value, wire value); each wire maps a value to its encoding, or to a strategy of them."""

    @st.composite
    def case(draw: st.DrawFn) -> tuple[PrimitiveType, Any, Any]:
        value = draw(values)
        wire = draw(st.sampled_from(wires))(value)
        return t, value, draw(wire) if isinstance(wire, st.SearchStrategy) else wire

    return case()


ROUND_TRIPS = st.one_of(
    _cases(BooleanType(), st.booleans(), lambda v: v),
    _cases(IntegerType(), st.integers(-(2**31), 2**31 - 1), lambda v: v),
    _cases(LongType(), st.integers(-(2**63), 2**63 - 1), lambda v: v),
    _cases(FloatType(), st.floats(width=32, allow_nan=False), lambda v: v),
    _cases(DoubleType(), st.floats(allow_nan=False), lambda v: v, lambda v: Decimal(repr(v)) if math.isfinite(v) else v),
    decimal_cases(),
    _cases(DateType(), st.integers(MIN_DAYS, MAX_DAYS), lambda v: v, iso_date, lambda v: dt.date.fromordinal(v + 719_163)),
    _cases(TimeType(), st.integers(0, MICROS_PER_DAY - 1), iso_time, lambda v: _datetime(v).time()),
    _cases(TimestampType(), timestamps, iso_timestamp, lambda v: iso_timestamp(v) + "Z", _datetime),
    _cases(
        TimestamptzType(),
        timestamps,
        lambda v: iso_timestamp(v) + "+00:00",
        lambda v: offsets.map(lambda m: _iso_with_offset(v, m)),
        lambda v: zones.map(lambda z: _datetime(v, z)),
        lambda v: v // 1000 if v % 1000 == 0 else iso_timestamp(v) + "Z",
    ),
    _cases(StringType(), st.text(), lambda v: v),
    _cases(UUIDType(), st.uuids(), str, lambda v: v, lambda v: v.bytes),
    _cases(FixedType(4), st.binary(min_size=4, max_size=4), lambda v: v, lambda v: base64.b64encode(v).decode()),
    _cases(BinaryType(), st.binary(), lambda v: v, lambda v: base64.b64encode(v).decode()),
)


@settings(max_examples=400, deadline=None)
@given(cases=st.lists(ROUND_TRIPS, min_size=1, max_size=6))
def test_round_trip_through_wire_forms(cases: list[tuple[PrimitiveType, Any, Any]]) -> None:
    fields = [NestedField(i + 1, f"c{i}", t) for i, (t, _, _) in enumerate(cases)]
    row = {f"c{i}": wire for i, (_, _, wire) in enumerate(cases)}
    mapped = map_rows([row, row], Schema(*fields))
    assert mapped.errors == {}
    for i, (_, value, _) in enumerate(cases):
        assert table_repr(mapped.batch.column(i)) == [value, value]


# ---------------------------------------------------------------------------
# Hypothesis: Arrow's fast path agrees with the per-value converters
# ---------------------------------------------------------------------------

iso_like = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, off: f"{y}-{mo}-{d}{sep}{h}:{mi}{s}{frac}{off}",
    st.sampled_from(["2024", "1970", "0000", "9999", "+2024", "24"]),
    st.sampled_from(["01", "02", "12", "13", "1"]),
    st.sampled_from(["01", "29", "30", "31", "00"]),
    st.sampled_from(["T", " ", "t", "", "x"]),
    st.sampled_from(["00", "23", "24", "7"]),
    st.sampled_from(["00", "59", "60"]),
    st.sampled_from(["", ":00", ":59", ":60", ":5"]),
    st.sampled_from(["", ".", ".5", ".123456", ".1234567", ".123456789"]),
    st.sampled_from(["", "Z", "z", "+00:00", "-00:00", "+02:00", "+0200", "+02", "+24:00", "-12:30", " +01:00"]),
)
wire_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(-(10**6), 10**6),
    st.floats(),
    st.decimals(allow_nan=True),
    st.text(max_size=8),
    st.from_regex(r"[+-]?\d{0,4}(\.\d{0,4})?([eE][+-]?\d{1,2})?", fullmatch=True),
    st.from_regex(r"\d{4}-\d{2}-\d{2}", fullmatch=True),
    iso_like,
    iso_like.map(lambda s: s[:10]),
    st.binary(max_size=5),
    st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), zones)),
)
FAST_TYPES = [
    BooleanType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    DecimalType(9, 3),
    DecimalType(38, 0),
    StringType(),
    DateType(),
    TimestampType(),
    TimestamptzType(),
    BinaryType(),
    FixedType(3),
]


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("unit", ["s", "ns"])
@pytest.mark.parametrize("t", FAST_TYPES, ids=str)
@settings(max_examples=150, deadline=None)
@given(pool=st.lists(wire_values, min_size=1, max_size=4), picks=st.lists(st.integers(0, 3), max_size=8))
def test_fast_path_accepts_only_what_the_converter_accepts(
    t: PrimitiveType, unit: str, pool: list[Any], picks: list[int]
) -> None:
    values = [pool[i % len(pool)] for i in picks] or pool  # repeats make homogeneous columns likely
    options = MappingOptions(epoch_unit=unit)  # type: ignore[arg-type]
    fast = fast_column(values, t, options)
    event("fast path" if fast is not None else "per-value path")
    if fast is None:
        return
    convert = value_converter(t, options)
    expected = pa.array([None if v is None else convert(v) for v in values], type_to_arrow(t))
    assert fast.type == expected.type
    assert all(_same(a, b) for a, b in zip(table_repr(fast), table_repr(expected))), values


def test_map_rows_refuses_unknown_supplied_columns() -> None:
    with pytest.raises(ValueError, match="not top-level columns"):
        map_rows([{}], Schema(NestedField(1, "c", LongType())), columns={"nope": [1]})
