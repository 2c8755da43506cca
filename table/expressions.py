"""Row filter predicates and their evaluators (spec: "Scan Planning").

Filters are written by column name (``col("id") == 5``) and then bound to a
schema: binding resolves each name to a field id and converts each literal to
the field's Python representation (docs/table-api.md). Bound expressions are
evaluated four ways:

* :func:`to_arrow_filter` and :func:`row_matches` decide whether a row matches;
* :func:`metrics_might_match` decides whether a data or delete file *may*
  contain a matching row, from its column metrics;
* :func:`project_to_partition` turns a row filter into an *inclusive* filter over
  a partition tuple, which :func:`partition_might_match` evaluates on one
  file's tuple and :func:`manifest_might_match` on a manifest's field summaries.

Semantics. :func:`bind` rewrites ``Not`` away (negation normal form) so that
every evaluator sees only ``And``/``Or`` over predicates. A comparison (``==``,
``!=``, ``<``, ``in``, ``not in``, ...) with a null value is false, as in SQL,
and NaN compares as in IEEE 754 (``NaN < x`` and ``NaN == x`` are false,
``NaN != x`` is true). ``is_null``/``not_null``/``is_nan``/``not_nan`` are never
unknown. The inclusive evaluators must never answer "cannot match" for a file
that holds a matching row; they answer "might match" whenever they cannot tell.
"""

from __future__ import annotations

import datetime
import math
import struct
import uuid
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from table.arrow_schema import type_to_arrow
from table.conversions import from_bytes, from_json
from table.errors import MalformedFileError, ValidationError
from table.manifest import DataFile, FieldSummary
from table.partitioning import PartitionField, PartitionSpec
from table.schema import Schema
from table.transforms import Op, Transform  # Op: projection's operator enum; its values are ours
from table.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

# Above this many values an ``in`` predicate is not checked against bounds:
# the check costs more than it saves (the same limit as Iceberg Java).
IN_PREDICATE_LIMIT = 200


class Operation(Enum):
    """A predicate operator."""

    EQ = "eq"
    NE = "not_eq"
    LT = "lt"
    LE = "lt_eq"
    GT = "gt"
    GE = "gt_eq"
    IN = "in"
    NOT_IN = "not_in"
    IS_NULL = "is_null"
    NOT_NULL = "not_null"
    IS_NAN = "is_nan"
    NOT_NAN = "not_nan"

    def negate(self) -> "Operation":
        """The operator of ``Not(op)`` pushed into the predicate (``<`` -> ``>=``).

        As in SQL, a row whose value is null matches neither.
        """
        return _NEGATIONS[self]

    @property
    def is_unary(self) -> bool:
        return self in (Operation.IS_NULL, Operation.NOT_NULL, Operation.IS_NAN, Operation.NOT_NAN)

    @property
    def is_set(self) -> bool:
        return self in (Operation.IN, Operation.NOT_IN)


_NEGATIONS = {
    Operation.EQ: Operation.NE,
    Operation.NE: Operation.EQ,
    Operation.LT: Operation.GE,
    Operation.GE: Operation.LT,
    Operation.GT: Operation.LE,
    Operation.LE: Operation.GT,
    Operation.IN: Operation.NOT_IN,
    Operation.NOT_IN: Operation.IN,
    Operation.IS_NULL: Operation.NOT_NULL,
    Operation.NOT_NULL: Operation.IS_NULL,
    Operation.IS_NAN: Operation.NOT_NAN,
    Operation.NOT_NAN: Operation.IS_NAN,
}


# --------------------------------------------------------------------------
# Expression tree
# --------------------------------------------------------------------------


class BooleanExpression:
    """Base of every filter expression; ``&``, ``|`` and ``~`` combine them."""

    def __and__(self, other: "BooleanExpression") -> "BooleanExpression":
        return And(self, other)

    def __or__(self, other: "BooleanExpression") -> "BooleanExpression":
        return Or(self, other)

    def __invert__(self) -> "BooleanExpression":
        return Not(self)

    def negate(self) -> "BooleanExpression":
        """``Not(self)`` with the negation pushed into the predicates."""
        raise NotImplementedError


