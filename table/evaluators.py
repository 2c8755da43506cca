"""Evaluators of bound row filters (spec "Scan Planning").

A bound expression (:mod:`table.expressions`) is evaluated four ways:

* :func:`to_arrow_filter` and :func:`row_matches` decide whether a row matches;
* :func:`metrics_might_match` decides whether a data or delete file *may*
  contain a matching row, from its column metrics;
* :func:`project_to_partition` turns a row filter into an *inclusive* filter over
  a partition tuple, which :func:`partition_might_match` evaluates on one
  file's tuple and :func:`manifest_might_match` on a manifest's field summaries.

The inclusive evaluators must never answer "cannot match" for a file that
holds a matching row; they answer "might match" whenever they cannot tell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from table.arrow_schema import arrow_value, type_to_arrow
from table.conversions import from_bytes
from table.errors import MalformedFileError, ValidationError
from table.expressions import (
    ALWAYS_FALSE,
    ALWAYS_TRUE,
    AlwaysFalse,
    AlwaysTrue,
    And,
    BooleanExpression,
    BoundPredicate,
    BoundReference,
    Operation,
    Or,
    and_,
    or_,
    rewrite_not,
)
from table.manifest import DataFile, FieldSummary
from table.partitioning import PartitionField, PartitionSpec
from table.schema import Schema
from table.transforms import Transform
from table.types import DoubleType, FloatType, PrimitiveType, UUIDType

# Above this many values an ``in`` predicate is not checked against bounds:
# the check costs more than it saves (the same limit as Iceberg Java).
IN_PREDICATE_LIMIT = 200


# --------------------------------------------------------------------------
# Row evaluation: Arrow and Python
# --------------------------------------------------------------------------


def to_arrow_filter(bound: BooleanExpression) -> pc.Expression:
    """A ``pyarrow.compute.Expression`` selecting the matching rows of a table
    whose columns are named by the bound references' paths."""
    expr = rewrite_not(bound)
    if expr is ALWAYS_TRUE:
        return pc.scalar(True)
    if expr is ALWAYS_FALSE:
        return pc.scalar(False)
    if isinstance(expr, And):
        return to_arrow_filter(expr.left) & to_arrow_filter(expr.right)
    if isinstance(expr, Or):
        return to_arrow_filter(expr.left) | to_arrow_filter(expr.right)
    if isinstance(expr, BoundPredicate):
        return _arrow_predicate(expr)
    raise ValidationError(f"cannot evaluate {expr!r}: bind it to a schema first")


def _arrow_predicate(pred: BoundPredicate) -> pc.Expression:
    field, arrow_type = _arrow_operand(pred.ref)
    op = pred.op
    if op is Operation.IS_NULL:
        return field.is_null()
    if op is Operation.NOT_NULL:
        return field.is_valid()
    if op is Operation.IS_NAN:
        return pc.is_nan(field)
    if op is Operation.NOT_NAN:
        return field.is_null() | ~pc.is_nan(field)
    if op is Operation.STARTS_WITH:
        return pc.starts_with(field, pattern=pred.literal)
    if op is Operation.NOT_STARTS_WITH:
        return ~pc.starts_with(field, pattern=pred.literal) & field.is_valid()
    if op.is_set:
        values = pa.array([arrow_value(v) for v in _with_signed_zeros(pred.literals)], type=arrow_type)
        found = pc.is_in(field, value_set=values)
        # is_in says false, not null, for a null value; NOT IN must not match it.
        return found if op is Operation.IN else (~found & field.is_valid())
    literal = pa.scalar(arrow_value(pred.literal), type=arrow_type)
    return _ARROW_COMPARE[op](field, literal)


def _arrow_operand(ref: BoundReference) -> tuple[pc.Expression, pa.DataType]:
    """The column expression and the Arrow type its literals take.

    Arrow kernels do not compare the ``arrow.uuid`` extension type, so uuid
    columns are compared through their 16-byte storage.
    """
    field = pc.field(*ref.path)
    if isinstance(ref.field_type, UUIDType):
        return field.cast(pa.binary(16)), pa.binary(16)
    return field, type_to_arrow(ref.field_type)


_ARROW_COMPARE: dict[Operation, Callable[[pc.Expression, pa.Scalar], pc.Expression]] = {
    Operation.EQ: lambda f, v: f == v,
    Operation.NE: lambda f, v: f != v,
    Operation.LT: lambda f, v: f < v,
    Operation.LE: lambda f, v: f <= v,
    Operation.GT: lambda f, v: f > v,
    Operation.GE: lambda f, v: f >= v,
}


