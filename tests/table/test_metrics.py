"""Column metrics of written Parquet files, checked against independently computed values."""

from __future__ import annotations

import math
import sys
import struct
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from table.arrow_schema import cast_to_schema, schema_to_arrow
from table.conversions import from_bytes, to_bytes
from table.errors import MalformedFileError, ValidationError
from table.parquet.column_stats import (
    COUNTS,
    DEFAULT_MODE,
    FULL,
    NONE,
    MetricsConfig,
    MetricsMode,
    collect_metrics,
    count_nans,
    split_offsets,
    truncate_lower_bound,
    truncate_upper_bound,
)
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

WRITE_OPTIONS = dict(version="2.6", store_decimal_as_integer=True, compression="zstd")


def write(
    path: Path, schema: Schema, rows: dict[str, list], row_group_size: Optional[int] = None, **options
) -> pq.FileMetaData:
    """Write ``rows`` (column -> values) conformed to ``schema``; return the footer."""
    arrow = schema_to_arrow(schema)
    table = pa.table({f.name: arrow_array(rows[f.name], f.type) for f in arrow}, schema=arrow)
    pq.write_table(table, path, row_group_size=row_group_size, **{**WRITE_OPTIONS, **options})
    return pq.read_metadata(path)


def arrow_array(values: list, arrow_type: pa.DataType) -> pa.Array:
    if isinstance(arrow_type, pa.UuidType):
        storage = pa.array([v.bytes if v is not None else None for v in values], pa.binary(16))
        return pa.ExtensionArray.from_storage(arrow_type, storage)
    return pa.array(values, arrow_type)


# ------------------------------------------------------------------ truncation


def test_truncate_examples():
    assert truncate_lower_bound("abcdef", 3) == "abc"
    assert truncate_upper_bound("abcdef", 3) == "abd"
    assert truncate_upper_bound("abc", 3) == "abc"
    assert truncate_upper_bound("a\U0010ffff\U0010ffffz", 3) == "b"
    assert truncate_upper_bound("\U0010ffff" * 4, 3) is None
    assert truncate_upper_bound("a\ud7ffz", 2) == "a\ue000"  # skips the surrogates
    assert truncate_lower_bound("😀😀😀", 2) == "😀😀"  # code points, not bytes
    assert truncate_upper_bound(b"ab\xff\xffz", 4) == b"ac"
    assert truncate_upper_bound(b"\xff" * 5, 4) is None
    assert truncate_upper_bound(b"\xff" * 4, 4) == b"\xff" * 4


@settings(max_examples=300)
@given(st.text(max_size=40), st.integers(min_value=1, max_value=20))
def test_string_truncation_property(value, length):
    lower = truncate_lower_bound(value, length)
    upper = truncate_upper_bound(value, length)
    assert len(lower) <= length and lower.encode() <= value.encode()
    if upper is None:
        assert all(c == "\U0010ffff" for c in value[:length])
    else:
        assert len(upper) <= length
        # UTF-8 byte order is code point order: the bound holds for readers of both.
        assert upper.encode() >= value.encode() and upper >= value
        upper.encode("utf-8")  # never a lone surrogate


@settings(max_examples=300)
@given(st.binary(max_size=40), st.integers(min_value=1, max_value=20))
def test_binary_truncation_property(value, length):
    lower = truncate_lower_bound(value, length)
    upper = truncate_upper_bound(value, length)
    assert len(lower) <= length and lower <= value
    if upper is None:
        assert value[:length] == b"\xff" * length
    else:
        assert len(upper) <= length and upper >= value


# ------------------------------------------------------------------ modes


def test_metrics_mode_parse():
    assert MetricsMode.parse(" Truncate(8) ") == MetricsMode("truncate", 8)
    assert MetricsMode.parse("full") == FULL and MetricsMode.parse("none") == NONE
    assert str(DEFAULT_MODE) == "truncate(16)"
    for bad in ("truncate(0)", "trunc", "truncate(x)"):
        with pytest.raises(ValidationError, match="invalid metrics mode"):
            MetricsMode.parse(bad)


def test_metrics_config_from_properties():
    schema = Schema(
        NestedField(1, "a", LongType()),
        NestedField(2, "s", StructType(NestedField(3, "b", StringType()))),
    )
    config = MetricsConfig.from_properties(
        {"write.metadata.metrics.default": "counts", "write.metadata.metrics.column.s.b": "full"}, schema
    )
    assert config.mode(1) == COUNTS and config.mode(3) == FULL
    with pytest.raises(ValidationError, match="names column 'zz'"):
        MetricsConfig.from_properties({"write.metadata.metrics.column.zz": "full"}, schema)
    with pytest.raises(ValidationError, match="write.metadata.metrics.column.a"):
        MetricsConfig.from_properties({"write.metadata.metrics.column.a": "bogus"}, schema)