class _Constant(BooleanExpression):
    """A singleton, so that ``is`` comparisons hold even after copying."""

    _instance: Optional["_Constant"] = None

    def __new__(cls) -> "_Constant":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return type(self), ()


class AlwaysTrue(_Constant):
    """Matches every row."""

    def negate(self) -> BooleanExpression:
        return ALWAYS_FALSE

    def __repr__(self) -> str:
        return "ALWAYS_TRUE"


class AlwaysFalse(_Constant):
    """Matches no row."""

    def negate(self) -> BooleanExpression:
        return ALWAYS_TRUE

    def __repr__(self) -> str:
        return "ALWAYS_FALSE"


ALWAYS_TRUE = AlwaysTrue()
ALWAYS_FALSE = AlwaysFalse()


class _Binary(BooleanExpression):
    """``And``/``Or`` of two or more children (folded left into pairs)."""

    def __init__(self, left: BooleanExpression, right: BooleanExpression, *rest: BooleanExpression) -> None:
        for child in (left, right, *rest):
            if not isinstance(child, BooleanExpression):
                raise ValidationError(f"{type(self).__name__} needs expressions, got {child!r}")
        if rest:
            left, right = type(self)(left, right, *rest[:-1]), rest[-1]
        self.left = left
        self.right = right

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return False
        assert isinstance(other, _Binary)
        return (other.left, other.right) == (self.left, self.right)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.left, self.right))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.left!r}, {self.right!r})"


class And(_Binary):
    """Both children match."""

    def negate(self) -> BooleanExpression:
        return Or(self.left.negate(), self.right.negate())


class Or(_Binary):
    """Either child matches."""

    def negate(self) -> BooleanExpression:
        return And(self.left.negate(), self.right.negate())


class Not(BooleanExpression):
    """The child does not match; removed by :func:`rewrite_not` before evaluation."""

    def __init__(self, child: BooleanExpression) -> None:
        if not isinstance(child, BooleanExpression):
            raise ValidationError(f"Not needs an expression, got {child!r}")
        self.child = child

    def negate(self) -> BooleanExpression:
        return self.child

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Not) and other.child == self.child

    def __hash__(self) -> int:
        return hash(("Not", self.child))

    def __repr__(self) -> str:
        return f"Not({self.child!r})"


@dataclass(frozen=True)
class UnboundPredicate(BooleanExpression):
    """A predicate on a column name, before binding. ``literals`` is empty for
    unary operators, one value for comparisons, the value set for ``in``."""

    op: Operation
    column: str
    literals: tuple[Any, ...] = ()

    def negate(self) -> BooleanExpression:
        return UnboundPredicate(self.op.negate(), self.column, self.literals)


class Reference:
    """A column by name; comparison operators build predicates on it.

    ``==`` is overloaded, so references are deliberately unhashable.
    """

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError(f"column name must be a non-empty string, got {name!r}")
        self.name = name

    def _pred(self, op: Operation, *values: Any) -> UnboundPredicate:
        return UnboundPredicate(op, self.name, tuple(values))

    def __eq__(self, value: Any) -> UnboundPredicate:  # type: ignore[override]
        return self._pred(Operation.EQ, value)

    def __ne__(self, value: Any) -> UnboundPredicate:  # type: ignore[override]
        return self._pred(Operation.NE, value)

    def __lt__(self, value: Any) -> UnboundPredicate:
        return self._pred(Operation.LT, value)

    def __le__(self, value: Any) -> UnboundPredicate:
        return self._pred(Operation.LE, value)

    def __gt__(self, value: Any) -> UnboundPredicate:
        return self._pred(Operation.GT, value)

    def __ge__(self, value: Any) -> UnboundPredicate:
        return self._pred(Operation.GE, value)

    def is_in(self, values: Iterable[Any]) -> UnboundPredicate:
        return self._pred(Operation.IN, *_as_value_list(self.name, values))

    def not_in(self, values: Iterable[Any]) -> UnboundPredicate:
        return self._pred(Operation.NOT_IN, *_as_value_list(self.name, values))

    def is_null(self) -> UnboundPredicate:
        return self._pred(Operation.IS_NULL)

    def not_null(self) -> UnboundPredicate:
        return self._pred(Operation.NOT_NULL)

    def is_nan(self) -> UnboundPredicate:
        return self._pred(Operation.IS_NAN)

    def not_nan(self) -> UnboundPredicate:
        return self._pred(Operation.NOT_NAN)

    def __repr__(self) -> str:
        return f"col({self.name!r})"


