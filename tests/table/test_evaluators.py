"""Tests of table.evaluators: row evaluation (Arrow and Python) and the inclusive
evaluators on file metrics, partition tuples and manifest summaries."""

from __future__ import annotations

import math
import struct
import uuid
from decimal import Decimal
from typing import Any, Callable, Optional

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from table.conversions import to_bytes
from table.errors import MalformedFileError, ValidationError
from table.evaluators import (
    manifest_might_match,
    metrics_might_match,
    partition_might_match,
    project_to_partition,
    row_matches,
    to_arrow_filter,
)
from table.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    And,
    BooleanExpression,
    BoundPredicate,
    BoundReference,
    Not,
    Operation,
    Or,
    Reference,
    bind,
    col,
)
from table.manifest import DataFile, DataFileContent, FieldSummary, FileFormat
from table.parquet.column_stats import truncate_lower_bound, truncate_upper_bound
from table.partitioning import PartitionField, PartitionSpec
from table.schema import Schema
from table.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform, VoidTransform
from table.types import (
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
)
from tests.table.helpers import FILTER_SCHEMA


def _ref(field_id: int, t: Any, name: str, position: Optional[int] = None) -> BoundReference:
    return BoundReference(field_id, t, (name,), position)


# --------------------------------------------------------------------------
# Row evaluation: Arrow agrees with Python
# --------------------------------------------------------------------------

ROW_SCHEMA = Schema(
    NestedField(1, "i", LongType()),
    NestedField(2, "x", DoubleType()),
    NestedField(3, "s", StringType()),
    NestedField(4, "f", FloatType()),
)
ARROW_TYPES = {1: pa.int64(), 2: pa.float64(), 3: pa.string(), 4: pa.float32()}
NAMES = {1: "i", 2: "x", 3: "s", 4: "f"}


def _f32(v: float) -> float:
    return struct.unpack("<f", struct.pack("<f", v))[0]


_floats = st.sampled_from([-1.5, -0.0, 0.0, 2.5, 10.0, math.inf, -math.inf]) | st.floats(-100, 100, width=32)
_VALUES = {
    1: st.integers(-5, 5),
    2: _floats,
    3: st.text(alphabet="abz\u00e9\u20ac\U0001f600", max_size=4),
    4: _floats.map(_f32),
}
_NAN_OK = {2, 4}


def _value(field_id: int) -> st.SearchStrategy[Any]:
    base = _VALUES[field_id]
    if field_id in _NAN_OK:
        base = base | st.just(math.nan)
    return st.none() | base


_rows = st.lists(st.fixed_dictionaries({fid: _value(fid) for fid in NAMES}), min_size=1, max_size=12)


_COMPARISONS: dict[Operation, Callable[[Reference, Any], BooleanExpression]] = {
    Operation.EQ: lambda c, v: c == v,
    Operation.NE: lambda c, v: c != v,
    Operation.LT: lambda c, v: c < v,
    Operation.LE: lambda c, v: c <= v,
    Operation.GT: lambda c, v: c > v,
    Operation.GE: lambda c, v: c >= v,
}
_UNARY: dict[Operation, Callable[[Reference], BooleanExpression]] = {
    Operation.IS_NULL: Reference.is_null,
    Operation.NOT_NULL: Reference.not_null,
    Operation.IS_NAN: Reference.is_nan,
    Operation.NOT_NAN: Reference.not_nan,
}


def _draw_predicate(
    draw: st.DrawFn, column: Reference, literal: st.SearchStrategy[Any], max_set: int, strings: bool = False
) -> BooleanExpression:
    """A predicate of any operator on ``column``, built the way users write them
    (prefix operators only on a string column: ``strings``)."""
    op = draw(st.sampled_from([op for op in Operation if strings or not op.is_prefix]))
    if op.is_unary:
        return _UNARY[op](column)
    if op.is_set:
        values = draw(st.lists(literal, max_size=max_set))
        return column.is_in(values) if op is Operation.IN else column.not_in(values)
    if op.is_prefix:
        prefix = draw(literal)
        return column.starts_with(prefix) if op is Operation.STARTS_WITH else column.not_starts_with(prefix)
    return _COMPARISONS[op](column, draw(literal))


