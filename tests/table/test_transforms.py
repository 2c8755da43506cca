"""Partition transforms: spec vectors, Java's human strings, pyiceberg as oracle,
Arrow/Python agreement and the soundness of inclusive projection."""

from __future__ import annotations

import math
import re
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pyiceberg import transforms as otr
from pyiceberg import types as ptypes

from table.conversions import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    MICROS_PER_DAY,
    days_from_civil,
)
from table.errors import SchemaError, ValidationError
from table.evaluators import row_matches
from table.expressions import BooleanExpression, BoundPredicate, BoundReference, Operation, bind_set
from table.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
    bucket_hash,
    parse_transform,
)
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
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)


def micros(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> int:
    return ((days_from_civil(y, mo, d) * 24 + h) * 60 + mi) * 60_000_000 + s * 1_000_000 + us


def dec(text: str) -> Decimal:
    return Decimal(text)


TS = micros(2017, 11, 16, 22, 31, 8)
UUID_SPEC = uuid.UUID("f79c3e09-677c-4bbd-a479-3f349cb785e7")
TIME_OF_DAY = (22 * 3600 + 31 * 60 + 8) * 1_000_000


# ---------------------------------------------------------- Appendix B vectors


@pytest.mark.parametrize(
    "t, value, expected",
    [
        (IntegerType(), 34, 2017239379),
        (LongType(), 34, 2017239379),
        (DecimalType(4, 2), dec("14.20"), -500754589),
        (DateType(), days_from_civil(2017, 11, 16), -653330422),
        (TimeType(), TIME_OF_DAY, -662762989),
        (TimestampType(), TS, -2047944441),
        (TimestamptzType(), micros(2017, 11, 16, 14, 31, 8) + 8 * 3_600_000_000, -2047944441),
        (StringType(), "iceberg", 1210000089),
        (UUIDType(), UUID_SPEC, 1488055340),
        (FixedType(4), bytes([0, 1, 2, 3]), -188683207),
        (BinaryType(), bytes([0, 1, 2, 3]), -188683207),
        # Types that are not bucketable in v2 still have specified hashes.
        (BooleanType(), True, 1392991556),
        (FloatType(), 1.0, -142385009),
        (FloatType(), 0.0, 1669671676),
        (FloatType(), -0.0, 1669671676),
        (DoubleType(), 1.0, -142385009),
        (DoubleType(), 0.0, 1669671676),
        (DoubleType(), -0.0, 1669671676),
    ],
)
def test_appendix_b_hash_vectors(t, value, expected):
    assert bucket_hash(t, value) == expected


def test_uuid_hash_uses_big_endian_bytes():
    assert UUID_SPEC.bytes.hex().upper() == "F79C3E09677C4BBDA4793F349CB785E7"


def test_nan_hashes_canonically():
    other_nan = struct.unpack("<d", struct.pack("<q", 0x7FF8000000000001))[0]
    assert bucket_hash(DoubleType(), other_nan) == bucket_hash(DoubleType(), math.nan)


def test_decimal_bucket_uses_minimal_bytes_for_negative_powers_of_two():
    # -1.28 has unscaled -128 = 0x80 (one byte); Java/Spark put it in bucket 13.
    assert BucketTransform(16).apply(DecimalType(5, 2), dec("-1.28")) == 13
    assert BucketTransform(16).apply(DecimalType(5, 3), dec("-0.001")) == 13  # 0xff
    assert BucketTransform(16).apply(DecimalType(5, 3), dec("0.128")) == 5  # 0x00 0x80
    arrow = pa.array([dec("-1.28"), dec("0.13"), None], pa.decimal128(5, 2))
    assert BucketTransform(16).apply_arrow(arrow).to_pylist() == [
        13,
        BucketTransform(16).apply(DecimalType(5, 2), dec("0.13")),
        None,
    ]


@given(st.integers(INT_MIN, INT_MAX), st.integers(1, 1000))
def test_int_and_long_buckets_agree(value, n):
    bucket = BucketTransform(n)
    assert bucket.apply(IntegerType(), value) == bucket.apply(LongType(), value)


def test_bucket_is_masked_hash_mod_n():
    # hash(34) = 2017239379 (positive), hash("iceberg") = 1210000089
    assert BucketTransform(16).apply(IntegerType(), 34) == 2017239379 % 16
    # negative hash: the sign bit is dropped, not the absolute value taken
    assert BucketTransform(100).apply(DateType(), 17486) == (-653330422 & 0x7FFFFFFF) % 100


@pytest.mark.parametrize("t", [FloatType(), DoubleType(), BooleanType(), ListType(1, IntegerType())])
def test_bucket_rejects_types_v2_does_not_hash(t):
    assert not BucketTransform(4).can_transform(t)
    with pytest.raises(SchemaError, match=r"bucket\[4\] cannot be applied to source type"):
        BucketTransform(4).bind(t)


# ------------------------------------------------------------------ truncate


@pytest.mark.parametrize(
    "t, width, value, expected",
    [
        (IntegerType(), 10, 1, 0),
        (IntegerType(), 10, -1, -10),
        (IntegerType(), 10, -10, -10),
        (LongType(), 10, 1, 0),
        (LongType(), 10, -1, -10),
        (DecimalType(9, 2), 50, dec("10.65"), dec("10.50")),
        (DecimalType(9, 2), 50, dec("-0.01"), dec("-0.50")),
        (DecimalType(9, 2), 10, dec("12.3"), dec("12.30")),  # rescaled to the type's scale
        (StringType(), 3, "iceberg", "ice"),
        (StringType(), 3, "ic", "ic"),
        (StringType(), 2, "\U0001f600a\U0001f600", "\U0001f600a"),  # code points, not bytes
        (BinaryType(), 2, b"\x00\x01\x02", b"\x00\x01"),
    ],
)
def test_truncate_spec_examples(t, width, value, expected):
    result = TruncateTransform(width).apply(t, value)
    assert result == expected and type(result) is type(expected)
    if isinstance(expected, Decimal):
        assert result.as_tuple().exponent == expected.as_tuple().exponent


def test_truncate_wraps_like_java_at_the_long_minimum():
    # Java: MIN - ((MIN % 10 + 10) % 10) = MIN - 2, which overflows to MAX - 1.
    assert TruncateTransform(10).apply(LongType(), LONG_MIN) == LONG_MAX - 1
    assert TruncateTransform(10).apply_arrow(pa.array([LONG_MIN])).to_pylist() == [LONG_MAX - 1]


def test_truncate_refuses_a_decimal_that_overflows_its_precision():
    with pytest.raises(ValidationError, match=r"truncate\[10\] of -99.91 does not fit decimal\(4,2\)"):
        TruncateTransform(10).apply(DecimalType(4, 2), dec("-99.91"))
    assert TruncateTransform(10).apply(DecimalType(4, 2), dec("-99.90")) == dec("-99.90")


@pytest.mark.parametrize("t", [FixedType(4), UUIDType(), DateType(), DoubleType()])
def test_truncate_rejects_unsupported_sources(t):
    with pytest.raises(SchemaError, match=rf"truncate\[4\] cannot be applied to source type {re.escape(str(t))}"):
        TruncateTransform(4).result_type(t)


# ------------------------------------------------------------------ temporal


@pytest.mark.parametrize(
    "transform, t, value, expected",
    [
        (YearTransform(), DateType(), days_from_civil(2017, 12, 1), 47),
        (MonthTransform(), DateType(), days_from_civil(2017, 12, 1), 575),
        (DayTransform(), DateType(), days_from_civil(2017, 12, 1), 17501),
        (YearTransform(), TimestampType(), micros(2017, 12, 1, 10, 12, 55), 47),
        (MonthTransform(), TimestamptzType(), micros(2017, 12, 1, 10, 12, 55), 575),
        (DayTransform(), TimestampType(), micros(2017, 12, 1, 10, 12, 55), 17501),
        (HourTransform(), TimestampType(), micros(2017, 12, 1, 10, 12, 55), 420034),
        # before the epoch, ordinals round down
        (YearTransform(), DateType(), -1, -1),
        (MonthTransform(), DateType(), -1, -1),
        (DayTransform(), TimestampType(), -1, -1),
        (HourTransform(), TimestampType(), -1, -1),
        (YearTransform(), TimestampType(), -1, -1),
        (MonthTransform(), TimestampType(), micros(1969, 1, 1), -12),
        (HourTransform(), TimestamptzType(), -3_600_000_000, -1),
        (HourTransform(), TimestamptzType(), -3_600_000_001, -2),
    ],
)
def test_temporal_values(transform, t, value, expected):
    assert transform.apply(t, value) == expected


def test_temporal_result_types_follow_java():
    assert DayTransform().result_type(TimestampType()) == DateType()
    for transform in (YearTransform(), MonthTransform(), HourTransform()):
        assert transform.result_type(TimestamptzType()) == IntegerType()


def test_hour_needs_a_timestamp():
    assert not HourTransform().can_transform(DateType())
    with pytest.raises(SchemaError, match="hour cannot be applied to source type date"):
        HourTransform().apply(DateType(), 1)


@pytest.mark.parametrize("transform", [YearTransform(), DayTransform(), BucketTransform(3)])
def test_apply_rejects_values_of_the_wrong_kind(transform):
    with pytest.raises(ValidationError):
        transform.apply(DateType(), "2017-01-01")


def test_null_maps_to_null_everywhere():
    for transform, t in [
        (IdentityTransform(), StringType()),
        (BucketTransform(2), StringType()),
        (TruncateTransform(2), StringType()),
        (YearTransform(), DateType()),
        (HourTransform(), TimestampType()),
        (VoidTransform(), LongType()),
    ]:
        assert transform.apply(t, None) is None
        assert transform.to_human_string(t, None) == "null"


def test_void_is_always_null_and_keeps_the_source_type():
    assert VoidTransform().apply(LongType(), 5) is None
    assert VoidTransform().result_type(StringType()) == StringType()
    assert VoidTransform().to_human_string(LongType(), None) == "null"


# ------------------------------------------------------- human-readable text


@pytest.mark.parametrize(
    "transform, t, value, expected",
    [
        (YearTransform(), DateType(), 47, "2017"),
        (YearTransform(), DateType(), -1, "1969"),
        (MonthTransform(), DateType(), 575, "2017-12"),
        (MonthTransform(), DateType(), -1, "1969-12"),
        (DayTransform(), DateType(), 17501, "2017-12-01"),
        (DayTransform(), DateType(), -2, "1969-12-30"),
        (HourTransform(), TimestampType(), 420034, "2017-12-01-10"),
        (HourTransform(), TimestampType(), -1, "1969-12-31-23"),
        (BucketTransform(16), StringType(), 3, "3"),
        (TruncateTransform(3), StringType(), "ice", "ice"),
        (TruncateTransform(3), BinaryType(), b"\x01\x02\x03", "AQID"),
        (TruncateTransform(50), DecimalType(9, 2), dec("-1.50"), "-1.50"),
        (IdentityTransform(), DateType(), 17501, "2017-12-01"),
        (IdentityTransform(), TimeType(), 36775038194, "10:12:55.038194"),
        (IdentityTransform(), TimeType(), 36000000000, "10:00"),
        (IdentityTransform(), TimeType(), 36000500000, "10:00:00.500"),
        (IdentityTransform(), TimeType(), 36001000000, "10:00:01"),
        (IdentityTransform(), TimestampType(), micros(2017, 12, 1, 10, 12, 55, 38194), "2017-12-01T10:12:55.038194"),
        (IdentityTransform(), TimestampType(), micros(2017, 12, 1, 10, 12), "2017-12-01T10:12:00"),
        (
            IdentityTransform(),
            TimestamptzType(),
            micros(2017, 12, 1, 10, 12, 55, 38194),
            "2017-12-01T10:12:55.038194+00:00",
        ),
        (IdentityTransform(), StringType(), "a/b c", "a/b c"),
        (IdentityTransform(), BooleanType(), True, "true"),
        (IdentityTransform(), LongType(), -5, "-5"),
        (IdentityTransform(), UUIDType(), UUID_SPEC, "f79c3e09-677c-4bbd-a479-3f349cb785e7"),
        (IdentityTransform(), FixedType(3), b"\x01\x02\x03", "AQID"),
        (IdentityTransform(), DecimalType(9, 2), dec("14.2"), "14.20"),
        (IdentityTransform(), DecimalType(10, 8), dec("0.00000001"), "1E-8"),  # BigDecimal.toString
        (IdentityTransform(), DoubleType(), 1.0, "1.0"),
        (IdentityTransform(), DoubleType(), 100.0, "100.0"),
        (IdentityTransform(), DoubleType(), 0.001, "0.001"),
        (IdentityTransform(), DoubleType(), 1.5e-4, "1.5E-4"),
        (IdentityTransform(), DoubleType(), 1e7, "1.0E7"),
        (IdentityTransform(), DoubleType(), 12345678.9, "1.23456789E7"),
        (IdentityTransform(), DoubleType(), -0.0, "-0.0"),
        (IdentityTransform(), DoubleType(), math.inf, "Infinity"),
        (IdentityTransform(), DoubleType(), math.nan, "NaN"),
        (IdentityTransform(), FloatType(), struct.unpack("<f", struct.pack("<f", 0.1))[0], "0.1"),
    ],
)
def test_human_strings_match_java(transform, t, value, expected):
    assert transform.to_human_string(t, value) == expected


_PY_TEMPORAL = {
    "year": otr.YearTransform(),
    "month": otr.MonthTransform(),
    "day": otr.DayTransform(),
    "hour": otr.HourTransform(),
}


@pytest.mark.parametrize("name", sorted(_PY_TEMPORAL))
@given(ordinal=st.integers(-200_000, 200_000))
def test_temporal_human_strings_match_pyiceberg(name, ordinal):
    ours = parse_transform(name)
    assert ours.to_human_string(TimestampType(), ordinal) == _PY_TEMPORAL[name].to_human_string(
        ptypes.TimestampType(), ordinal
    )


# ----------------------------------------------------- names, parsing, equality


@pytest.mark.parametrize(
    "text, transform",
    [
        ("identity", IdentityTransform()),
        ("bucket[16]", BucketTransform(16)),
        ("truncate[10]", TruncateTransform(10)),
        ("year", YearTransform()),
        ("month", MonthTransform()),
        ("day", DayTransform()),
        ("hour", HourTransform()),
        ("void", VoidTransform()),
    ],
)
def test_parse_and_str_round_trip(text, transform):
    assert parse_transform(text) == transform
    assert str(transform) == text
    assert hash(parse_transform(text)) == hash(transform)
    assert parse_transform(text.upper()) == transform


def test_equality_is_by_name():
    assert BucketTransform(16) != BucketTransform(8)
    assert TruncateTransform(16) != BucketTransform(16)
    assert {DayTransform(), DayTransform(), HourTransform()} == {DayTransform(), HourTransform()}
    assert DayTransform().dedup_name == HourTransform().dedup_name == "time"
    assert BucketTransform(2).dedup_name == "bucket[2]"


@pytest.mark.parametrize("text", ["bucket", "bucket[0]", "truncate[-1]", "zorder", "bucket[x]", ""])
def test_parse_rejects_unknown_or_invalid(text):
    with pytest.raises(SchemaError):
        parse_transform(text)


def test_preserves_order():
    ordered = [IdentityTransform(), TruncateTransform(2), YearTransform(), MonthTransform()]
    assert all(t.preserves_order for t in ordered + [DayTransform(), HourTransform()])
    assert not BucketTransform(2).preserves_order
    assert not VoidTransform().preserves_order


# ------------------------------------------------------------ pyiceberg oracle

float32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


def decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    bound = 10**precision - 1
    return st.integers(-bound, bound).map(lambda u: Decimal(f"{u}E{-scale}"))


# Python's datetime (which pyiceberg uses) spans years 1..9999.
PY_MIN_DAY, PY_MAX_DAY = days_from_civil(1, 1, 1), days_from_civil(9999, 12, 31)

# (our type, pyiceberg type, values, Arrow type)
SOURCES = {
    "int": (IntegerType(), ptypes.IntegerType(), st.integers(INT_MIN, INT_MAX), pa.int32()),
    "long": (LongType(), ptypes.LongType(), st.integers(LONG_MIN, LONG_MAX), pa.int64()),
    "decimal": (
        DecimalType(18, 3),
        ptypes.DecimalType(18, 3),
        # truncating values within W of the smallest one overflows (tested apart)
        st.integers(-(10**18) + 100, 10**18 - 1).map(lambda u: Decimal(f"{u}E-3")),
        pa.decimal128(18, 3),
    ),
    "date": (DateType(), ptypes.DateType(), st.integers(PY_MIN_DAY, PY_MAX_DAY), pa.date32()),
    "time": (TimeType(), ptypes.TimeType(), st.integers(0, MICROS_PER_DAY - 1), pa.time64("us")),
    "timestamp": (
        TimestampType(),
        ptypes.TimestampType(),
        st.integers(PY_MIN_DAY * MICROS_PER_DAY, (PY_MAX_DAY + 1) * MICROS_PER_DAY - 1),
        pa.timestamp("us"),
    ),
    "timestamptz": (
        TimestamptzType(),
        ptypes.TimestamptzType(),
        st.integers(PY_MIN_DAY * MICROS_PER_DAY, (PY_MAX_DAY + 1) * MICROS_PER_DAY - 1),
        pa.timestamp("us", tz="UTC"),
    ),
    "string": (StringType(), ptypes.StringType(), st.text(max_size=12), pa.string()),
    "uuid": (UUIDType(), ptypes.UUIDType(), st.uuids(), pa.uuid()),
    "fixed": (FixedType(5), ptypes.FixedType(5), st.binary(min_size=5, max_size=5), pa.binary(5)),
    "binary": (BinaryType(), ptypes.BinaryType(), st.binary(max_size=12), pa.binary()),
}

ORACLE_TRANSFORMS: list[tuple[Transform, Any]] = [
    (BucketTransform(16), otr.BucketTransform(16)),
    (BucketTransform(7), otr.BucketTransform(7)),
    (TruncateTransform(10), otr.TruncateTransform(10)),
    (TruncateTransform(3), otr.TruncateTransform(3)),
    (YearTransform(), otr.YearTransform()),
    (MonthTransform(), otr.MonthTransform()),
    (DayTransform(), otr.DayTransform()),
    (HourTransform(), otr.HourTransform()),
    (IdentityTransform(), otr.IdentityTransform()),
]
PAIRS = [
    (ours, theirs, source)
    for ours, theirs in ORACLE_TRANSFORMS
    for source in SOURCES
    if ours.can_transform(SOURCES[source][0])
]
PAIR_IDS = [f"{ours}-{source}" for ours, _, source in PAIRS]


@pytest.mark.parametrize("ours, theirs, source", PAIRS, ids=PAIR_IDS)
@settings(max_examples=30)
@given(data=st.data())
def test_apply_matches_pyiceberg(ours, theirs, source, data):
    t, pt, values, _ = SOURCES[source]
    assert theirs.can_transform(pt)
    value = data.draw(values)
    if isinstance(ours, TruncateTransform) and isinstance(value, int):
        # Java (and we) wrap around below the minimum; pyiceberg does not.
        assume(value - value % ours.width >= (INT_MIN if isinstance(t, IntegerType) else LONG_MIN))
    assert ours.apply(t, value) == theirs.transform(pt)(value)


@pytest.mark.parametrize("ours, theirs, source", PAIRS, ids=PAIR_IDS)
@settings(max_examples=15)
@given(data=st.data())
def test_apply_arrow_matches_apply(ours, theirs, source, data):
    t, _, values, arrow_type = SOURCES[source]
    items = data.draw(st.lists(st.one_of(st.none(), values), max_size=20))
    array = pa.array([_to_arrow_value(source, v) for v in items], type=arrow_type)
    got = ours.apply_arrow(array).to_pylist()
    expected = [ours.apply(t, v) for v in items]
    assert [_from_arrow_value(source, ours, g) for g in got] == expected


def _to_arrow_value(source: str, value: Any) -> Any:
    return value.bytes if source == "uuid" and value is not None else value


def _from_arrow_value(source: str, transform: Transform, value: Any) -> Any:
    """Arrow results back to the Python representation of docs/table-api.md."""
    import datetime as dt

    if value is None or not isinstance(transform, IdentityTransform):
        return value
    if isinstance(value, dt.datetime):
        epoch = dt.datetime(1970, 1, 1, tzinfo=value.tzinfo)
        delta = value - epoch
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, dt.date):
        return (value - dt.date(1970, 1, 1)).days
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    if isinstance(value, uuid.UUID) or source == "uuid":
        return uuid.UUID(bytes=value) if isinstance(value, bytes) else value
    return value


