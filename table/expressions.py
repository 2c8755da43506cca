"""Row filter predicates: the expression model, binding and literals (spec "Scan Planning").

Filters are written by column name (``col("id") == 5``) and then bound to a
schema: binding resolves each name to a field id and converts each literal to
the field's Python representation (docs/table-api.md). Evaluating bound
expressions against rows, file metrics, partitions and manifests is
:mod:`table.evaluators`' job.

Semantics. :func:`bind` rewrites ``Not`` away (negation normal form) so that
every evaluator sees only ``And``/``Or`` over predicates. A comparison (``==``,
``!=``, ``<``, ``in``, ``not in``, ...) with a null value is false, as in SQL,
and NaN compares as in IEEE 754 (``NaN < x`` and ``NaN == x`` are false,
``NaN != x`` is true). ``is_null``/``not_null``/``is_nan``/``not_nan`` are never
unknown.
"""

from __future__ import annotations

import datetime
import math
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum
from typing import Any, Self

from table.conversions import from_json
from table.errors import ValidationError
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
    STARTS_WITH = "starts_with"
    NOT_STARTS_WITH = "not_starts_with"

    def negate(self) -> Operation:
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

    @property
    def is_prefix(self) -> bool:
        return self in (Operation.STARTS_WITH, Operation.NOT_STARTS_WITH)


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
    Operation.STARTS_WITH: Operation.NOT_STARTS_WITH,
    Operation.NOT_STARTS_WITH: Operation.STARTS_WITH,
}


# --------------------------------------------------------------------------
# Expression tree
# --------------------------------------------------------------------------


class BooleanExpression:
    """Base of every filter expression; ``&``, ``|`` and ``~`` combine them."""

    def __and__(self, other: BooleanExpression) -> BooleanExpression:
        return And(self, other)

    def __or__(self, other: BooleanExpression) -> BooleanExpression:
        return Or(self, other)

    def __invert__(self) -> BooleanExpression:
        return Not(self)

    def negate(self) -> BooleanExpression:
        """``Not(self)`` with the negation pushed into the predicates."""
        raise NotImplementedError


class _Constant(BooleanExpression):
    """A singleton, so that ``is`` comparisons hold even after copying."""

    _instance: Any = None  # each subclass keeps its own one instance

    def __new__(cls) -> Self:
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

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose, see the docstring

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError(f"column name must be a non-empty string, got {name!r}")
        self.name = name

    def _pred(self, op: Operation, *values: Any) -> UnboundPredicate:
        return UnboundPredicate(op, self.name, tuple(values))

    def __eq__(self, value: object) -> UnboundPredicate:  # type: ignore[override]  # == builds a predicate, as in pyiceberg
        return self._pred(Operation.EQ, value)

    def __ne__(self, value: object) -> UnboundPredicate:  # type: ignore[override]  # != builds a predicate, as in pyiceberg
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

    def starts_with(self, prefix: str) -> UnboundPredicate:
        """Strings that begin with ``prefix`` (a string column only)."""
        return self._pred(Operation.STARTS_WITH, prefix)

    def not_starts_with(self, prefix: str) -> UnboundPredicate:
        """Strings that do not begin with ``prefix``; as in SQL, not null ones."""
        return self._pred(Operation.NOT_STARTS_WITH, prefix)

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
    position: int | None = None

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
        raise ValidationError(f"column {pred.column!r}: cannot filter on {field.field_type}, only on primitive columns")
    ref = BoundReference(field.field_id, field.field_type, tuple(f.name for f in fields))
    if pred.op.is_unary:
        return _bind_unary(pred.op, ref, all(f.required for f in fields))
    if pred.op.is_prefix and not isinstance(field.field_type, StringType):
        raise ValidationError(f"column {pred.column!r}: {pred.op.value} needs a string column, not {field.field_type}")
    values = [_to_literal(pred.column, field.field_type, v) for v in pred.literals]
    if not pred.op.is_set:
        return BoundPredicate(pred.op, ref, tuple(values))
    return bind_set(pred.op, ref, values)


def _bind_unary(op: Operation, ref: BoundReference, never_null: bool) -> BooleanExpression:
    """Fold the unary predicates whose answer the type already gives."""
    if never_null and op in (Operation.IS_NULL, Operation.NOT_NULL):
        return ALWAYS_FALSE if op is Operation.IS_NULL else ALWAYS_TRUE
    is_float = isinstance(ref.field_type, (FloatType, DoubleType))
    if not is_float and op in (Operation.IS_NAN, Operation.NOT_NAN):
        return ALWAYS_FALSE if op is Operation.IS_NAN else ALWAYS_TRUE
    return BoundPredicate(op, ref)


def bind_set(op: Operation, ref: BoundReference, values: list[Any]) -> BooleanExpression:
    """An ``in``/``not in`` predicate with sorted, unique literals; empty and
    one-element sets fold to a constant or a comparison."""
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
            raise ValidationError(f"column {name!r} is inside {parent.field_type} {parent.name!r}: cannot filter on it")
        path.insert(0, parent)
        parent_id = schema.parent_id(parent_id)
    return path


# --------------------------------------------------------------------------
# Literal conversion
# --------------------------------------------------------------------------

_INT_RANGES = {IntegerType: (-(2**31), 2**31 - 1), LongType: (-(2**63), 2**63 - 1)}
_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_EPOCH_TZ = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
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


def referenced_field_ids(bound: BooleanExpression) -> set[int]:
    """The field ids a bound expression reads."""
    if isinstance(bound, (And, Or)):
        return referenced_field_ids(bound.left) | referenced_field_ids(bound.right)
    if isinstance(bound, Not):
        return referenced_field_ids(bound.child)
    if isinstance(bound, BoundPredicate):
        return {bound.ref.field_id}
    return set()