@st.composite
def _predicates(draw: st.DrawFn) -> BooleanExpression:
    field_id = draw(st.sampled_from(sorted(NAMES)))
    column = col(NAMES[field_id])
    return _draw_predicate(draw, column, _VALUES[field_id], max_set=4, strings=field_id == 3)


_expressions = st.recursive(
    _predicates() | st.sampled_from([ALWAYS_TRUE, ALWAYS_FALSE]),
    lambda children: st.builds(And, children, children)
    | st.builds(Or, children, children)
    | st.builds(Not, children),
    max_leaves=6,
)


def _arrow_table(rows: list[dict[int, Any]]) -> pa.Table:
    return pa.table(
        {NAMES[fid]: pa.array([r[fid] for r in rows], type=ARROW_TYPES[fid]) for fid in NAMES}
    ).append_column("_row", pa.array(range(len(rows)), pa.int64()))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, expr=_expressions)
def test_arrow_filter_agrees_with_python_evaluation(rows: list[dict[int, Any]], expr: BooleanExpression) -> None:
    bound = bind(expr, ROW_SCHEMA)
    selected = _arrow_table(rows).filter(to_arrow_filter(bound)).column("_row").to_pylist()
    assert selected == [i for i, row in enumerate(rows) if row_matches(bound, row)]


def test_comparisons_with_null_never_match_and_not_in_excludes_null() -> None:
    rows = [{1: None}, {1: 3}]
    for expr in (col("i") != 1, col("i").not_in([1, 2]), ~(col("i") == 1), ~col("i").is_in([1, 2])):
        bound = bind(expr, ROW_SCHEMA)
        assert [row_matches(bound, r) for r in rows] == [False, True]
    assert [row_matches(bind(col("i").is_null(), ROW_SCHEMA), r) for r in rows] == [True, False]


def test_nan_compares_as_ieee() -> None:
    nan_row = {2: math.nan}
    assert not row_matches(bind(col("x") < 1.0, ROW_SCHEMA), nan_row)
    assert not row_matches(bind(~(col("x") < 1.0), ROW_SCHEMA), nan_row)
    assert row_matches(bind(col("x") != 1.0, ROW_SCHEMA), nan_row)
    assert row_matches(bind(col("x").is_nan(), ROW_SCHEMA), nan_row)
    assert row_matches(bind(col("x").not_nan(), ROW_SCHEMA), {2: None})


def test_arrow_filter_on_nested_uuid_decimal_and_dates() -> None:
    u1, u2 = uuid.UUID(int=1), uuid.UUID(int=2)
    table = pa.table(
        {
            "point": pa.array([{"px": 1}, {"px": 5}, None], pa.struct([("px", pa.int32())])),
            "u": pa.array([u1.bytes, u2.bytes, None], pa.uuid()),
            "d": pa.array([Decimal("1.10"), Decimal("2.00"), None], pa.decimal128(9, 2)),
            "day": pa.array([0, 10, None], pa.date32()),
        }
    )

    def count(expr: BooleanExpression) -> int:
        return table.filter(to_arrow_filter(bind(expr, FILTER_SCHEMA))).num_rows

    assert count(col("point.px") > 2) == 1
    assert count(col("u") == u2) == 1
    assert count(col("u").is_in([u1, u2])) == 2
    assert count(col("u").not_in([u1, uuid.UUID(int=3)])) == 1
    assert count(col("d") >= Decimal("1.5")) == 1
    assert count(col("day") < "1970-01-05") == 1


def test_float_literal_is_rounded_to_the_column_precision() -> None:
    table = pa.table({"f": pa.array([0.1], pa.float32())})
    assert table.filter(to_arrow_filter(bind(col("f") == 0.1, ROW_SCHEMA))).num_rows == 1


# --------------------------------------------------------------------------
# Inclusive metrics evaluation
# --------------------------------------------------------------------------

TYPES = {1: LongType(), 2: DoubleType(), 3: StringType(), 4: FloatType()}