def _core_comparable(pair: tuple[Transform, Any, str]) -> bool:
    ours, _, source = pair
    return not (isinstance(ours, IdentityTransform) or source in ("uuid", "fixed"))


@pytest.mark.parametrize(
    "ours, theirs, source",
    [p for p in PAIRS if _core_comparable(p)],
    ids=[i for p, i in zip(PAIRS, PAIR_IDS) if _core_comparable(p)],
)
@settings(max_examples=10)
@given(data=st.data())
def test_apply_arrow_matches_pyiceberg_core(ours, theirs, source, data):
    t, pt, values, arrow_type = SOURCES[source]
    items = data.draw(st.lists(st.one_of(st.none(), values), min_size=1, max_size=20))
    array = pa.array(items, type=arrow_type)
    expected = theirs.pyarrow_transform(pt)(array)
    got = ours.apply_arrow(array)
    assert got.cast(expected.type).to_pylist() == expected.to_pylist()


def test_apply_arrow_handles_chunked_dictionary_and_zoned_arrays():
    bucket = BucketTransform(16)
    chunked = pa.chunked_array([pa.array(["iceberg"]), pa.array([None, "x"])])
    assert bucket.apply_arrow(chunked).to_pylist() == [
        bucket.apply(StringType(), v) for v in ["iceberg", None, "x"]
    ]
    dictionary = pa.array(["a", "b", "a"]).dictionary_encode()
    assert TruncateTransform(1).apply_arrow(dictionary).to_pylist() == ["a", "b", "a"]
    # the stored value is UTC whatever the zone; local wall time must not leak in
    zoned = pa.array([micros(2017, 12, 1, 2)], pa.timestamp("us", tz="America/New_York"))
    assert DayTransform().apply_arrow(zoned).to_pylist() == [17501]
    millis = pa.array([micros(2017, 12, 1, 2) // 1000], pa.timestamp("ms"))
    assert HourTransform().apply_arrow(millis).to_pylist() == [420026]
    assert VoidTransform().apply_arrow(pa.array([1, 2])).null_count == 2
    assert bucket.apply_arrow(pa.chunked_array([], pa.int64())).to_pylist() == []


def test_apply_arrow_rejects_unsupported_arrow_types():
    with pytest.raises(ValidationError, match=r"bucket\[4\] cannot apply to Arrow type double"):
        BucketTransform(4).apply_arrow(pa.array([1.0]))
    with pytest.raises(ValidationError, match="hour cannot apply to Arrow type date32"):
        HourTransform().apply_arrow(pa.array([1], pa.date32()))
    with pytest.raises(ValidationError, match=r"timestamp\[ns\] values do not fit microseconds"):
        DayTransform().apply_arrow(pa.array([1], pa.timestamp("ns")))


def test_bucket_arrow_path_is_vectorized_for_longs():
    values = list(range(-50_000, 50_000, 7))
    got = BucketTransform(1024).apply_arrow(pa.array(values, pa.int64())).to_pylist()
    assert got == [BucketTransform(1024).apply(LongType(), v) for v in values]


# --------------------------------------------------------------- projection


def holds(op: Operation, value: Any, literal: Any) -> bool:
    """Evaluate a predicate on one non-null value."""
    return {
        Operation.EQ: lambda: value == literal,
        Operation.NE: lambda: value != literal,
        Operation.LT: lambda: value < literal,
        Operation.LE: lambda: value <= literal,
        Operation.GT: lambda: value > literal,
        Operation.GE: lambda: value >= literal,
        Operation.IN: lambda: value in literal,
        Operation.NOT_IN: lambda: value not in literal,
        Operation.STARTS_WITH: lambda: value.startswith(literal),
        Operation.NOT_STARTS_WITH: lambda: not value.startswith(literal),
        Operation.NOT_NULL: lambda: True,
        Operation.IS_NULL: lambda: False,
    }[op]()


_SYMBOLS = {"=": Operation.EQ, "!=": Operation.NE, "<": Operation.LT, "<=": Operation.LE, ">": Operation.GT, ">=": Operation.GE}
SOURCE_ID, PARTITION_ID = 1, 1000


def operation(op: Any) -> Operation:
    return op if isinstance(op, Operation) else _SYMBOLS.get(op) or Operation(op)


def source_predicate(t: Any, op: Operation, literal: Any) -> BoundPredicate:
    """``x <op> literal`` on a source column of type ``t``, as binding makes it."""
    ref = BoundReference(SOURCE_ID, t, ("x",))
    if op.is_unary:
        return BoundPredicate(op, ref)
    if op.is_set:
        return BoundPredicate(op, ref, tuple(sorted(literal, key=repr)))
    return BoundPredicate(op, ref, (literal,))


def partition_ref(transform: Transform, t: Any) -> BoundReference:
    return BoundReference(PARTITION_ID, transform.result_type(t), ("x_part",), 0)


def project(transform: Transform, t: Any, op: Any, literal: Any) -> Any:
    return transform.project(source_predicate(t, operation(op), literal), partition_ref(transform, t))


def partition_predicate(transform: Transform, t: Any, op: Any, value: Any = None) -> BooleanExpression:
    ref, op = partition_ref(transform, t), operation(op)
    if op.is_unary:
        return BoundPredicate(op, ref)
    return bind_set(op, ref, list(value)) if op.is_set else BoundPredicate(op, ref, (value,))


_SMALL_NUDGES = [0, 1, -1, 7, -7, 10, -10, 365, -365]
_MICRO_NUDGES = _SMALL_NUDGES + [10**6, -(10**6), 3_600_000_000, -3_600_000_000, 86_400_000_000, -86_400_000_000]


def _near(t: Any, literal: Any) -> st.SearchStrategy[Any]:
    """Values at or next to the literal, where projections are easiest to get wrong."""
    if isinstance(literal, Decimal):
        return st.integers(-3, 3).map(lambda k: literal + Decimal(k).scaleb(-2))
    if isinstance(literal, int):
        micros = isinstance(t, (TimestampType, TimestamptzType))
        return st.sampled_from(_MICRO_NUDGES if micros else _SMALL_NUDGES).map(lambda d: literal + d)
    return st.sampled_from([literal, literal[:-1], literal + literal[:1]])


PROJECTION_CASES = [
    (IdentityTransform(), LongType(), st.integers(-1000, 1000)),
    (BucketTransform(8), LongType(), st.integers(-1000, 1000)),
    (BucketTransform(8), StringType(), st.text("ab", max_size=4)),
    (TruncateTransform(10), IntegerType(), st.integers(-1000, 1000)),
    (TruncateTransform(10), DecimalType(9, 2), decimals(4, 2)),
    (TruncateTransform(2), StringType(), st.text("abc", max_size=4)),
    (TruncateTransform(2), BinaryType(), st.binary(max_size=4)),
    (YearTransform(), DateType(), st.integers(-1500, 1500)),
    (MonthTransform(), TimestampType(), st.integers(-(10**14), 10**14)),
    (DayTransform(), TimestamptzType(), st.integers(-(10**12), 10**12)),
    (HourTransform(), TimestampType(), st.integers(-(10**11), 10**11)),
]
ALL_OPS = [op for op in Operation if op not in (Operation.IS_NAN, Operation.NOT_NAN, Operation.IS_NULL)]


@pytest.mark.parametrize("transform, t, values", PROJECTION_CASES, ids=[f"{c[0]}-{c[1]}" for c in PROJECTION_CASES])
@settings(max_examples=150)
@given(data=st.data())
def test_inclusive_projection_never_drops_a_matching_row(transform, t, values, data):
    op = data.draw(st.sampled_from(ALL_OPS))
    if op.is_prefix:
        assume(isinstance(t, StringType))
    literal = data.draw(st.frozensets(values, min_size=1, max_size=3) if op.is_set else values)
    sample = sorted(literal, key=repr)[0] if op.is_set else literal
    value = data.draw(st.one_of(values, _near(t, sample)))
    assume(holds(op, value, literal))
    projected = project(transform, t, op, literal)
    if projected is not None:
        assert row_matches(projected, {PARTITION_ID: transform.apply(t, value)})


@pytest.mark.parametrize(
    "transform, t, op, literal, expected",
    [
        (IdentityTransform(), LongType(), "!=", 3, (Operation.NE, 3)),
        (IdentityTransform(), LongType(), "in", [1, 2], (Operation.IN, frozenset({1, 2}))),
        (BucketTransform(16), IntegerType(), "=", 34, (Operation.EQ, 2017239379 % 16)),
        (BucketTransform(16), IntegerType(), "<", 34, None),
        (BucketTransform(16), IntegerType(), Operation.NE, 34, None),
        (TruncateTransform(10), IntegerType(), "<", 15, (Operation.LE, 10)),
        (TruncateTransform(10), IntegerType(), "<", 10, (Operation.LE, 0)),
        (TruncateTransform(10), IntegerType(), ">", 19, (Operation.GE, 20)),
        (TruncateTransform(10), IntegerType(), ">=", 19, (Operation.GE, 10)),
        (TruncateTransform(10), IntegerType(), "not_in", [1], None),
        (TruncateTransform(50), DecimalType(9, 2), "<", dec("10.50"), (Operation.LE, dec("10.00"))),
        (TruncateTransform(3), StringType(), "<", "icecream", (Operation.LE, "ice")),
        (TruncateTransform(3), StringType(), "starts_with", "ic", (Operation.STARTS_WITH, "ic")),
        (TruncateTransform(3), StringType(), "starts_with", "ice", (Operation.EQ, "ice")),
        (TruncateTransform(3), StringType(), "starts_with", "iceb", (Operation.STARTS_WITH, "ice")),
        (TruncateTransform(3), StringType(), "not_starts_with", "ice", (Operation.NE, "ice")),
        (TruncateTransform(3), StringType(), "not_starts_with", "iceb", None),
        (DayTransform(), TimestampType(), "<", micros(2017, 12, 2), (Operation.LE, 17501)),
        (DayTransform(), TimestampType(), ">", micros(2017, 12, 1, 23, 59, 59, 999999), (Operation.GE, 17502)),
        # negative ordinals are widened for files written by Iceberg <= 0.10 (Java does this too)
        (DayTransform(), TimestampType(), "=", -1, (Operation.IN, frozenset({-1, 0}))),
        (YearTransform(), DateType(), "<=", -400, (Operation.LE, -1)),
        (YearTransform(), DateType(), "is_null", None, (Operation.IS_NULL, None)),
        (VoidTransform(), DateType(), "is_null", None, None),
        (VoidTransform(), DateType(), "=", 1, None),
    ],
)
def test_inclusive_projection_examples(transform, t, op, literal, expected):
    wanted = None if expected is None else partition_predicate(transform, t, *expected)
    assert project(transform, t, op, literal) == wanted


def test_projection_validates_its_input():
    with pytest.raises(ValidationError, match="needs a literal"):
        IdentityTransform().project(
            BoundPredicate(Operation.EQ, BoundReference(SOURCE_ID, LongType(), ("x",))), partition_ref(IdentityTransform(), LongType())
        )
    with pytest.raises(ValueError):
        project(IdentityTransform(), LongType(), "like", 1)
    with pytest.raises(SchemaError):
        project(HourTransform(), DateType(), "=", 1)