def test_metrics_config_limits_wide_tables():
    schema = Schema(*(NestedField(i, f"c{i}", LongType()) for i in range(1, 6)))
    properties = {"write.metadata.metrics.max-inferred-column-defaults": "3"}
    config = MetricsConfig.from_properties(properties, schema)
    assert [config.mode(i) for i in range(1, 6)] == [DEFAULT_MODE] * 3 + [NONE] * 2


def test_modes_control_what_is_collected(tmp_path):
    schema = Schema(
        NestedField(1, "none", LongType()),
        NestedField(2, "counts", LongType()),
        NestedField(3, "full", StringType()),
        NestedField(4, "trunc", StringType()),
    )
    long_text = "x" * 30
    rows = {"none": [1], "counts": [2], "full": [long_text], "trunc": [long_text]}
    md = write(tmp_path / "f.parquet", schema, rows)
    config = MetricsConfig(DEFAULT_MODE, {1: NONE, 2: COUNTS, 3: FULL})
    m = collect_metrics(md, schema, path="f", config=config)
    assert set(m.column_sizes) == {1, 2, 3, 4}
    assert set(m.value_counts) == {2, 3, 4}
    assert set(m.lower_bounds) == {3, 4}
    assert m.lower_bounds[3] == long_text.encode() and m.upper_bounds[3] == long_text.encode()
    assert m.lower_bounds[4] == b"x" * 16 and m.upper_bounds[4] == b"x" * 15 + b"y"


# ------------------------------------------------------------------ exact metrics


ALL_TYPES = Schema(
    NestedField(1, "bool", BooleanType()),
    NestedField(2, "int", IntegerType()),
    NestedField(3, "long", LongType(), required=True),
    NestedField(4, "float", FloatType()),
    NestedField(5, "double", DoubleType()),
    NestedField(6, "dec9", DecimalType(9, 2)),
    NestedField(7, "dec18", DecimalType(18, 4)),
    NestedField(8, "dec38", DecimalType(38, 6)),
    NestedField(9, "date", DateType()),
    NestedField(10, "time", TimeType()),
    NestedField(11, "ts", TimestampType()),
    NestedField(12, "tstz", TimestamptzType()),
    NestedField(13, "str", StringType()),
    NestedField(14, "uuid", UUIDType()),
    NestedField(15, "fixed", FixedType(4)),
    NestedField(16, "bin", BinaryType()),
)
U1, U2 = uuid.UUID(int=5), uuid.UUID("ffffffff-0000-0000-0000-000000000001")
ALL_ROWS: dict[str, list] = {
    "bool": [True, None, False, True],
    "int": [5, -3, None, 7],
    "long": [2**40, -(2**40), 0, 1],
    "float": [1.5, float("nan"), -2.25, None],
    "double": [float("nan"), float("nan"), None, None],
    "dec9": [Decimal("1.25"), Decimal("-3.50"), None, Decimal("0.01")],
    "dec18": [Decimal("12345.6789"), None, Decimal("-0.0001"), None],
    "dec38": [Decimal("-12345678901234567890.123456"), Decimal("1.000000"), None, None],
    "date": [19000, -5, None, 3],
    "time": [0, 86_399_999_999, None, 5],
    "ts": [1_700_000_000_000_001, -1, None, 0],
    "tstz": [None, None, None, None],
    "str": ["banana", "apple", "😀" * 20, None],
    "uuid": [U2, U1, None, None],
    "fixed": [b"\x00\x01\x02\x03", b"\xff\xff\xff\xff", None, b"abcd"],
    "bin": [b"\xff" * 20, b"", None, b"a"],
}