def _data_file(
    rows: list[dict[int, Any]],
    drop: frozenset[str] = frozenset(),
    truncate: Optional[int] = None,
) -> DataFile:
    """A DataFile whose metrics describe ``rows`` as a writer would (optionally
    with truncated string bounds and some metric maps missing)."""
    values, nulls, nans, lowers, uppers = {}, {}, {}, {}, {}
    for fid, t in TYPES.items():
        column = [r[fid] for r in rows]
        values[fid] = len(column)
        nulls[fid] = sum(v is None for v in column)
        if fid in _NAN_OK:
            nans[fid] = sum(v is not None and math.isnan(v) for v in column)
        ordered = [v for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if not ordered:
            continue
        low, high = min(ordered), max(ordered)
        if truncate is not None and isinstance(low, str):
            low, high = truncate_lower_bound(low, truncate), truncate_upper_bound(high, truncate)
        lowers[fid] = to_bytes(t, low)
        if high is not None:
            uppers[fid] = to_bytes(t, high)
    maps = {"value_counts": values, "null_value_counts": nulls, "nan_value_counts": nans}
    maps.update(lower_bounds=lowers, upper_bounds=uppers)
    kept = {k: (None if k in drop else v) for k, v in maps.items()}
    return DataFile(DataFileContent.DATA, "mem://f.parquet", FileFormat.PARQUET, (), len(rows), 1, **kept)


_METRIC_MAPS = ["value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds"]
_drops = st.frozensets(st.sampled_from(_METRIC_MAPS))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=_rows, expr=_expressions, drop=_drops, truncate=st.none() | st.integers(1, 2))
def test_metrics_never_reject_a_file_with_a_matching_row(
    rows: list[dict[int, Any]], expr: BooleanExpression, drop: frozenset[str], truncate: Optional[int]
) -> None:
    bound = bind(expr, ROW_SCHEMA)
    if any(row_matches(bound, row) for row in rows):
        assert metrics_might_match(bound, _data_file(rows, drop, truncate))


def _might(expr: BooleanExpression, rows: list[dict[int, Any]], **kw: Any) -> bool:
    return metrics_might_match(bind(expr, ROW_SCHEMA), _data_file(rows, **kw))


ROWS = [
    {1: 1, 2: 1.0, 3: "apple", 4: math.nan},
    {1: 5, 2: None, 3: "banana", 4: math.nan},
    {1: 9, 2: 3.0, 3: "cherry", 4: None},
]


@pytest.mark.parametrize(
    "expr, expected",
    [
        (col("i") == 10, False),
        (col("i") == 5, True),
        (col("i") < 1, False),
        (col("i") <= 1, True),
        (col("i") > 9, False),
        (col("i") >= 9, True),
        (col("i").is_in([0, 10, 11]), False),
        (col("i").is_in([0, 7]), True),
        (col("i") != 5, True),
        (col("i").is_null(), False),
        (col("x").is_null(), True),
        (col("x").is_nan(), False),
        (col("f").is_nan(), True),
        (col("f") > 0.0, True),  # NaN and null only, but the NaN count alone does not prove it
        (col("s") == "blueberry", True),
        (col("s") == "zucchini", False),
        (col("s") < "apple", False),
        (col("s").starts_with("b"), True),
        (col("s").starts_with("ap"), True),
        (col("s").starts_with("a"), True),
        (col("s").starts_with("aa"), False),  # below the lower bound "apple"
        (col("s").starts_with("d"), False),  # above the upper bound "cherry"
        (col("s").not_starts_with("a"), True),
        ((col("i") == 10) | (col("s") == "apple"), True),
        ((col("i") == 5) & (col("s") == "zucchini"), False),
    ],
)
def test_metrics_prune(expr: BooleanExpression, expected: bool) -> None:
    assert _might(expr, ROWS) is expected


def test_metrics_with_nulls_only_or_nans_only() -> None:
    only_nulls = [{1: None, 2: None, 3: None, 4: math.nan}] * 2
    assert not _might(col("x") < 5.0, only_nulls)
    assert not _might(col("x").not_null(), only_nulls)
    assert not _might(col("x").is_nan(), only_nulls)
    assert not _might(col("f") == 1.0, only_nulls)
    assert not _might(col("f").not_nan(), only_nulls)
    assert _might(col("f").is_nan(), only_nulls)