def _with_signed_zeros(literals: Sequence[Any]) -> list[Any]:
    """``is_in`` hashes -0.0 and 0.0 apart, but they compare equal (IEEE 754)."""
    if any(isinstance(v, float) and v == 0.0 for v in literals):
        return [v for v in literals if not (isinstance(v, float) and v == 0.0)] + [0.0, -0.0]
    return list(literals)


def row_matches(bound: BooleanExpression, row: Mapping[int, Any]) -> bool:
    """Whether one row (field id → value) matches; the reference for the other
    evaluators' semantics."""
    return evaluate(rewrite_not(bound), lambda p: _test_value(p, row.get(p.ref.field_id)))


def evaluate(expr: BooleanExpression, test: Callable[[BoundPredicate], bool]) -> bool:
    """Walk a bound expression without ``Not`` (see :func:`rewrite_not`),
    answering each predicate with ``test``; every evaluator is this walk."""
    if expr is ALWAYS_TRUE:
        return True
    if expr is ALWAYS_FALSE:
        return False
    if isinstance(expr, And):
        return evaluate(expr.left, test) and evaluate(expr.right, test)
    if isinstance(expr, Or):
        return evaluate(expr.left, test) or evaluate(expr.right, test)
    if isinstance(expr, BoundPredicate):
        return test(expr)
    raise ValidationError(f"cannot evaluate {expr!r}: bind it to a schema first")


def _test_value(pred: BoundPredicate, value: Any) -> bool:
    op = pred.op
    if op is Operation.IS_NULL:
        return value is None
    if op is Operation.NOT_NULL:
        return value is not None
    if op is Operation.IS_NAN:
        return _is_nan(value)
    if op is Operation.NOT_NAN:
        return not _is_nan(value)
    if value is None:
        return False
    if op is Operation.IN:
        return any(value == lit for lit in pred.literals)
    if op is Operation.NOT_IN:
        return all(value != lit for lit in pred.literals)
    if op is Operation.STARTS_WITH:
        return value.startswith(pred.literal)
    if op is Operation.NOT_STARTS_WITH:
        return not value.startswith(pred.literal)
    return _PY_COMPARE[op](value, pred.literal)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


_PY_COMPARE: dict[Operation, Callable[[Any, Any], bool]] = {
    Operation.EQ: lambda a, b: a == b,
    Operation.NE: lambda a, b: a != b,
    Operation.LT: lambda a, b: a < b,
    Operation.LE: lambda a, b: a <= b,
    Operation.GT: lambda a, b: a > b,
    Operation.GE: lambda a, b: a >= b,
}


# --------------------------------------------------------------------------
# Inclusive evaluation on file metrics (Iceberg Java: InclusiveMetricsEvaluator)
# --------------------------------------------------------------------------


def metrics_might_match(bound: BooleanExpression, data_file: DataFile) -> bool:
    """False only if the file's metrics prove that no row matches ``bound``.

    ``data_file`` is a data or delete file. Bounds
    are Appendix D values, possibly written with a type that was promoted
    since (int -> long, float -> double); truncated string bounds are still
    valid bounds, so plain comparisons against them stay inclusive.
    """
    if data_file.record_count == 0:
        return False
    metrics = _FileMetrics(data_file)
    return evaluate(rewrite_not(bound), lambda p: _METRIC_RULES[p.op](p, metrics))


class _FileMetrics:
    """The metric maps of one file, with missing maps read as empty."""

    def __init__(self, data_file: DataFile) -> None:
        self.path = data_file.file_path
        self.values = data_file.value_counts or {}
        self.nulls = data_file.null_value_counts or {}
        self.nans = data_file.nan_value_counts or {}
        self.lowers = data_file.lower_bounds or {}
        self.uppers = data_file.upper_bounds or {}

    def nulls_only(self, field_id: int) -> bool:
        values, nulls = self.values.get(field_id), self.nulls.get(field_id)
        return values is not None and nulls is not None and values == nulls

    def nans_only(self, field_id: int) -> bool:
        values, nans = self.values.get(field_id), self.nans.get(field_id)
        return values is not None and nans is not None and values == nans

    def lower(self, ref: BoundReference) -> Any:
        return decode_bound(ref.field_type, self.lowers.get(ref.field_id), self.path, ref.field_id)

    def upper(self, ref: BoundReference) -> Any:
        return decode_bound(ref.field_type, self.uppers.get(ref.field_id), self.path, ref.field_id)


def decode_bound(t: PrimitiveType, raw: bytes | None, path: str = "", field_id: int = 0) -> Any:
    """An Appendix D bound as a Python value of type ``t``, or None when unknown.

    ``from_bytes`` reads bounds written before an int -> long or float ->
    double promotion. NaN is never a valid bound (spec note on
    ``lower_bounds``), so it reads as unknown.
    """
    if raw is None:
        return None
    try:
        value = from_bytes(t, raw)
    except ValidationError as exc:
        raise MalformedFileError(path, f"bounds of field {field_id}", str(exc)) from exc
    return None if _is_nan(value) else value


