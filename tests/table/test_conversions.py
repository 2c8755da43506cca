"""Appendix D single-value serialization: vectors, round trips, pyiceberg oracle."""

from __future__ import annotations

import datetime
import json
import math
import struct
import uuid
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg import conversions as oracle
from pyiceberg import types as ptypes
from pyiceberg.utils import datetime as odt

from table.conversions import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    MICROS_PER_DAY,
    civil_from_days,
    days_from_civil,
    from_bytes,
    from_json,
    iso_date,
    min_twos_complement,
    shortest_float32,
    to_bytes,
    to_json,
    unscaled_to_decimal,
)
from table.errors import ValidationError
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

UUID_SPEC = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
TS_2017 = 1510871468123456  # 2017-11-16T22:31:08.123456 UTC


def decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = 10**precision - 1
    return st.integers(-bound, bound).map(lambda u: Decimal(f"{u}E{-scale}"))


float32s = st.floats(width=32, allow_nan=False)

# (type, strategy of valid Python values) for every primitive type.
CASES = [
    (BooleanType(), st.booleans()),
    (IntegerType(), st.integers(INT_MIN, INT_MAX)),
    (LongType(), st.integers(LONG_MIN, LONG_MAX)),
    (FloatType(), float32s),
    (DoubleType(), st.floats(allow_nan=False)),
    (DecimalType(9, 2), decimals(9, 2)),
    (DecimalType(38, 10), decimals(38, 10)),
    (DecimalType(5, 0), decimals(5, 0)),
    (DateType(), st.integers(INT_MIN, INT_MAX)),
    (TimeType(), st.integers(0, MICROS_PER_DAY - 1)),
    (TimestampType(), st.integers(LONG_MIN, LONG_MAX)),
    (TimestamptzType(), st.integers(LONG_MIN, LONG_MAX)),
    (StringType(), st.text()),
    (UUIDType(), st.uuids()),
    (FixedType(3), st.binary(min_size=3, max_size=3)),
    (BinaryType(), st.binary()),
]
IDS = [str(t) for t, _ in CASES]


def same(a: object, b: object) -> bool:
    """Equality that also requires a Decimal to keep its exponent (its scale)."""
    if isinstance(a, Decimal):
        return isinstance(b, Decimal) and a == b and a.as_tuple().exponent == b.as_tuple().exponent
    return type(a) is type(b) and a == b


# ------------------------------------------------------------ binary vectors


@pytest.mark.parametrize(
    "t, value, expected",
    [
        (BooleanType(), True, "01"),
        (BooleanType(), False, "00"),
        (IntegerType(), 34, "22000000"),
        (IntegerType(), -1, "ffffffff"),
        (LongType(), 34, "2200000000000000"),
        (FloatType(), 1.0, "0000803f"),
        (DoubleType(), 1.0, "000000000000f03f"),
        (DateType(), 17486, "4e440000"),  # 2017-11-16
        (TimeType(), 81068000000, "008307e012000000"),  # 22:31:08
        (TimestampType(), 1510871468000000, "00c3262d215e0500"),
        (TimestamptzType(), 1510871468000000, "00c3262d215e0500"),
        (StringType(), "iceberg", "69636562657267"),
        (StringType(), "", ""),
        (UUIDType(), UUID_SPEC, "f79c3e09677c4bbda4793f349cb785e7"),
        (FixedType(4), b"\x00\x01\x02\x03", "00010203"),
        (BinaryType(), b"\x00\x01\x02\x03", "00010203"),
        (DecimalType(4, 2), Decimal("14.20"), "058c"),
        (DecimalType(9, 2), Decimal("-0.01"), "ff"),
        (DecimalType(9, 2), Decimal("0.00"), "00"),
        (DecimalType(9, 0), Decimal("127"), "7f"),
        (DecimalType(9, 0), Decimal("128"), "0080"),
        (DecimalType(9, 0), Decimal("-128"), "80"),
        (DecimalType(9, 0), Decimal("-129"), "ff7f"),
    ],
)
def test_binary_vectors(t, value, expected):
    assert to_bytes(t, value).hex() == expected
    assert same(from_bytes(t, bytes.fromhex(expected)), value)