def test_truncated_string_bounds_stay_inclusive() -> None:
    rows = [{1: 1, 2: 1.0, 3: "abcdef", 4: 1.0}, {1: 1, 2: 1.0, 3: "abzzzz", 4: 1.0}]
    assert _might(col("s") == "abzzzz", rows, truncate=2)
    assert _might(col("s") >= "abzzzz", rows, truncate=2)
    assert _might(col("s") == "abcdef", rows, truncate=2)
    # bounds are "ab" and "ac" (the truncated upper bound is incremented)
    assert _might(col("s") == "ac", rows, truncate=2)
    assert not _might(col("s") == "ad", rows, truncate=2)
    assert not _might(col("s") > "ac", rows, truncate=2)


def test_empty_file_never_matches() -> None:
    empty = DataFile(DataFileContent.DATA, "mem://e", FileFormat.PARQUET, (), 0, 1)
    assert not metrics_might_match(ALWAYS_TRUE, empty)


def test_bounds_written_before_a_type_promotion_are_read() -> None:
    schema = Schema(NestedField(1, "i", LongType()), NestedField(2, "x", DoubleType()))
    old = DataFile(
        DataFileContent.DATA, "mem://old", FileFormat.PARQUET, (), 3, 1,
        lower_bounds={1: to_bytes(IntegerType(), 10), 2: to_bytes(FloatType(), 1.5)},
        upper_bounds={1: to_bytes(IntegerType(), 20), 2: to_bytes(FloatType(), 2.5)},
    )
    assert not metrics_might_match(bind(col("i") > 20, schema), old)
    assert metrics_might_match(bind(col("i") == 15, schema), old)
    assert not metrics_might_match(bind(col("x") < 1.5, schema), old)


def test_nan_bound_is_ignored_and_garbage_bound_is_an_error() -> None:
    nan_bound = DataFile(
        DataFileContent.DATA, "mem://nan", FileFormat.PARQUET, (), 3, 1,
        lower_bounds={2: struct.pack("<d", math.nan)},
        upper_bounds={2: struct.pack("<d", math.nan)},
    )
    assert metrics_might_match(bind(col("x") > 100.0, ROW_SCHEMA), nan_bound)
    bad = DataFile(DataFileContent.DATA, "mem://bad", FileFormat.PARQUET, (), 3, 1, lower_bounds={1: b"\x01\x02\x03"})
    with pytest.raises(MalformedFileError, match="mem://bad"):
        metrics_might_match(bind(col("i") < 1, ROW_SCHEMA), bad)


# --------------------------------------------------------------------------
# Partition tuples and manifest summaries
# --------------------------------------------------------------------------

PART_TYPES = [IntegerType(), StringType(), DoubleType()]
PART_REFS = [_ref(1000 + i, t, f"p{i}", i) for i, t in enumerate(PART_TYPES)]
_part_values = [
    st.none() | st.integers(-5, 5),
    st.none() | st.text(alphabet="abc", max_size=3),
    st.none() | st.just(math.nan) | st.sampled_from([-1.0, 0.0, 2.5]),
]


@st.composite
def _partition_predicates(draw: st.DrawFn) -> BooleanExpression:
    pos = draw(st.integers(0, 2))
    ref = PART_REFS[pos]
    op = draw(st.sampled_from([op for op in Operation if pos == 1 or not op.is_prefix]))  # p1 is the string
    if op.is_unary:
        if op in (Operation.IS_NAN, Operation.NOT_NAN) and pos != 2:
            op = Operation.IS_NULL
        return BoundPredicate(op, ref)
    literal = _part_values[pos].filter(lambda v: v is not None and not (isinstance(v, float) and math.isnan(v)))
    if op.is_set:
        values = draw(st.lists(literal, min_size=2, max_size=3, unique=True))
        return BoundPredicate(op, ref, tuple(sorted(values)))
    return BoundPredicate(op, ref, (draw(literal),))


_partition_exprs = st.recursive(
    _partition_predicates(),
    lambda c: st.builds(And, c, c) | st.builds(Or, c, c) | st.builds(Not, c),
    max_leaves=4,
)


def _summaries(partitions: list[tuple[Any, ...]]) -> list[FieldSummary]:
    result = []
    for pos, t in enumerate(PART_TYPES):
        column = [p[pos] for p in partitions]
        ordered = [v for v in column if v is not None and not (isinstance(v, float) and math.isnan(v))]
        has_nan = any(isinstance(v, float) and math.isnan(v) for v in column)
        result.append(
            FieldSummary(
                contains_null=any(v is None for v in column),
                contains_nan=has_nan if isinstance(t, DoubleType) else None,
                lower_bound=to_bytes(t, min(ordered)) if ordered else None,
                upper_bound=to_bytes(t, max(ordered)) if ordered else None,
            )
        )
    return result