def col(name: str) -> Reference:
    """A column by (dotted, for struct fields) name, to build predicates on."""
    return Reference(name)


def _as_value_list(column: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ValidationError(f"column {column!r}: is_in/not_in need a collection of values, got {values!r}")
    return list(values)


@dataclass(frozen=True)
class BoundReference:
    """A resolved column: field id and type, the Arrow access ``path`` of names
    and, for partition tuples, the ``position`` of the value in the tuple."""

    field_id: int
    field_type: PrimitiveType
    path: tuple[str, ...]
    position: Optional[int] = None

    @property
    def name(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class BoundPredicate(BooleanExpression):
    """A predicate on a field id whose literals have the field's representation.

    ``literals`` is sorted, so equal predicates compare equal."""

    op: Operation
    ref: BoundReference
    literals: tuple[Any, ...] = ()

    @property
    def literal(self) -> Any:
        """The single literal of a comparison."""
        return self.literals[0]

    def negate(self) -> BooleanExpression:
        return BoundPredicate(self.op.negate(), self.ref, self.literals)


# --------------------------------------------------------------------------
# Rewriting and binding
# --------------------------------------------------------------------------


def and_(left: BooleanExpression, right: BooleanExpression) -> BooleanExpression:
    """``And`` that folds away the constants."""
    if left is ALWAYS_FALSE or right is ALWAYS_FALSE:
        return ALWAYS_FALSE
    if left is ALWAYS_TRUE:
        return right
    if right is ALWAYS_TRUE:
        return left
    return And(left, right)


def or_(left: BooleanExpression, right: BooleanExpression) -> BooleanExpression:
    """``Or`` that folds away the constants."""
    if left is ALWAYS_TRUE or right is ALWAYS_TRUE:
        return ALWAYS_TRUE
    if left is ALWAYS_FALSE:
        return right
    if right is ALWAYS_FALSE:
        return left
    return Or(left, right)


def rewrite_not(expr: BooleanExpression) -> BooleanExpression:
    """Push every ``Not`` into the predicates (negation normal form).

    The inclusive evaluators need this: "might match" cannot be negated.
    """
    if isinstance(expr, Not):
        return rewrite_not(expr.child.negate())
    if isinstance(expr, And):
        return and_(rewrite_not(expr.left), rewrite_not(expr.right))
    if isinstance(expr, Or):
        return or_(rewrite_not(expr.left), rewrite_not(expr.right))
    return expr


def bind(expr: BooleanExpression, schema: Schema, case_sensitive: bool = True) -> BooleanExpression:
    """Resolve column names against ``schema`` and convert literals; the result
    has no ``Not`` and no unbound predicate."""
    return _bind(rewrite_not(expr), schema, case_sensitive)


def _bind(expr: BooleanExpression, schema: Schema, case_sensitive: bool) -> BooleanExpression:
    if isinstance(expr, And):
        return and_(_bind(expr.left, schema, case_sensitive), _bind(expr.right, schema, case_sensitive))
    if isinstance(expr, Or):
        return or_(_bind(expr.left, schema, case_sensitive), _bind(expr.right, schema, case_sensitive))
    if isinstance(expr, UnboundPredicate):
        return _bind_predicate(expr, schema, case_sensitive)
    if isinstance(expr, (AlwaysTrue, AlwaysFalse, BoundPredicate)):
        return expr
    raise ValidationError(f"cannot bind {expr!r}: not a filter expression")


def _bind_predicate(pred: UnboundPredicate, schema: Schema, case_sensitive: bool) -> BooleanExpression:
    fields = column_path(schema, pred.column, case_sensitive)
    field = fields[-1]
    if not isinstance(field.field_type, PrimitiveType):
        raise ValidationError(
            f"column {pred.column!r}: cannot filter on {field.field_type}, only on primitive columns"
        )
    ref = BoundReference(field.field_id, field.field_type, tuple(f.name for f in fields))
    if pred.op.is_unary:
        return _bind_unary(pred.op, ref, all(f.required for f in fields))
    values = [_to_literal(pred.column, field.field_type, v) for v in pred.literals]
    if not pred.op.is_set:
        return BoundPredicate(pred.op, ref, tuple(values))
    return _bind_set(pred.op, ref, values)


def _bind_unary(op: Operation, ref: BoundReference, never_null: bool) -> BooleanExpression:
    """Fold the unary predicates whose answer the type already gives."""
    if never_null and op in (Operation.IS_NULL, Operation.NOT_NULL):
        return ALWAYS_FALSE if op is Operation.IS_NULL else ALWAYS_TRUE
    is_float = isinstance(ref.field_type, (FloatType, DoubleType))
    if not is_float and op in (Operation.IS_NAN, Operation.NOT_NAN):
        return ALWAYS_FALSE if op is Operation.IS_NAN else ALWAYS_TRUE
    return BoundPredicate(op, ref)


def _bind_set(op: Operation, ref: BoundReference, values: list[Any]) -> BooleanExpression:
    unique = sorted(set(values))
    if not unique:
        return ALWAYS_FALSE if op is Operation.IN else ALWAYS_TRUE
    if len(unique) == 1:
        return BoundPredicate(Operation.EQ if op is Operation.IN else Operation.NE, ref, (unique[0],))
    return BoundPredicate(op, ref, tuple(unique))


def column_path(schema: Schema, name: str, case_sensitive: bool = True) -> list[NestedField]:
    """The fields from the top level down to column ``name``, which may be
    nested in structs but not in lists or maps (those have no single value
    per row to compare)."""
    field = schema.find_field(name, case_sensitive)
    path = [field]
    parent_id = schema.parent_id(field.field_id)
    while parent_id is not None:
        parent = schema.find_field(parent_id)
        if not isinstance(parent.field_type, StructType):
            raise ValidationError(
                f"column {name!r} is inside {parent.field_type} {parent.name!r}: cannot filter on it"
            )
        path.insert(0, parent)
        parent_id = schema.parent_id(parent_id)
    return path


# --------------------------------------------------------------------------
# Literal conversion
# --------------------------------------------------------------------------

_INT_RANGES = {IntegerType: (-(2**31), 2**31 - 1), LongType: (-(2**63), 2**63 - 1)}
_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_TZ = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICRO = datetime.timedelta(microseconds=1)


def _to_literal(column: str, t: PrimitiveType, value: Any) -> Any:
    """``value`` in the representation of type ``t``; the error names the column."""
    if value is None:
        raise ValidationError(f"column {column!r}: cannot compare with None; use is_null()/not_null()")
    if isinstance(value, float) and math.isnan(value):
        raise ValidationError(f"column {column!r}: cannot compare with NaN; use is_nan()/not_nan()")
    try:
        converted = _convert(t, value)
    except (ValidationError, ValueError, TypeError, OverflowError, ArithmeticError) as exc:
        raise ValidationError(f"column {column!r} ({t}): cannot use {value!r}: {exc}") from exc
    if converted is _UNSUPPORTED:
        kind = type(value).__name__
        raise ValidationError(f"column {column!r} ({t}): cannot compare with {kind} {value!r}")
    return converted


_UNSUPPORTED = object()


def _convert(t: PrimitiveType, value: Any) -> Any:
    if isinstance(value, str) and not isinstance(t, StringType):
        return _from_string(t, value)
    converter = _CONVERTERS.get(type(t))
    return converter(t, value) if converter else _UNSUPPORTED


def _from_string(t: PrimitiveType, text: str) -> Any:
    """Strings are accepted for the types whose JSON form is a string."""
    if isinstance(t, (DateType, TimeType, TimestampType, TimestamptzType, UUIDType, DecimalType)):
        return _convert(t, from_json(t, text))
    return _UNSUPPORTED


def _conv_bool(t: PrimitiveType, v: Any) -> Any:
    return v if isinstance(v, bool) else _UNSUPPORTED


def _conv_int(t: PrimitiveType, v: Any) -> Any:
    if not isinstance(v, int) or isinstance(v, bool):
        return _UNSUPPORTED
    low, high = _INT_RANGES[type(t)]
    if not low <= v <= high:
        raise ValueError(f"{v} is out of range for {t}")
    return v


def _conv_float(t: PrimitiveType, v: Any) -> Any:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return _UNSUPPORTED
    if isinstance(t, FloatType):
        # Round to float32, the precision the column stores (as Iceberg Java does).
        return struct.unpack("<f", struct.pack("<f", float(v)))[0]
    return float(v)


def _conv_decimal(t: PrimitiveType, v: Any) -> Any:
    assert isinstance(t, DecimalType)
    if isinstance(v, bool) or not isinstance(v, (int, Decimal)):
        return _UNSUPPORTED
    d = Decimal(v)
    if not d.is_finite():
        raise ValueError("not a finite decimal")
    exponent = d.normalize().as_tuple().exponent
    if isinstance(exponent, int) and -exponent > t.scale:
        raise ValueError(f"has more than {t.scale} digits after the point")
    q = d.quantize(Decimal(1).scaleb(-t.scale))
    if len(q.as_tuple().digits) > t.precision:
        raise ValueError(f"has more than {t.precision} digits")
    return q


def _conv_date(t: PrimitiveType, v: Any) -> Any:
    if isinstance(v, datetime.datetime):
        return _UNSUPPORTED
    if isinstance(v, datetime.date):
        return (v - _EPOCH_DATE).days
    return _conv_int(IntegerType(), v)


def _conv_time(t: PrimitiveType, v: Any) -> Any:
    if isinstance(v, datetime.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
    return _conv_int(LongType(), v)


def _conv_timestamp(t: PrimitiveType, v: Any) -> Any:
    """Naive datetimes are taken as UTC for ``timestamptz``."""
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            return (v - _EPOCH) // _MICRO
        return (v - _EPOCH_TZ) // _MICRO
    return _conv_int(LongType(), v)


def _conv_string(t: PrimitiveType, v: Any) -> Any:
    return v if isinstance(v, str) else _UNSUPPORTED


def _conv_uuid(t: PrimitiveType, v: Any) -> Any:
    if isinstance(v, uuid.UUID):
        return v
    if isinstance(v, (bytes, bytearray)):
        return uuid.UUID(bytes=bytes(v))
    return _UNSUPPORTED


def _conv_fixed(t: PrimitiveType, v: Any) -> Any:
    assert isinstance(t, FixedType)
    if not isinstance(v, (bytes, bytearray)):
        return _UNSUPPORTED
    if len(v) != t.length:
        raise ValueError(f"has {len(v)} bytes, expected {t.length}")
    return bytes(v)


def _conv_binary(t: PrimitiveType, v: Any) -> Any:
    return bytes(v) if isinstance(v, (bytes, bytearray)) else _UNSUPPORTED


_CONVERTERS: dict[type, Callable[[PrimitiveType, Any], Any]] = {
    BooleanType: _conv_bool,
    IntegerType: _conv_int,
    LongType: _conv_int,
    FloatType: _conv_float,
    DoubleType: _conv_float,
    DecimalType: _conv_decimal,
    DateType: _conv_date,
    TimeType: _conv_time,
    TimestampType: _conv_timestamp,
    TimestamptzType: _conv_timestamp,
    StringType: _conv_string,
    UUIDType: _conv_uuid,
    FixedType: _conv_fixed,
    BinaryType: _conv_binary,
}


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
    if op.is_set:
        values = pa.array([_arrow_value(v) for v in _with_signed_zeros(pred.literals)], type=arrow_type)
        found = pc.is_in(field, value_set=values)
        # is_in says false, not null, for a null value; NOT IN must not match it.
        return found if op is Operation.IN else (~found & field.is_valid())
    literal = pa.scalar(_arrow_value(pred.literal), type=arrow_type)
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


def _arrow_value(v: Any) -> Any:
    """Python value -> what ``pa.scalar`` accepts for the column's Arrow type."""
    return v.bytes if isinstance(v, uuid.UUID) else v


def row_matches(bound: BooleanExpression, row: Mapping[int, Any]) -> bool:
    """Whether one row (field id → value) matches; the reference for the other
    evaluators' semantics."""
    return _evaluate(rewrite_not(bound), lambda ref: row.get(ref.field_id))


def _evaluate(expr: BooleanExpression, value_of: Callable[[BoundReference], Any]) -> bool:
    if expr is ALWAYS_TRUE:
        return True
    if expr is ALWAYS_FALSE:
        return False
    if isinstance(expr, And):
        return _evaluate(expr.left, value_of) and _evaluate(expr.right, value_of)
    if isinstance(expr, Or):
        return _evaluate(expr.left, value_of) or _evaluate(expr.right, value_of)
    if isinstance(expr, BoundPredicate):
        return _test_value(expr, value_of(expr.ref))
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


def referenced_field_ids(bound: BooleanExpression) -> set[int]:
    """The field ids a bound expression reads."""
    if isinstance(bound, (And, Or)):
        return referenced_field_ids(bound.left) | referenced_field_ids(bound.right)
    if isinstance(bound, Not):
        return referenced_field_ids(bound.child)
    if isinstance(bound, BoundPredicate):
        return {bound.ref.field_id}
    return set()


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
    return _metrics_eval(rewrite_not(bound), _FileMetrics(data_file))


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


def decode_bound(t: PrimitiveType, raw: Optional[bytes], path: str = "", field_id: int = 0) -> Any:
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


def _metrics_eval(expr: BooleanExpression, m: _FileMetrics) -> bool:
    if expr is ALWAYS_TRUE:
        return True
    if expr is ALWAYS_FALSE:
        return False
    if isinstance(expr, And):
        return _metrics_eval(expr.left, m) and _metrics_eval(expr.right, m)
    if isinstance(expr, Or):
        return _metrics_eval(expr.left, m) or _metrics_eval(expr.right, m)
    if isinstance(expr, BoundPredicate):
        return _METRIC_RULES[expr.op](expr, m)
    raise ValidationError(f"cannot evaluate {expr!r}: bind it to a schema first")


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
    return any(
        (lower is None or lower <= v) and (upper is None or v <= upper) for v in literals
    )


def _m_always(p: BoundPredicate, m: _FileMetrics) -> bool:
    """``!=`` and ``not in``: bounds need not be values of the file, so they prove nothing."""
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
    return _evaluate(rewrite_not(projected), lambda ref: partition[_position(ref)])


def _position(ref: BoundReference) -> int:
    if ref.position is None:
        raise ValidationError(
            f"{ref.name!r} is not a partition field: project the filter with project_to_partition"
        )
    return ref.position


def manifest_might_match(projected: BooleanExpression, partitions: Optional[Sequence[FieldSummary]]) -> bool:
    """Whether a manifest whose partition field summaries (``FieldSummary``,
    one per spec field, in spec order) are ``partitions`` may list a matching file."""
    if not partitions:
        return True
    return _summary_eval(rewrite_not(projected), partitions)


def _summary_eval(expr: BooleanExpression, partitions: Sequence[FieldSummary]) -> bool:
    if expr is ALWAYS_TRUE:
        return True
    if expr is ALWAYS_FALSE:
        return False
    if isinstance(expr, And):
        return _summary_eval(expr.left, partitions) and _summary_eval(expr.right, partitions)
    if isinstance(expr, Or):
        return _summary_eval(expr.left, partitions) or _summary_eval(expr.right, partitions)
    if isinstance(expr, BoundPredicate):
        position = _position(expr.ref)
        if position >= len(partitions):
            raise ValidationError(
                f"partition field {expr.ref.name!r} is field {position} of the spec, "
                f"but the manifest summarizes only {len(partitions)} fields"
            )
        return _summary_rule(expr, _Summary(expr.ref, partitions[position]))
    raise ValidationError(f"cannot evaluate {expr!r}: bind it to a schema first")


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
    if op in (Operation.NE, Operation.NOT_IN):
        return True
    if s.no_values:
        return False  # only nulls and NaNs, which no comparison matches
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
        BoundReference(pf.field_id, field.field_type, (pf.name,), position)
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
    literal = frozenset(pred.literals) if pred.op.is_set else (pred.literal if pred.literals else None)
    projected = transform.project_inclusive(pred.ref.field_type, Op(pred.op.value), literal)
    if projected is None:
        return ALWAYS_TRUE
    op = Operation(Op(projected.op).value)
    if op.is_unary:
        return BoundPredicate(op, ref)
    if op.is_set:
        return _bind_set(op, ref, list(projected.value))
    return BoundPredicate(op, ref, (projected.value,))