def test_decimal_is_rescaled_to_the_type_scale_without_rounding():
    assert to_bytes(DecimalType(4, 2), Decimal("14.2")) == to_bytes(DecimalType(4, 2), Decimal("14.20"))
    with pytest.raises(ValidationError, match="more than 2 fractional digits"):
        to_bytes(DecimalType(9, 2), Decimal("1.005"))
    with pytest.raises(ValidationError, match="does not fit decimal\\(4,2\\)"):
        to_bytes(DecimalType(4, 2), Decimal("100.00"))
    with pytest.raises(ValidationError, match="finite"):
        to_bytes(DecimalType(4, 2), Decimal("NaN"))


def test_promoted_columns_read_narrow_bounds():
    # A bound written while the column was int/float stays 4 bytes after promotion.
    assert from_bytes(LongType(), to_bytes(IntegerType(), -7)) == -7
    assert from_bytes(DoubleType(), to_bytes(FloatType(), 1.5)) == 1.5


@pytest.mark.parametrize(
    "t, data, reason",
    [
        (IntegerType(), b"\x01\x02", "4 bytes"),
        (LongType(), b"\x01\x02\x03", "8 bytes"),
        (BooleanType(), b"", "1 byte"),
        (UUIDType(), b"\x00" * 15, "16 bytes"),
        (FixedType(2), b"\x00\x01\x02", "more than 2"),
        (DecimalType(9, 2), b"", "empty"),
        (StringType(), b"\xff", "UTF-8"),
    ],
)
def test_from_bytes_rejects_malformed_bounds(t, data, reason):
    with pytest.raises(ValidationError, match=reason):
        from_bytes(t, data)


@pytest.mark.parametrize(
    "t, value, reason",
    [
        (IntegerType(), 2**31, "out of range"),
        (IntegerType(), True, "must be an int"),
        (LongType(), "1", "must be an int"),
        (TimeType(), MICROS_PER_DAY, "out of range"),
        (FloatType(), 1e39, "cannot be stored"),
        (FixedType(4), b"\x00", "4 bytes"),
        (UUIDType(), "f79c3e09-677c-4bbd-a479-3f349cb785e7", "UUID"),
        (StringType(), "\ud800", "not valid Unicode"),
        (BooleanType(), None, "null"),
        (StructType(), (), "not defined"),
    ],
)
def test_to_bytes_rejects_invalid_values(t, value, reason):
    with pytest.raises(ValidationError, match=reason):
        to_bytes(t, value)


@pytest.mark.parametrize("t, strategy", CASES, ids=IDS)
@settings(max_examples=60)
@given(data=st.data())
def test_binary_round_trip(t, strategy, data):
    value = data.draw(strategy)
    assert same(from_bytes(t, to_bytes(t, value)), value)


def test_nan_round_trips_through_bytes():
    assert math.isnan(from_bytes(DoubleType(), to_bytes(DoubleType(), math.nan)))
    assert math.isnan(from_bytes(FloatType(), to_bytes(FloatType(), math.nan)))


_ORACLE_TYPES = {
    "boolean": ptypes.BooleanType(),
    "int": ptypes.IntegerType(),
    "long": ptypes.LongType(),
    "float": ptypes.FloatType(),
    "double": ptypes.DoubleType(),
    "decimal(9,2)": ptypes.DecimalType(9, 2),
    "decimal(38,10)": ptypes.DecimalType(38, 10),
    "decimal(5,0)": ptypes.DecimalType(5, 0),
    "date": ptypes.DateType(),
    "time": ptypes.TimeType(),
    "timestamp": ptypes.TimestampType(),
    "timestamptz": ptypes.TimestamptzType(),
    "string": ptypes.StringType(),
    "uuid": ptypes.UUIDType(),
    "fixed[3]": ptypes.FixedType(3),
    "binary": ptypes.BinaryType(),
}