def expected_bound(name: str, upper: bool) -> Any:
    values = [v for v in ALL_ROWS[name] if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return (max if upper else min)(values) if values else None


def test_all_types_exact_metrics(tmp_path):
    md = write(tmp_path / "f.parquet", ALL_TYPES, ALL_ROWS, row_group_size=3)
    assert md.num_row_groups == 2
    m = collect_metrics(md, ALL_TYPES, path="f", nan_value_counts={4: 1, 5: 2})
    assert m.record_count == 4
    assert m.value_counts == {i: 4 for i in range(1, 17)}
    assert m.null_value_counts == {
        f.field_id: sum(v is None for v in ALL_ROWS[f.name]) for f in ALL_TYPES.fields
    }
    assert m.nan_value_counts == {4: 1, 5: 2}
    sizes = {
        fid: sum(md.row_group(r).column(fid - 1).total_compressed_size for r in range(2))
        for fid in range(1, 17)
    }
    assert m.column_sizes == sizes
    # No bounds for the all-NaN, all-null and untruncatable columns.
    assert set(m.lower_bounds) == set(range(1, 17)) - {5, 12}
    assert set(m.upper_bounds) == set(range(1, 17)) - {5, 12, 16}
    for f in ALL_TYPES.fields:
        if f.field_id in m.lower_bounds and f.name not in ("str", "bin"):
            low = from_bytes(f.field_type, m.lower_bounds[f.field_id])
            high = from_bytes(f.field_type, m.upper_bounds[f.field_id])
            assert (low, high) == (expected_bound(f.name, False), expected_bound(f.name, True)), f.name
    assert m.lower_bounds[13] == b"apple" and m.upper_bounds[13] == ("😀" * 15 + "😁").encode()
    assert m.lower_bounds[16] == b""
    assert m.lower_bounds[14] == U1.bytes and m.upper_bounds[14] == U2.bytes
    assert m.lower_bounds[8] == to_bytes(DecimalType(38, 6), Decimal("-12345678901234567890.123456"))


def test_float_bounds_are_never_nan_and_order_zeros(tmp_path):
    schema = Schema(NestedField(1, "d", DoubleType()), NestedField(2, "f", FloatType()))
    nan = float("nan")
    md = write(tmp_path / "f.parquet", schema, {"d": [0.0, nan, -0.0], "f": [float("inf"), nan, 2.0]})
    m = collect_metrics(md, schema, path="f")
    low, high = (struct.unpack("<d", m.lower_bounds[1])[0], struct.unpack("<d", m.upper_bounds[1])[0])
    assert low == 0.0 and math.copysign(1.0, low) == -1.0
    assert high == 0.0 and math.copysign(1.0, high) == 1.0
    assert struct.unpack("<f", m.upper_bounds[2])[0] == math.inf
    assert m.nan_value_counts == {}  # not counted by the caller: unknown, so absent


def test_nested_columns_get_counts_but_bounds_only_through_structs(tmp_path):
    schema = Schema(
        NestedField(1, "s", StructType(NestedField(2, "x", LongType()), NestedField(3, "d", DoubleType()))),
        NestedField(4, "l", ListType(5, DoubleType(), element_required=False)),
        NestedField(6, "m", MapType(7, StringType(), 8, LongType(), value_required=False)),
    )
    rows = {
        "s": [{"x": 1, "d": float("nan")}, None, {"x": 9, "d": 2.0}],
        "l": [[1.0, None, float("nan")], None, []],
        "m": [[("a", 1), ("b", None)], [], None],
    }
    path = tmp_path / "f.parquet"
    md = write(path, schema, rows)
    table = pq.read_table(path)
    m = collect_metrics(md, schema, path=str(path), nan_value_counts=count_nans(table))
    assert set(m.lower_bounds) == {2, 3} == set(m.upper_bounds)
    assert from_bytes(LongType(), m.lower_bounds[2]) == 1 and from_bytes(LongType(), m.upper_bounds[2]) == 9
    # Parquet counts one value slot per element, plus one per null or empty list.
    assert m.value_counts == {2: 3, 3: 3, 5: 5, 7: 4, 8: 4}
    assert m.null_value_counts == {2: 1, 3: 1, 5: 3, 7: 2, 8: 3}
    assert m.nan_value_counts == {3: 1, 5: 1}


def test_count_nans_ignores_values_under_null_parents():
    inner = pa.struct([pa.field("d", pa.float64(), metadata={b"PARQUET:field_id": b"2"})])
    storage = pa.StructArray.from_arrays(
        [pa.array([float("nan"), float("nan")])], fields=list(inner), mask=pa.array([False, True])
    )
    batch = pa.RecordBatch.from_arrays(
        [storage], schema=pa.schema([pa.field("s", inner, metadata={b"PARQUET:field_id": b"1"})])
    )
    assert count_nans(batch) == {2: 1}


def test_count_nans_on_maps_lists_and_tables():
    schema = Schema(
        NestedField(1, "m", MapType(2, StringType(), 3, FloatType(), value_required=False)),
        NestedField(4, "l", ListType(5, DoubleType(), element_required=False)),
    )
    nan = float("nan")
    batch = cast_to_schema(
        pa.record_batch(
            {
                "m": pa.array([[("a", nan), ("b", 1.0)], None], pa.map_(pa.string(), pa.float32())),
                "l": pa.array([[nan, nan], [None]]),
            }
        ),
        schema,
    )
    assert count_nans(batch) == {3: 1, 5: 2}
    assert count_nans(pa.Table.from_batches([batch, batch])) == {3: 2, 5: 4}
    assert count_nans(schema_to_arrow(schema).empty_table()) == {3: 0, 5: 0}


def test_timestamps_in_other_units_are_read_as_micros(tmp_path):
    schema = Schema(NestedField(1, "ms", TimestampType()), NestedField(2, "ns", TimestampType()))
    table = pa.table(
        {
            "ms": pa.array([1, 3], pa.timestamp("ms")),
            "ns": pa.array([-1500, 2001], pa.timestamp("ns")),
        }
    )
    fields = [f.with_metadata(g.metadata) for f, g in zip(table.schema, schema_to_arrow(schema))]
    pq.write_table(table.cast(pa.schema(fields)), tmp_path / "f.parquet", version="2.6")
    m = collect_metrics(pq.read_metadata(tmp_path / "f.parquet"), schema, path="f")
    assert from_bytes(TimestampType(), m.lower_bounds[1]) == 1000
    assert from_bytes(TimestampType(), m.upper_bounds[1]) == 3000
    # Rounded outward so the bounds still hold the nanosecond values.
    assert from_bytes(TimestampType(), m.lower_bounds[2]) == -2
    assert from_bytes(TimestampType(), m.upper_bounds[2]) == 3


def test_missing_statistics_drop_nulls_and_bounds(tmp_path):
    schema = Schema(NestedField(1, "a", LongType()), NestedField(2, "b", StringType()))
    md = write(tmp_path / "f.parquet", schema, {"a": [1, None], "b": ["x", "y"]}, write_statistics=["b"])
    m = collect_metrics(md, schema, path="f")
    assert m.value_counts == {1: 2, 2: 2}
    assert m.null_value_counts == {2: 0}
    assert set(m.lower_bounds) == {2}


def test_row_group_without_min_max_invalidates_bounds(tmp_path):
    # parquet-cpp drops min/max of very long values; a bound from the other
    # row group alone would not bound the file.
    schema = Schema(NestedField(1, "s", StringType()))
    md = write(tmp_path / "f.parquet", schema, {"s": ["b", "a" * 10_000]}, row_group_size=1)
    assert md.row_group(0).column(0).statistics.has_min_max
    assert not md.row_group(1).column(0).statistics.has_min_max
    m = collect_metrics(md, schema, path="f")
    assert m.lower_bounds == {} and m.upper_bounds == {}
    assert m.null_value_counts == {1: 0}


def test_all_null_row_group_keeps_other_bounds(tmp_path):
    schema = Schema(NestedField(1, "a", LongType()))
    md = write(tmp_path / "f.parquet", schema, {"a": [None, 4, 2]}, row_group_size=1)
    m = collect_metrics(md, schema, path="f")
    assert from_bytes(LongType(), m.lower_bounds[1]) == 2
    assert from_bytes(LongType(), m.upper_bounds[1]) == 4


def test_split_offsets_are_row_group_starts(tmp_path):
    schema = Schema(NestedField(1, "a", LongType()), NestedField(2, "s", StringType()))
    md = write(tmp_path / "f.parquet", schema, {"a": list(range(10)), "s": ["v"] * 10}, row_group_size=3)
    offsets = split_offsets(md)
    assert len(offsets) == 4 and offsets == sorted(offsets)
    assert offsets[0] == 4  # right after the "PAR1" magic
    for rg, offset in enumerate(offsets):
        columns = [md.row_group(rg).column(c) for c in range(2)]
        starts = [
            c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset for c in columns
        ]
        assert offset == min(starts)


def test_unknown_field_id_is_a_malformed_file(tmp_path):
    schema = Schema(NestedField(1, "a", LongType()))
    md = write(tmp_path / "f.parquet", schema, {"a": [1]})
    other = Schema(NestedField(2, "a", LongType()))
    with pytest.raises(MalformedFileError, match="field id 1 is not in the table schema"):
        collect_metrics(md, other, path="f")


def test_physical_type_mismatch_is_a_malformed_file(tmp_path):
    schema = Schema(NestedField(1, "a", LongType()))
    md = write(tmp_path / "f.parquet", schema, {"a": [1]})
    wrong = Schema(NestedField(1, "a", StringType()))
    message = "'a' of f: physical type INT64 cannot store Iceberg type string"
    with pytest.raises(MalformedFileError, match=message):
        collect_metrics(md, wrong, path="f")


# ------------------------------------------------------------------ property


PROPERTY_SCHEMA = Schema(
    NestedField(1, "l", LongType()),
    NestedField(2, "d", DoubleType()),
    NestedField(3, "s", StringType()),
    NestedField(4, "b", BinaryType()),
    NestedField(5, "dec", DecimalType(20, 3)),
    NestedField(6, "t", TimestamptzType()),
)


@st.composite
def _rows(draw) -> tuple[dict[str, list], int]:
    n = draw(st.integers(min_value=1, max_value=30))

    def column(values):
        return draw(st.lists(st.one_of(st.none(), values), min_size=n, max_size=n))

    rows = {
        "l": column(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        "d": column(st.floats(allow_nan=True, allow_infinity=True)),
        "s": column(st.text(max_size=30)),
        "b": column(st.binary(max_size=30)),
        "dec": column(
            st.integers(min_value=-(10**20) + 1, max_value=10**20 - 1).map(lambda u: Decimal(u).scaleb(-3))
        ),
        "t": column(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    }
    return rows, draw(st.integers(min_value=1, max_value=n))


def _real(values: list) -> list:
    return [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_rows())
def test_bounds_bound_the_data_property(tmp_path, rows_and_group):
    rows, row_group_size = rows_and_group
    path = tmp_path / "p.parquet"
    md = write(path, PROPERTY_SCHEMA, rows, row_group_size=row_group_size)
    table = pq.read_table(path)
    m = collect_metrics(md, PROPERTY_SCHEMA, path=str(path), nan_value_counts=count_nans(table))
    n = len(rows["l"])
    assert m.record_count == n and m.value_counts == {i: n for i in range(1, 7)}
    assert m.nan_value_counts == {2: sum(isinstance(v, float) and math.isnan(v) for v in rows["d"])}
    for f in PROPERTY_SCHEMA.fields:
        values = _real(rows[f.name])
        assert m.null_value_counts[f.field_id] == sum(v is None for v in rows[f.name])
        if not values:
            assert f.field_id not in m.lower_bounds and f.field_id not in m.upper_bounds
            continue
        low = from_bytes(f.field_type, m.lower_bounds[f.field_id])
        assert all(_le(low, v) for v in values), f.name
        if f.field_id in m.upper_bounds:
            high = from_bytes(f.field_type, m.upper_bounds[f.field_id])
            assert all(_le(v, high) for v in values), f.name
        else:
            assert f.name in ("s", "b")  # only an untruncatable maximum loses its bound
        if f.name in ("s", "b"):
            assert len(low) <= 16
        elif f.name == "d" and min(values) == max(values) and math.isinf(min(values)):
            # Parquet (parquet-cpp) records DBL_MAX as the minimum of all-+inf data, and -DBL_MAX as the
            # maximum of all--inf data: still bounds of the data, one side just not tight.
            assert {low, high} == {min(values), math.copysign(sys.float_info.max, min(values))}
        else:
            assert low == min(values) and high == max(values)


def _le(a: Any, b: Any) -> bool:
    if isinstance(a, str):
        return a.encode() <= b.encode()
    return a <= b


# ------------------------------------------------------------------ oracle


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_matches_pyiceberg_statistics(tmp_path):
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.schema import Schema as PyIcebergSchema

    oracle_schema = PyIcebergSchema.model_validate(ALL_TYPES.to_json())
    md = write(tmp_path / "f.parquet", ALL_TYPES, ALL_ROWS, row_group_size=3)
    theirs = data_file_statistics_from_parquet_metadata(
        md, compute_statistics_plan(oracle_schema, {}), parquet_path_to_id_mapping(oracle_schema)
    ).to_serialized_dict()
    ours = collect_metrics(md, ALL_TYPES, path="f")
    assert ours.record_count == theirs["record_count"]
    assert ours.column_sizes == theirs["column_sizes"]
    assert ours.value_counts == theirs["value_counts"]
    assert ours.null_value_counts == theirs["null_value_counts"]
    assert ours.split_offsets == theirs["split_offsets"]
    assert ours.lower_bounds == theirs["lower_bounds"]
    assert ours.upper_bounds == theirs["upper_bounds"]