@settings(max_examples=200, deadline=None)
@given(
    partitions=st.lists(st.tuples(*_part_values), min_size=1, max_size=6),
    expr=_partition_exprs,
)
def test_manifest_summaries_never_reject_a_matching_partition(
    partitions: list[tuple[Any, ...]], expr: BooleanExpression
) -> None:
    if any(partition_might_match(expr, p) for p in partitions):
        assert manifest_might_match(expr, _summaries(partitions))


@pytest.mark.parametrize(
    "expr, expected",
    [
        (BoundPredicate(Operation.EQ, PART_REFS[0], (9,)), False),
        (BoundPredicate(Operation.EQ, PART_REFS[0], (2,)), True),
        (BoundPredicate(Operation.LT, PART_REFS[0], (1,)), False),
        (BoundPredicate(Operation.GE, PART_REFS[0], (3,)), True),
        (BoundPredicate(Operation.IN, PART_REFS[0], (-3, 7)), False),
        (BoundPredicate(Operation.IS_NULL, PART_REFS[0]), False),
        (BoundPredicate(Operation.IS_NULL, PART_REFS[1]), True),
        (BoundPredicate(Operation.NOT_NULL, PART_REFS[2]), True),
        (BoundPredicate(Operation.IS_NAN, PART_REFS[2]), True),
        (BoundPredicate(Operation.GT, PART_REFS[2], (0.0,)), False),
        (BoundPredicate(Operation.STARTS_WITH, PART_REFS[1], ("a",)), True),
        (BoundPredicate(Operation.STARTS_WITH, PART_REFS[1], ("b",)), False),
        (BoundPredicate(Operation.NOT_STARTS_WITH, PART_REFS[1], ("a",)), True),
    ],
)
def test_manifest_summaries_prune(expr: BooleanExpression, expected: bool) -> None:
    partitions = [(1, "a", math.nan), (3, None, None)]
    assert manifest_might_match(expr, _summaries(partitions)) is expected


def test_manifest_without_summaries_might_match() -> None:
    assert manifest_might_match(BoundPredicate(Operation.EQ, PART_REFS[0], (9,)), None)
    assert manifest_might_match(BoundPredicate(Operation.EQ, PART_REFS[0], (9,)), [])


def test_partition_tuple_evaluation() -> None:
    pred = Or(BoundPredicate(Operation.EQ, PART_REFS[0], (1,)), BoundPredicate(Operation.IS_NULL, PART_REFS[1]))
    assert partition_might_match(pred, (1, "x", 0.0))
    assert partition_might_match(pred, (2, None, 0.0))
    assert not partition_might_match(pred, (2, "x", 0.0))
    with pytest.raises(ValidationError, match="not a partition field"):
        partition_might_match(bind(col("i") == 1, ROW_SCHEMA), (1,))


# --------------------------------------------------------------------------
# Inclusive projection onto partition specs
# --------------------------------------------------------------------------

EVENTS = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "ts", TimestampType()),
    NestedField(3, "s", StringType()),
    NestedField(4, "x", DoubleType()),
)
EVENTS_SPEC = PartitionSpec(
    1,
    (
        PartitionField(2, 1000, DayTransform(), "ts_day"),
        PartitionField(1, 1001, BucketTransform(4), "id_bucket"),
        PartitionField(3, 1002, TruncateTransform(2), "s_trunc"),
        PartitionField(1, 1003, IdentityTransform(), "id"),
        PartitionField(4, 1004, IdentityTransform(), "x"),
        PartitionField(3, 1005, VoidTransform(), "s_void"),
    ),
)
DAY = 86_400_000_000
_event_values = {
    1: st.none() | st.integers(-3, 3),
    2: st.none() | st.integers(-2 * DAY, 2 * DAY).map(lambda v: v - v % 3_600_000_000),
    3: st.none() | st.text(alphabet="abc", max_size=3),
    4: st.none() | st.just(math.nan) | st.sampled_from([-1.0, 0.0, 2.5]),
}
_EVENT_NAMES = {1: "id", 2: "ts", 3: "s", 4: "x"}


