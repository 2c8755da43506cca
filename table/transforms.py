"""Partition transforms (spec "Partition Transforms", Appendix B).

A :class:`Transform` is unbound: it does not know its source column, the way
its JSON name ("bucket[16]") does not. Every operation on values therefore
takes the source type first, like :func:`table.conversions.to_bytes`, because
Python ints stand for ints, dates, times and timestamps alike. ``bind(t)``
validates the type once and returns a fast per-value function.

``apply_arrow`` is the writer's path: it works on whole Arrow arrays, whose
types carry the source type, with pyarrow.compute. Temporal results are int32
ordinals (``day`` too, although its Iceberg result type is ``date``), matching
the partition tuple representation in docs/table-api.md.

``project`` rewrites a bound predicate (:mod:`table.expressions`) on the
source column into one on the partition value that every matching row's
partition satisfies (Iceberg Java's ``ProjectionUtil``); ``None`` means the
predicate cannot prune.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from decimal import Decimal
from typing import Any, TypeAlias

import mmh3
import pyarrow as pa
import pyarrow.compute as pc

from table.conversions import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    MICROS_PER_DAY,
    MICROS_PER_HOUR,
    MICROS_PER_SECOND,
    civil_from_days,
    decimal_to_unscaled,
    iso_timestamp,
    iso_timestamptz,
    min_twos_complement,
    shortest_float32,
    to_bytes,
    unscaled_to_decimal,
)
from table.errors import SchemaError, ValidationError
from table.expressions import BooleanExpression, BoundPredicate, BoundReference, Operation, bind_set
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
    LongType,
    PrimitiveType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

ArrowArray: TypeAlias = pa.Array | pa.ChunkedArray
_INT_MAX_MASK = 0x7FFFFFFF
_EPOCH_YEAR = 1970
_INTEGRAL = (IntegerType, LongType, DateType, TimeType, TimestampType, TimestamptzType)


# ----------------------------------------------------------------- hashing

_LONG = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")
_CANONICAL_NAN = _LONG.pack(0x7FF8000000000000)


def _hash_input(t: IcebergType, value: Any) -> bytes:
    if isinstance(t, _INTEGRAL):
        to_bytes(t, value)  # validates the type and range
        return _LONG.pack(value)
    if isinstance(t, BooleanType):
        return _LONG.pack(int(_require(t, value, bool)))
    if isinstance(t, (FloatType, DoubleType)):
        number = float(_require(t, value, (int, float)))
        return _CANONICAL_NAN if math.isnan(number) else _DOUBLE.pack(number + 0.0)
    return to_bytes(t, value)


def _raw_hasher(t: PrimitiveType) -> Callable[[Any], int]:
    """Hash of values already known valid (they come out of a typed Arrow array)."""
    if isinstance(t, DecimalType):
        scale = t.scale
        return lambda value: mmh3.hash(min_twos_complement(decimal_to_unscaled(value, scale)))
    return mmh3.hash  # str hashes as its UTF-8 bytes, bytes as themselves


def bucket_hash(t: IcebergType, value: Any) -> int:
    """Signed 32-bit Murmur3 (x86, seed 0) of ``value`` as Appendix B specifies.

    Integral types hash as 8-byte little-endian longs, so int->long promotion
    keeps bucket values; floats hash as doubles with NaN and -0.0 canonical.
    """
    return mmh3.hash(_hash_input(t, value))


def _require(t: IcebergType, value: Any, kind: type | tuple[type, ...]) -> Any:
    bad_bool = isinstance(value, bool) and kind is not bool
    if bad_bool or not isinstance(value, kind):
        raise ValidationError(f"{t} value expected, got {value!r}")
    return value


# -------------------------------------------------------- human-readable text


def _java_float_string(value: float, single: bool) -> str:
    """``Double.toString`` / ``Float.toString`` of JDK 19+ (shortest digits)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1, value) < 0 else "0.0"
    text = repr(shortest_float32(value) if single else value)
    exact = Decimal(text)
    if 1e-3 <= abs(value) < 1e7:
        plain = format(exact, "f")
        return plain if "." in plain else plain + ".0"
    sign, digits, exponent = exact.normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    power = len(digits) - 1 + exponent  # type: ignore[operator]  # a finite decimal's exponent is an int
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