def _m_is_null(p: BoundPredicate, m: _FileMetrics) -> bool:
    return m.nulls.get(p.ref.field_id) != 0


def _m_not_null(p: BoundPredicate, m: _FileMetrics) -> bool:
    return not m.nulls_only(p.ref.field_id)


def _m_is_nan(p: BoundPredicate, m: _FileMetrics) -> bool:
    return m.nans.get(p.ref.field_id) != 0 and not m.nulls_only(p.ref.field_id)


def _m_not_nan(p: BoundPredicate, m: _FileMetrics) -> bool:
    return not m.nans_only(p.ref.field_id)


def _no_comparable_values(p: BoundPredicate, m: _FileMetrics) -> bool:
    """Every value is null, or every value is NaN: no comparison can be true."""
    return m.nulls_only(p.ref.field_id) or m.nans_only(p.ref.field_id)


def _m_compare_lower(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``<`` and ``<=``: some value must be below the literal; look at the lower bound."""
    if _no_comparable_values(p, m):
        return False
    lower = m.lower(p.ref)
    if lower is None:
        return True
    return lower < p.literal if p.op is Operation.LT else lower <= p.literal


def _m_compare_upper(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``>`` and ``>=``: some value must be above the literal; look at the upper bound."""
    if _no_comparable_values(p, m):
        return False
    upper = m.upper(p.ref)
    if upper is None:
        return True
    return upper > p.literal if p.op is Operation.GT else upper >= p.literal


def _m_in_range(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``==`` and ``in``: some literal must lie within [lower, upper]."""
    if _no_comparable_values(p, m):
        return False
    if len(p.literals) > IN_PREDICATE_LIMIT:
        return True
    return _some_within(p.literals, m.lower(p.ref), m.upper(p.ref))


def _some_within(literals: Sequence[Any], lower: Any, upper: Any) -> bool:
    return any((lower is None or lower <= v) and (upper is None or v <= upper) for v in literals)


def _m_starts_with(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``starts with``: the prefix must lie between the bounds cut to its length."""
    if _no_comparable_values(p, m):
        return False
    return _prefix_within(p.literal, m.lower(p.ref), m.upper(p.ref))


def _prefix_within(prefix: str, lower: str | None, upper: str | None) -> bool:
    """Whether a value starting with ``prefix`` can lie in [lower, upper] (Java's rule)."""
    if lower is not None and lower[: len(prefix)] > prefix:
        return False
    return upper is None or upper[: len(prefix)] >= prefix


def _m_always(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``!=``, ``not in`` and ``not starts with``: bounds need not be values of
    the file (and may be truncated), so they prove nothing."""
    return True


_METRIC_RULES: dict[Operation, Callable[[BoundPredicate, _FileMetrics], bool]] = {
    Operation.IS_NULL: _m_is_null,
    Operation.NOT_NULL: _m_not_null,
    Operation.IS_NAN: _m_is_nan,
    Operation.NOT_NAN: _m_not_nan,
    Operation.LT: _m_compare_lower,
    Operation.LE: _m_compare_lower,
    Operation.GT: _m_compare_upper,
    Operation.GE: _m_compare_upper,
    Operation.EQ: _m_in_range,
    Operation.IN: _m_in_range,
    Operation.NE: _m_always,
    Operation.NOT_IN: _m_always,
    Operation.STARTS_WITH: _m_starts_with,
    Operation.NOT_STARTS_WITH: _m_always,
}


# --------------------------------------------------------------------------
# Partition tuples and manifest summaries (Iceberg Java: ManifestEvaluator)
# --------------------------------------------------------------------------


def partition_might_match(projected: BooleanExpression, partition: Sequence[Any]) -> bool:
    """Whether a file with this partition tuple may hold matching rows.

    ``projected`` comes from :func:`project_to_partition`; an inclusive
    projection matches a partition exactly when it may hold a matching row, so
    this is plain row evaluation over the tuple.
    """
    return evaluate(rewrite_not(projected), lambda p: _test_value(p, partition[_position(p.ref)]))


def _position(ref: BoundReference) -> int:
    if ref.position is None:
        raise ValidationError(f"{ref.name!r} is not a partition field: project the filter with project_to_partition")
    return ref.position


def manifest_might_match(projected: BooleanExpression, partitions: Sequence[FieldSummary] | None) -> bool:
    """Whether a manifest whose partition field summaries (``FieldSummary``,
    one per spec field, in spec order) are ``partitions`` may list a matching file."""
    if not partitions:
        return True
    return evaluate(rewrite_not(projected), lambda p: _summary_test(p, partitions))


def _summary_test(p: BoundPredicate, partitions: Sequence[FieldSummary]) -> bool:
    position = _position(p.ref)
    if position >= len(partitions):
        raise ValidationError(
            f"partition field {p.ref.name!r} is field {position} of the spec, "
            f"but the manifest summarizes only {len(partitions)} fields"
        )
    return _summary_rule(p, _Summary(p.ref, partitions[position]))


class _Summary:
    """One ``FieldSummary`` with its bounds decoded as the partition field's type."""

    def __init__(self, ref: BoundReference, summary: FieldSummary) -> None:
        self.contains_null = summary.contains_null
        self.contains_nan = summary.contains_nan
        where = f"partition field {ref.name}"
        self.lower = decode_bound(ref.field_type, summary.lower_bound, where, ref.field_id)
        self.upper = decode_bound(ref.field_type, summary.upper_bound, where, ref.field_id)
        # Bounds cover the non-null, non-NaN values: no lower bound means there are none.
        self.no_values = summary.lower_bound is None
        self.is_float = isinstance(ref.field_type, (FloatType, DoubleType))

    def all_null(self) -> bool:
        if not (self.contains_null and self.no_values):
            return False
        # A float field without bounds may hold NaNs instead of nulls.
        return not self.is_float or self.contains_nan is False

    def all_nan(self) -> bool:
        return self.contains_nan is True and not self.contains_null and self.no_values


def _summary_rule(p: BoundPredicate, s: _Summary) -> bool:
    op = p.op
    if op is Operation.IS_NULL:
        return bool(s.contains_null)
    if op is Operation.NOT_NULL:
        return not s.all_null()
    if op is Operation.IS_NAN:
        return s.contains_nan is not False
    if op is Operation.NOT_NAN:
        return not s.all_nan()
    if op in (Operation.NE, Operation.NOT_IN, Operation.NOT_STARTS_WITH):
        return True
    if s.no_values:
        return False  # only nulls and NaNs, which no comparison matches
    if op is Operation.STARTS_WITH:
        return _prefix_within(p.literal, s.lower, s.upper)
    if op is Operation.LT:
        return s.lower is None or s.lower < p.literal
    if op is Operation.LE:
        return s.lower is None or s.lower <= p.literal
    if op is Operation.GT:
        return s.upper is None or s.upper > p.literal
    if op is Operation.GE:
        return s.upper is None or s.upper >= p.literal
    if len(p.literals) > IN_PREDICATE_LIMIT:
        return True
    return _some_within(p.literals, s.lower, s.upper)


# --------------------------------------------------------------------------
# Inclusive projection onto a partition spec (Iceberg Java: Projections.inclusive)
# --------------------------------------------------------------------------


def project_to_partition(bound: BooleanExpression, spec: PartitionSpec, schema: Schema) -> BooleanExpression:
    """A filter over ``spec``'s partition tuple that every partition holding a
    row matching ``bound`` satisfies.

    Each predicate is projected through every partition field whose source is
    its column (the results are ANDed, as all of them hold); a predicate that
    no field can project becomes ALWAYS_TRUE. The references of the result
    carry their ``position`` in the partition tuple.
    """
    partition_type = spec.partition_type(schema)
    refs = [
        BoundReference(pf.field_id, cast(PrimitiveType, field.field_type), (pf.name,), position)
        for position, (pf, field) in enumerate(zip(spec.fields, partition_type.fields))
    ]
    return _project(rewrite_not(bound), list(zip(spec.fields, refs)))


_SpecFields = list[tuple[PartitionField, BoundReference]]


def _project(expr: BooleanExpression, fields: _SpecFields) -> BooleanExpression:
    if isinstance(expr, And):
        return and_(_project(expr.left, fields), _project(expr.right, fields))
    if isinstance(expr, Or):
        return or_(_project(expr.left, fields), _project(expr.right, fields))
    if isinstance(expr, BoundPredicate):
        result: BooleanExpression = ALWAYS_TRUE
        for pf, ref in fields:
            if pf.source_id == expr.ref.field_id:
                result = and_(result, _project_predicate(expr, pf.transform, ref))
        return result
    if isinstance(expr, (AlwaysTrue, AlwaysFalse)):
        return expr
    raise ValidationError(f"cannot project {expr!r}: bind it to a schema first")


def _project_predicate(pred: BoundPredicate, transform: Transform, ref: BoundReference) -> BooleanExpression:
    projected = transform.project(pred, ref)
    return ALWAYS_TRUE if projected is None else projected