@pytest.mark.parametrize("t, strategy", CASES, ids=IDS)
@settings(max_examples=40)
@given(data=st.data())
def test_binary_matches_pyiceberg(t, strategy, data):
    value = data.draw(strategy)
    assert to_bytes(t, value) == oracle.to_bytes(_ORACLE_TYPES[str(t)], value)


# ----------------------------------------------------------------- JSON form


@pytest.mark.parametrize(
    "t, value, expected",
    [
        (BooleanType(), True, True),
        (IntegerType(), 34, 34),
        (LongType(), 34, 34),
        (FloatType(), 1.0, 1.0),
        (DoubleType(), 1.0, 1.0),
        (DecimalType(4, 2), Decimal("14.20"), "14.20"),
        (DecimalType(10, 8), Decimal("0.00000001"), "0.00000001"),
        (DecimalType(3, -20), Decimal("2E+20"), "2E+20"),
        (DateType(), 17486, "2017-11-16"),
        (TimeType(), 81068123456, "22:31:08.123456"),
        (TimeType(), 81068000000, "22:31:08"),
        (TimestampType(), TS_2017, "2017-11-16T22:31:08.123456"),
        (TimestamptzType(), TS_2017, "2017-11-16T22:31:08.123456+00:00"),
        (StringType(), "iceberg", "iceberg"),
        (UUIDType(), UUID_SPEC, "f79c3e09-677c-4bbd-a479-3f349cb785e7"),
        (FixedType(4), b"\x00\x01\x02\xff", "000102ff"),
        (BinaryType(), b"\x00\x01\x02\xff", "000102ff"),
    ],
)
def test_json_vectors(t, value, expected):
    assert to_json(t, value) == expected
    assert same(from_json(t, expected), value)


def test_float_json_matches_java_float_to_string():
    # 0.1f is 0.100000001490116...; Java writes "0.1", and so must we.
    value = struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert json.dumps(to_json(FloatType(), value)) == "0.1"
    assert from_json(FloatType(), 0.1) == value


@pytest.mark.parametrize(
    "t, text, expected",
    [
        (TimestamptzType(), "2017-11-16T22:31:08.123456Z", TS_2017),
        (TimestamptzType(), "2017-11-16T22:31:08.123456-00:00", TS_2017),
        (TimestampType(), "2017-11-16T22:31", 1510871460000000),
        (TimeType(), "22:31:08.1", 81068100000),
        (TimeType(), "22:31:08.123456000", 81068123456),
        (DateType(), "+10000-01-01", days_from_civil(10000, 1, 1)),
        (DateType(), "-0001-12-31", days_from_civil(-1, 12, 31)),
        (FixedType(2), "00FF", b"\x00\xff"),
        (FloatType(), 2, 2.0),
    ],
)
def test_json_parses_other_valid_forms(t, text, expected):
    assert from_json(t, text) == expected