def _java_local_time(micros: int) -> str:
    """``LocalTime.toString``: seconds only when non-zero, fraction in 3-digit groups."""
    seconds, frac = divmod(micros, MICROS_PER_SECOND)
    minutes, sec = divmod(seconds, 60)
    text = f"{minutes // 60:02d}:{minutes % 60:02d}"
    if sec or frac:
        text += f":{sec:02d}"
    if frac:
        text += f".{frac // 1000:03d}" if frac % 1000 == 0 else f".{frac:06d}"
    return text


def _human_day(days: int) -> str:
    year, month, day = civil_from_days(days)
    return f"{year:04d}-{month:02d}-{day:02d}"


def _human_hour(hours: int) -> str:
    days, hour = divmod(hours, 24)
    return f"{_human_day(days)}-{hour:02d}"


def _human_month(months: int) -> str:
    years, month = divmod(months, 12)
    return f"{_EPOCH_YEAR + years:04d}-{month + 1:02d}"


def _human_value(t: IcebergType, value: Any) -> str:
    """Text of a source-typed value, as Iceberg Java prints it in partition paths."""
    if isinstance(t, DateType):
        return _human_day(value)
    if isinstance(t, TimeType):
        return _java_local_time(value)
    if isinstance(t, TimestampType):
        return iso_timestamp(value)
    if isinstance(t, TimestamptzType):
        return iso_timestamptz(value)
    if isinstance(t, (FixedType, BinaryType)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(t, DecimalType):
        return str(unscaled_to_decimal(decimal_to_unscaled(value, t.scale), t.scale))
    if isinstance(t, (FloatType, DoubleType)):
        return _java_float_string(value, isinstance(t, FloatType))
    if isinstance(t, BooleanType):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------- arrow helpers


def _plain(array: pa.Array) -> pa.Array:
    """Strip extension and dictionary wrappers so kernels see the value type."""
    if isinstance(array.type, pa.BaseExtensionType):
        array = array.storage
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array


def _micros(array: pa.Array) -> pa.Array:
    """A timestamp array as zone-less microseconds (values are UTC either way)."""
    try:
        return array.cast(pa.timestamp(array.type.unit)).cast(pa.timestamp("us"))
    except pa.ArrowInvalid as exc:
        raise ValidationError(f"{array.type} values do not fit microseconds: {exc}") from exc


def _per_value(array: pa.Array, fn: Callable[[Any], Any], result: pa.DataType) -> pa.Array:
    return pa.array([None if v is None else fn(v) for v in array.to_pylist()], type=result)


def _unsupported_arrow(transform: Transform, array: pa.Array) -> ValidationError:
    return ValidationError(f"transform {transform} cannot apply to Arrow type {array.type}")


def _u32(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.uint32())


def _rotl(x: pa.Array, bits: int) -> pa.Array:
    return pc.bit_wise_or(pc.shift_left(x, _u32(bits)), pc.shift_right(x, _u32(32 - bits)))


def _murmur_block(h: pa.Array | pa.Scalar, k: pa.Array) -> pa.Array:
    k = pc.multiply(_rotl(pc.multiply(k, _u32(0xCC9E2D51)), 15), _u32(0x1B873593))
    h = _rotl(pc.bit_wise_xor(h, k), 13)
    return pc.add(pc.multiply(h, _u32(5)), _u32(0xE6546B64))


def _murmur_longs(longs: pa.Array) -> pa.Array:
    """Murmur3_x86_32 of each int64's 8 little-endian bytes, vectorized.

    uint32 kernels wrap on overflow, which is exactly Murmur's arithmetic.
    """
    bits = longs.cast(pa.uint64(), safe=False)
    low = pc.bit_wise_and(bits, pa.scalar(0xFFFFFFFF, pa.uint64())).cast(pa.uint32())
    high = pc.shift_right(bits, pa.scalar(32, pa.uint64())).cast(pa.uint32())
    h = _murmur_block(_murmur_block(_u32(0), low), high)  # seed 0
    h = pc.bit_wise_xor(h, _u32(8))
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = pc.multiply(pc.bit_wise_xor(h, pc.shift_right(h, _u32(shift))), _u32(factor))
    return pc.bit_wise_xor(h, pc.shift_right(h, _u32(16)))


def _arrow_longs(array: pa.Array) -> pa.Array | None:
    """int64 view of integral, date, time and timestamp arrays; None otherwise."""
    kind = array.type
    if pa.types.is_timestamp(kind):
        return _micros(array).cast(pa.int64())
    if pa.types.is_date32(kind):
        return array.cast(pa.int32()).cast(pa.int64())
    if pa.types.is_time(kind):
        return array.cast(pa.time64("us")).cast(pa.int64())
    if pa.types.is_integer(kind):
        return array.cast(pa.int64())
    return None


def _iceberg_type_of(kind: pa.DataType) -> PrimitiveType | None:
    """The Iceberg type whose hash/truncate rules apply to a non-integral Arrow type."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return StringType()
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return BinaryType()
    if pa.types.is_fixed_size_binary(kind):
        return FixedType(kind.byte_width)
    if pa.types.is_decimal(kind):
        return DecimalType(kind.precision, kind.scale)
    return None


# ------------------------------------------------------------- base transform


class Transform(ABC):
    """A partition transform: its JSON name, rules and value functions."""

    @abstractmethod
    def __str__(self) -> str: ...

    def __repr__(self) -> str:
        return f"parse_transform({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Transform) and str(other) == str(self)

    def __hash__(self) -> int:
        return hash(str(self))

    @abstractmethod
    def can_transform(self, source_type: IcebergType) -> bool:
        """Whether the spec allows this transform on ``source_type``."""

    @property
    def preserves_order(self) -> bool:
        """Whether ``a <= b`` implies ``f(a) <= f(b)`` (allows range pruning)."""
        return False

    @property
    def dedup_name(self) -> str:
        """Key under which two fields on one column are redundant ("time" for temporal)."""
        return str(self)

    def check(self, source_type: IcebergType) -> None:
        """Raise :class:`SchemaError` unless this transform applies to ``source_type``."""
        if not self.can_transform(source_type):
            raise SchemaError(f"transform {self} cannot be applied to source type {source_type}")

    def result_type(self, source_type: IcebergType) -> IcebergType:
        """The partition field type produced from ``source_type``."""
        self.check(source_type)
        return self._result_type(source_type)

    def bind(self, source_type: IcebergType) -> Callable[[Any], Any]:
        """A validated per-value function for ``source_type`` (None maps to None)."""
        self.check(source_type)
        fn = self._function(source_type)
        return lambda value: None if value is None else fn(value)

    def apply(self, source_type: IcebergType, value: Any) -> Any:
        """Transform one Python value of ``source_type``."""
        return self.bind(source_type)(value)

    def apply_arrow(self, array: ArrowArray) -> ArrowArray:
        """Transform a whole Arrow array (or chunked array); nulls stay null."""
        if isinstance(array, pa.ChunkedArray):
            chunks = array.chunks or [pa.array([], type=array.type)]
            return pa.chunked_array([self._apply_arrow(_plain(c)) for c in chunks])
        return self._apply_arrow(_plain(array))

    def to_human_string(self, source_type: IcebergType, value: Any) -> str:
        """The partition value as Iceberg Java writes it in paths ("null" for None)."""
        return "null" if value is None else self._human(source_type, value)

    def project(self, pred: BoundPredicate, partition: BoundReference) -> BooleanExpression | None:
        """The inclusive projection of ``pred`` (on this transform's source
        column) onto the partition value ``partition``, or None when the
        transform cannot narrow anything (Iceberg Java's ``Transform.project``).

        Every row that satisfies ``pred`` lies in a partition that satisfies
        the result.
        """
        op = pred.op
        self.check(pred.ref.field_type)
        if op.is_unary:
            projected = self._project_unary(op)
        else:
            if not pred.literals:
                raise ValidationError(f"predicate {op.value} on {pred.ref.name!r} needs a literal")
            literal = frozenset(pred.literals) if op.is_set else pred.literal
            projected = self._project(pred.ref.field_type, op, literal)
        return None if projected is None else _predicate(projected, partition)

    # subclass hooks ---------------------------------------------------------

    def _result_type(self, source_type: IcebergType) -> IcebergType:
        return source_type

    @abstractmethod
    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]: ...

    @abstractmethod
    def _apply_arrow(self, array: pa.Array) -> pa.Array: ...

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return str(value)

    def _project_unary(self, op: Operation) -> Projected | None:
        return (op, None)

    @abstractmethod
    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> Projected | None: ...


Projected = tuple[Operation, Any]
"""A projection before it is bound to the partition field: the operation and
its partition-typed value (a frozenset for ``in``/``not in``, None when unary)."""


def _predicate(projected: Projected, partition: BoundReference) -> BooleanExpression:
    op, value = projected
    if op.is_unary:
        return BoundPredicate(op, partition)
    if op.is_set:
        return bind_set(op, partition, list(value))
    return BoundPredicate(op, partition, (value,))


def _project_ordered(
    op: Operation, literal: Any, fn: Callable[[Any], Any], step: Callable[[Any, int], Any]
) -> Projected | None:
    """Inclusive projection of a monotonic transform over a discrete domain.

    ``x < v`` is ``x <= v - 1``, and ``x <= v`` implies ``f(x) <= f(v)``.
    """
    if op is Operation.LT:
        return (Operation.LE, fn(step(literal, -1)))
    if op is Operation.LE:
        return (Operation.LE, fn(literal))
    if op is Operation.GT:
        return (Operation.GE, fn(step(literal, 1)))
    if op is Operation.GE:
        return (Operation.GE, fn(literal))
    if op is Operation.EQ:
        return (Operation.EQ, fn(literal))
    if op is Operation.IN:
        return (Operation.IN, frozenset(fn(v) for v in literal))
    return None


def _project_set(op: Operation, literal: Any, fn: Callable[[Any], Any]) -> Projected:
    return (op, frozenset(fn(v) for v in literal))


# ------------------------------------------------------------------ identity


class IdentityTransform(Transform):
    """The source value unchanged."""

    def __str__(self) -> str:
        return "identity"

    @property
    def preserves_order(self) -> bool:
        return True

    def can_transform(self, source_type: IcebergType) -> bool:
        return source_type.is_primitive

    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]:
        return lambda value: value

    def apply_arrow(self, array: ArrowArray) -> ArrowArray:
        return array  # unchanged, extension and dictionary types included

    def _apply_arrow(self, array: pa.Array) -> pa.Array:
        return array

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return _human_value(source_type, value)

    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> Projected:
        if op.is_set:
            return _project_set(op, literal, lambda v: v)
        return (op, literal)


# -------------------------------------------------------------------- bucket

_BUCKETABLE = (
    IntegerType, LongType, DecimalType, DateType, TimeType, TimestampType,
    TimestamptzType, StringType, UUIDType, FixedType, BinaryType,
)  # fmt: skip


class BucketTransform(Transform):
    """``(murmur3(v) & Integer.MAX_VALUE) % N``: spreads values over N buckets."""

    def __init__(self, num_buckets: int) -> None:
        if isinstance(num_buckets, bool) or not isinstance(num_buckets, int) or num_buckets <= 0:
            raise SchemaError(f"bucket count must be a positive int, got {num_buckets!r}")
        self.num_buckets = num_buckets

    def __str__(self) -> str:
        return f"bucket[{self.num_buckets}]"

    def can_transform(self, source_type: IcebergType) -> bool:
        return isinstance(source_type, _BUCKETABLE)

    def _result_type(self, source_type: IcebergType) -> IcebergType:
        return IntegerType()

    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]:
        n = self.num_buckets
        return lambda value: (bucket_hash(source_type, value) & _INT_MAX_MASK) % n

    def _apply_arrow(self, array: pa.Array) -> pa.Array:
        longs = _arrow_longs(array)
        if longs is not None:
            return self._modulo(pc.bit_wise_and(_murmur_longs(longs), _u32(_INT_MAX_MASK)))
        source = _iceberg_type_of(array.type)
        if source is None:
            raise _unsupported_arrow(self, array)
        return self._bucket_distinct(array, _raw_hasher(source))

    def _bucket_distinct(self, array: pa.Array, hasher: Callable[[Any], int]) -> pa.Array:
        # Hash each distinct value once: keys in a batch repeat a lot.
        encoded = array.dictionary_encode()
        n = self.num_buckets
        buckets = [(hasher(v) & _INT_MAX_MASK) % n for v in encoded.dictionary.to_pylist()]
        return pa.array(buckets, pa.int32()).take(encoded.indices)

    def _modulo(self, hashed: pa.Array) -> pa.Array:
        # Arrow has no modulo kernel; unsigned division truncates, so h - (h / n) * n.
        n = _u32(self.num_buckets)
        return pc.subtract(hashed, pc.multiply(pc.divide(hashed, n), n)).cast(pa.int32())

    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> Projected | None:
        fn = self.bind(source_type)
        if op is Operation.EQ:
            return (Operation.EQ, fn(literal))
        return _project_set(op, literal, fn) if op is Operation.IN else None


# ------------------------------------------------------------------ truncate


def _wrap(value: int, bits: int) -> int:
    """Two's-complement wrap-around, as Java's int/long arithmetic overflows."""
    half = 1 << (bits - 1)
    return (value + half) % (1 << bits) - half


class TruncateTransform(Transform):
    """Ints and decimals down to a multiple of W; strings to W code points; binary to W bytes."""

    def __init__(self, width: int) -> None:
        if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
            raise SchemaError(f"truncate width must be a positive int, got {width!r}")
        self.width = width

    def __str__(self) -> str:
        return f"truncate[{self.width}]"

    @property
    def preserves_order(self) -> bool:
        return True

    def can_transform(self, source_type: IcebergType) -> bool:
        return isinstance(source_type, (IntegerType, LongType, DecimalType, StringType, BinaryType))

    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]:
        w = self.width
        if isinstance(source_type, (IntegerType, LongType)):
            bits = 32 if isinstance(source_type, IntegerType) else 64
            return lambda v: _wrap(_require(source_type, v, int) - v % w, bits)
        if isinstance(source_type, DecimalType):
            return self._truncate_decimal(source_type)
        kind = str if isinstance(source_type, StringType) else (bytes, bytearray, memoryview)
        return lambda v: _require(source_type, v, kind)[:w]

    def _truncate_decimal(self, source_type: DecimalType) -> Callable[[Decimal], Decimal]:
        scale, limit = source_type.scale, 10**source_type.precision

        def truncate_decimal(value: Decimal) -> Decimal:
            unscaled = decimal_to_unscaled(value, source_type.scale)
            result = unscaled - unscaled % self.width
            if result <= -limit:  # only values within W of the smallest can fall off
                raise ValidationError(f"{self} of {value} does not fit {source_type}")
            return unscaled_to_decimal(result, scale)

        return truncate_decimal

    def _apply_arrow(self, array: pa.Array) -> pa.Array:
        kind = array.type
        if pa.types.is_integer(kind):
            return self._truncate_ints(array)
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            return pc.utf8_slice_codeunits(array, 0, self.width)
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            return pc.binary_slice(array, 0, self.width)
        if pa.types.is_decimal(kind):
            truncate = self._truncate_decimal(DecimalType(kind.precision, kind.scale))
            return _per_value(array, truncate, kind)
        raise _unsupported_arrow(self, array)

    def _truncate_ints(self, array: pa.Array) -> pa.Array:
        target = pa.int64() if array.type.bit_width == 64 else pa.int32()
        values = array.cast(target)
        w = pa.scalar(self.width, target)
        remainder = pc.subtract(values, pc.multiply(pc.divide(values, w), w))
        remainder = pc.if_else(pc.less(remainder, pa.scalar(0, target)), pc.add(remainder, w), remainder)
        return pc.subtract(values, remainder)

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return _human_value(source_type, value)

    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> Projected | None:
        fn = self.bind(source_type)
        if isinstance(source_type, (IntegerType, LongType)):
            return _project_ordered(op, literal, fn, lambda v, d: v + d)
        if isinstance(source_type, DecimalType):
            return _project_ordered(op, literal, fn, _decimal_step(source_type.scale))
        if op.is_prefix:
            return self._project_prefix(op, literal)
        return _project_prefixes(op, literal, fn)

    def _project_prefix(self, op: Operation, prefix: Any) -> Projected | None:
        # A prefix shorter than W is a prefix of the partition value, one of
        # exactly W characters is the whole value.
        if len(prefix) < self.width:
            return (op, prefix)
        if len(prefix) == self.width:
            return (Operation.EQ if op is Operation.STARTS_WITH else Operation.NE, prefix)
        return (Operation.STARTS_WITH, prefix[: self.width]) if op is Operation.STARTS_WITH else None


def _decimal_step(scale: int) -> Callable[[Decimal, int], Decimal]:
    def step(value: Decimal, delta: int) -> Decimal:
        return unscaled_to_decimal(decimal_to_unscaled(value, scale) + delta, scale)

    return step


def _project_prefixes(op: Operation, literal: Any, fn: Callable[[Any], Any]) -> Projected | None:
    """Truncated strings/bytes: prefixes keep order but no predecessor exists."""
    if op in (Operation.LT, Operation.LE):
        return (Operation.LE, fn(literal))
    if op in (Operation.GT, Operation.GE):
        return (Operation.GE, fn(literal))
    if op is Operation.EQ:
        return (Operation.EQ, fn(literal))
    return _project_set(op, literal, fn) if op is Operation.IN else None


# ------------------------------------------------------------------ temporal


class _TimeTransform(Transform):
    """Shared rules of year, month, day and hour."""

    _name = ""
    _sources: tuple[type, ...] = (DateType, TimestampType, TimestamptzType)

    def __str__(self) -> str:
        return self._name

    @property
    def preserves_order(self) -> bool:
        return True

    @property
    def dedup_name(self) -> str:
        return "time"

    def can_transform(self, source_type: IcebergType) -> bool:
        return isinstance(source_type, self._sources)

    def _result_type(self, source_type: IcebergType) -> IcebergType:
        return IntegerType()

    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]:
        from_days = isinstance(source_type, DateType)
        low, high = (INT_MIN, INT_MAX) if from_days else (LONG_MIN, LONG_MAX)

        def ordinal(value: int) -> int:
            if not low <= _require(source_type, value, int) <= high:
                raise ValidationError(f"{source_type} value {value} is out of range")
            return self._from_days(value) if from_days else self._from_micros(value)

        return ordinal

    def _from_micros(self, micros: int) -> int:
        return self._from_days(micros // MICROS_PER_DAY)

    @abstractmethod
    def _from_days(self, days: int) -> int: ...

    def _apply_arrow(self, array: pa.Array) -> pa.Array:
        kind = array.type
        if pa.types.is_timestamp(kind):
            return self._arrow_ordinal(_micros(array)).cast(pa.int32())
        if pa.types.is_date32(kind) and DateType in self._sources:
            return self._arrow_ordinal(array).cast(pa.int32())
        raise _unsupported_arrow(self, array)

    @abstractmethod
    def _arrow_ordinal(self, array: pa.Array) -> pa.Array: ...

    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> Projected | None:
        projected = _project_ordered(op, literal, self.bind(source_type), lambda v, d: v + d)
        return _fix_inclusive_time(projected)


def _fix_inclusive_time(projected: Projected | None) -> Projected | None:
    """Widen projections over negative ordinals.

    Iceberg Java 0.10 and older wrote ``ordinal + 1`` for pre-1970 values;
    inclusive projection must still find those files (as Java does).
    """
    if projected is None:
        return None
    op, value = projected
    if op is Operation.LE and value < 0:
        return (op, value + 1)
    if op is Operation.EQ and value < 0:
        return (Operation.IN, frozenset({value, value + 1}))
    if op is Operation.IN and any(v < 0 for v in value):
        return (Operation.IN, value | {v + 1 for v in value if v < 0})
    return projected


_ARROW_EPOCH = pa.scalar(0, pa.timestamp("us"))


def _arrow_years(array: pa.Array) -> pa.Array:
    return pc.subtract(pc.year(array), _EPOCH_YEAR)


class YearTransform(_TimeTransform):
    """Years since 1970."""

    _name = "year"

    def _from_days(self, days: int) -> int:
        return civil_from_days(days)[0] - _EPOCH_YEAR

    def _arrow_ordinal(self, array: pa.Array) -> pa.Array:
        return _arrow_years(array)

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return f"{_EPOCH_YEAR + value:04d}"


class MonthTransform(_TimeTransform):
    """Months since 1970-01."""

    _name = "month"

    def _from_days(self, days: int) -> int:
        year, month, _ = civil_from_days(days)
        return (year - _EPOCH_YEAR) * 12 + month - 1

    def _arrow_ordinal(self, array: pa.Array) -> pa.Array:
        return pc.add(pc.multiply(_arrow_years(array), 12), pc.subtract(pc.month(array), 1))

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return _human_month(value)


class DayTransform(_TimeTransform):
    """Days since 1970-01-01; the Iceberg result type is ``date``, as in Java."""

    _name = "day"

    def _result_type(self, source_type: IcebergType) -> IcebergType:
        return DateType()

    def _from_days(self, days: int) -> int:
        return days

    def _arrow_ordinal(self, array: pa.Array) -> pa.Array:
        if pa.types.is_date32(array.type):
            return array.cast(pa.int32())
        return pc.days_between(_ARROW_EPOCH, array)

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return _human_day(value)


class HourTransform(_TimeTransform):
    """Hours since 1970-01-01 00:00; timestamps only."""

    _name = "hour"
    _sources = (TimestampType, TimestamptzType)

    def _from_days(self, days: int) -> int:
        raise AssertionError("hour has no date source")  # unreachable: check() rejects dates

    def _from_micros(self, micros: int) -> int:
        return micros // MICROS_PER_HOUR

    def _arrow_ordinal(self, array: pa.Array) -> pa.Array:
        return pc.hours_between(_ARROW_EPOCH, array)

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return _human_hour(value)


# ---------------------------------------------------------------------- void


class VoidTransform(Transform):
    """Always null; replaces a dropped partition field in v1 tables."""

    def __str__(self) -> str:
        return "void"

    def can_transform(self, source_type: IcebergType) -> bool:
        return True

    def _function(self, source_type: IcebergType) -> Callable[[Any], Any]:
        return lambda value: None

    def _apply_arrow(self, array: pa.Array) -> pa.Array:
        return pa.nulls(len(array), type=array.type)

    def _human(self, source_type: IcebergType, value: Any) -> str:
        return "null"

    def _project_unary(self, op: Operation) -> Projected | None:
        return None

    def _project(self, source_type: IcebergType, op: Operation, literal: Any) -> None:
        return None


# ------------------------------------------------------------------- parsing

_SIMPLE: dict[str, Callable[[], Transform]] = {
    "identity": IdentityTransform,
    "year": YearTransform,
    "month": MonthTransform,
    "day": DayTransform,
    "hour": HourTransform,
    "void": VoidTransform,
}
_PARAMETERIZED: dict[str, Callable[[int], Transform]] = {
    "bucket": BucketTransform,
    "truncate": TruncateTransform,
}
_WITH_ARG = re.compile(r"^(\w+)\[\s*(\d+)\s*\]$")


def parse_transform(text: str) -> Transform:
    """The transform named by its JSON string ("day", "bucket[16]", ...)."""
    if not isinstance(text, str):
        raise SchemaError(f"transform must be a string, got {text!r}")
    name = text.strip().lower()
    if name in _SIMPLE:
        return _SIMPLE[name]()
    if (m := _WITH_ARG.match(name)) and m.group(1) in _PARAMETERIZED:
        return _PARAMETERIZED[m.group(1)](int(m.group(2)))
    raise SchemaError(f"unknown partition transform {text!r}")