@st.composite
def _event_predicates(draw: st.DrawFn) -> BooleanExpression:
    field_id = draw(st.sampled_from(sorted(_EVENT_NAMES)))
    column = col(_EVENT_NAMES[field_id])
    literal = _event_values[field_id].filter(lambda v: v is not None and not (isinstance(v, float) and math.isnan(v)))
    return _draw_predicate(draw, column, literal, max_set=3, strings=field_id == 3)


@settings(max_examples=200, deadline=None)
@given(
    row=st.fixed_dictionaries(_event_values),
    expr=st.recursive(
        _event_predicates(),
        lambda c: st.builds(And, c, c) | st.builds(Or, c, c) | st.builds(Not, c),
        max_leaves=4,
    ),
)
def test_projection_keeps_the_partition_of_every_matching_row(row: dict[int, Any], expr: BooleanExpression) -> None:
    bound = bind(expr, EVENTS)
    if row_matches(bound, row):
        partition = EVENTS_SPEC.partition_values(row, EVENTS)
        assert partition_might_match(project_to_partition(bound, EVENTS_SPEC, EVENTS), partition)


def test_projection_through_hidden_partitioning() -> None:
    spec = PartitionSpec(0, (PartitionField(2, 1000, DayTransform(), "ts_day"),))
    projected = project_to_partition(bind(col("ts") >= 3 * DAY + 5, EVENTS), spec, EVENTS)
    assert projected == BoundPredicate(Operation.GE, BoundReference(1000, DateType(), ("ts_day",), 0), (3,))
    assert not partition_might_match(projected, (2,))
    assert partition_might_match(projected, (3,))


def test_projection_of_unprojectable_predicates_is_always_true() -> None:
    spec = PartitionSpec(0, (PartitionField(1, 1000, BucketTransform(4), "b"),))
    assert project_to_partition(bind(col("id") < 3, EVENTS), spec, EVENTS) is ALWAYS_TRUE
    assert project_to_partition(bind(col("s") == "a", EVENTS), spec, EVENTS) is ALWAYS_TRUE
    assert project_to_partition(bind(col("id") != 3, EVENTS), spec, EVENTS) is ALWAYS_TRUE
    bucket = project_to_partition(bind(col("id") == 3, EVENTS), spec, EVENTS)
    assert isinstance(bucket, BoundPredicate) and bucket.op is Operation.EQ
    assert bucket.literal == BucketTransform(4).apply(LongType(), 3)


def test_projection_ands_every_field_of_the_same_source() -> None:
    spec = PartitionSpec(
        0, (PartitionField(1, 1000, BucketTransform(4), "b"), PartitionField(1, 1001, IdentityTransform(), "i"))
    )
    projected = project_to_partition(bind(col("id") == 3, EVENTS), spec, EVENTS)
    assert isinstance(projected, And)
    assert not partition_might_match(projected, (BucketTransform(4).apply(LongType(), 3), 4))
    assert partition_might_match(projected, (BucketTransform(4).apply(LongType(), 3), 3))


def test_signed_zeros_compare_equal_everywhere() -> None:
    table = pa.table({"x": pa.array([-0.0, 0.0, 1.0])})
    for expr, count in (
        (col("x") == 0.0, 2),
        (col("x").is_in([0.0, 1.5]), 2),
        (col("x").is_in([-0.0, 2.0]), 2),
        (col("x").not_in([0.0, 2.0]), 1),
    ):
        bound = bind(expr, ROW_SCHEMA)
        assert table.filter(to_arrow_filter(bound)).num_rows == count
        assert sum(row_matches(bound, {2: v}) for v in (-0.0, 0.0, 1.0)) == count


def test_prefix_predicates_need_a_string_column_and_skip_nulls() -> None:
    with pytest.raises(ValidationError, match="starts_with needs a string column"):
        bind(col("i").starts_with("1"), ROW_SCHEMA)
    bound = bind(~col("s").starts_with("ap"), ROW_SCHEMA)
    assert bound == bind(col("s").not_starts_with("ap"), ROW_SCHEMA)
    rows = [{3: "apple"}, {3: None}, {3: "banana"}]
    assert [row_matches(bound, r) for r in rows] == [False, False, True]