@pytest.mark.parametrize(
    "t, json_value, reason",
    [
        (TimestamptzType(), "2017-11-16T22:31:08+01:00", "offset must be \\+00:00"),
        (TimestamptzType(), "2017-11-16T22:31:08", "with zone offset"),
        (TimestampType(), "2017-11-16T22:31:08+00:00", "without zone"),
        (DateType(), "2017-02-29", "invalid date"),
        (DateType(), "2017-13-01", "invalid date"),
        (TimeType(), "24:00:00", "invalid time"),
        (TimeType(), "22:31:08.1234567", "finer than microsecond"),
        (DecimalType(4, 2), "14.2", "scale 2"),
        (DecimalType(4, 2), "abc", "not a decimal"),
        (DecimalType(4, 2), 14.2, "must be str"),
        (IntegerType(), 2**31, "out of range"),
        (IntegerType(), 1.0, "must be an int"),
        (LongType(), True, "must be an int"),
        (BooleanType(), 1, "must be bool"),
        (FixedType(2), "000102", "2 bytes"),
        (BinaryType(), "0g", "hexadecimal"),
        (UUIDType(), "f79c3e09677c4bbda4793f349cb785e7", "36-character"),
        (FloatType(), "1.0", "must be a float"),
        (FloatType(), 1e39, "cannot be stored"),
    ],
)
def test_from_json_rejects_invalid(t, json_value, reason):
    with pytest.raises(ValidationError, match=reason):
        from_json(t, json_value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_have_no_json_form(value):
    with pytest.raises(ValidationError, match="no JSON representation"):
        to_json(DoubleType(), value)


@pytest.mark.parametrize("t, strategy", CASES, ids=IDS)
@settings(max_examples=60)
@given(data=st.data())
def test_json_round_trip_through_text(t, strategy, data):
    value = data.draw(strategy)
    if isinstance(t, (FloatType, DoubleType)) and not math.isfinite(value):
        return
    text = json.dumps(to_json(t, value))
    assert same(from_json(t, json.loads(text)), value)


@settings(max_examples=200)
@given(st.integers(INT_MIN, INT_MAX))
def test_calendar_inverse_and_python_agreement(days):
    year, month, day = civil_from_days(days)
    assert days_from_civil(year, month, day) == days
    if 1 <= year <= 9999:
        python = datetime.date(1970, 1, 1) + datetime.timedelta(days=days)
        assert (year, month, day) == (python.year, python.month, python.day)
        assert iso_date(days) == python.isoformat()


@settings(max_examples=100)
@given(st.datetimes(min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31)))
def test_temporal_json_agrees_with_pyiceberg_parsers(moment):
    micros = odt.datetime_to_micros(moment)
    assert odt.timestamp_to_micros(to_json(TimestampType(), micros)) == micros
    assert odt.timestamptz_to_micros(to_json(TimestamptzType(), micros)) == micros
    days = odt.date_to_days(moment.date())
    assert odt.date_str_to_days(to_json(DateType(), days)) == days
    time_micros = odt.time_to_micros(moment.time())
    assert odt.time_str_to_micros(to_json(TimeType(), time_micros)) == time_micros


def test_nested_json_round_trip():
    struct_type = StructType(
        NestedField(1, "a", IntegerType(), True),
        NestedField(2, "b", StringType(), False),
    )
    assert to_json(struct_type, (1, None)) == {"1": 1}
    assert from_json(struct_type, {"1": 1, "2": "bar"}) == (1, "bar")
    list_type = ListType(3, DateType(), True)
    assert to_json(list_type, [0, 1]) == ["1970-01-01", "1970-01-02"]
    assert from_json(list_type, ["1970-01-02"]) == [1]
    map_type = MapType(4, StringType(), 5, DecimalType(3, 1), False)
    encoded = to_json(map_type, {"a": Decimal("1.5"), "b": None})
    assert encoded == {"keys": ["a", "b"], "values": ["1.5", None]}
    assert from_json(map_type, encoded) == {"a": Decimal("1.5"), "b": None}
    with pytest.raises(ValidationError, match="equal length"):
        from_json(map_type, {"keys": ["a"], "values": []})
    with pytest.raises(ValidationError, match="needs 2 fields"):
        to_json(struct_type, (1,))


# ---------------------------------------------------------------- helpers


@given(st.integers(-(2**130), 2**130))
def test_min_twos_complement_is_minimal_and_exact(value):
    data = min_twos_complement(value)
    assert int.from_bytes(data, "big", signed=True) == value
    if len(data) > 1:  # one byte fewer cannot hold it
        with pytest.raises(OverflowError):
            value.to_bytes(len(data) - 1, "big", signed=True)


@given(st.integers(-(10**38) + 1, 10**38 - 1), st.integers(-5, 38))
def test_unscaled_to_decimal_is_exact_beyond_context_precision(unscaled, scale):
    value = unscaled_to_decimal(unscaled, scale)
    assert same(value, Decimal(f"{unscaled}E{-scale}"))  # string parsing is exact


@given(float32s)
def test_shortest_float32_reads_back_to_the_same_float(value):
    short = shortest_float32(value)
    assert struct.pack("<f", short) == struct.pack("<f", value)
    assert len(repr(short)) <= len(repr(value))
