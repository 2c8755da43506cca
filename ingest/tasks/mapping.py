"""Decoded Kafka values -> Arrow columns of an Iceberg table (Kafka metadata
columns, filled from key, headers and position, are :mod:`ingest.tasks.kafka_columns`).

Typing is strict: a value lands only when it denotes exactly one value of its
column's Iceberg type (an ``int`` for ``long``, never ``true`` or ``1.5``; a
decimal only when no digit is lost). Anything else is a :class:`FieldError`
naming the field's dotted path and the reason; the caller sends that record to
the dead letters instead of failing the batch.

Accepted inputs per Iceberg type (JSON and Avro decoders produce these):

* boolean: ``bool``. int, long: ``int`` within range.
* float, double: ``int``, ``float``, ``Decimal`` (rounded to the nearest float).
* decimal(P,S): ``Decimal``, ``int``, decimal text (``"12.30"``, ``"1e3"``),
  ``float`` through its shortest repr. Never rounded: more than S fractional
  digits, or more than P-S integer digits, is an error.
* date: ``datetime.date``, ``int`` days since 1970-01-01, ``"YYYY-MM-DD"``.
* time: ``datetime.time``, numbers in the epoch unit since midnight,
  ``"HH:MM[:SS[.f]]"``.
* timestamp, timestamptz: ``datetime``, numbers in the epoch unit (s, ms, us
  or ns, :class:`MappingOptions`) since 1970-01-01T00:00Z, ISO-8601 text
  ``YYYY-MM-DD[(T| )HH:MM[:SS[.f]][Z|+HH[:MM]]]``. ``timestamptz`` needs a zone
  (converted to UTC); ``timestamp`` takes none, or a zero offset.
  Sub-microsecond digits are truncated: Iceberg v2 stores microseconds.
* string: ``str``. uuid: ``uuid.UUID``, canonical text, 16 bytes.
* fixed(L), binary: ``bytes``; text is base64 (how Kafka Connect puts bytes in JSON).
* struct: ``dict`` (unknown keys are ignored, absent optional fields are null);
  list: ``list``; map: ``dict``, or a list of ``[key, value]`` pairs.

Performance: values are converted a column at a time, never a row at a time.
All records' values of one field are gathered into a list and handed to
Arrow's C type inference; when the inferred type is the exact Python type the
Iceberg type wants (ints for ``long``, text for ``timestamptz``...), Arrow's
checked casts finish the job with no per-value Python. Only when that fails
(some value is wrong, or the type needs Python parsing such as uuids) does the
per-value converter run, and it alone says which record is wrong and why. The
per-value converters define the semantics; the fast path accepts a subset of
what they accept and yields the same values (a property test checks this).
"""

from __future__ import annotations

import base64
import decimal
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.record_errors import FieldError
from table.arrow_schema import schema_to_arrow, type_to_arrow
from table.conversions import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN, MICROS_PER_DAY, parse_iso_date
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

EpochUnit = Literal["s", "ms", "us", "ns"]
EPOCH_UNITS: tuple[str, ...] = ("s", "ms", "us", "ns")


@dataclass(frozen=True)
class MappingOptions:
    """How ambiguous encodings are read: ``epoch_unit`` of numeric times and timestamps."""

    epoch_unit: EpochUnit = "ms"

    def __post_init__(self) -> None:
        if self.epoch_unit not in EPOCH_UNITS:
            raise ValueError(f"epoch_unit must be one of {EPOCH_UNITS}, got {self.epoch_unit!r}")


# ---------------------------------------------------------------------------
# Describing values in error messages
# ---------------------------------------------------------------------------

_SHOWN_CHARS = 40


def describe(value: Any) -> str:
    """A short, JSON-flavoured description of a value: ``string "abc"``, ``number 1.5``."""
    if value is None:
        return "null"
    if value is True or value is False:
        return f"boolean {str(value).lower()}"
    if isinstance(value, (int, float, Decimal)):
        return f"number {value}"
    if isinstance(value, str):
        shown = value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."
        return "string " + json.dumps(shown, ensure_ascii=False)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"{len(value)} bytes"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, (date, time)):  # datetime is a date
        return f"{type(value).__name__} {value.isoformat()}"
    if isinstance(value, uuid.UUID):
        return f"uuid {value}"
    return type(value).__name__


# ---------------------------------------------------------------------------
# Per-value converters: the semantics
# ---------------------------------------------------------------------------


class _Reject(Exception):
    """A value does not fit its type; ``reason`` leaves the field to the caller."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Converter = Callable[[Any], Any]
"""Turns one non-null decoded value into the Python value Arrow stores, or raises ``_Reject``."""

_FLOAT32_MAX = 3.4028234663852886e38
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_EPOCH_SCALE = {"s": (1_000_000, 1), "ms": (1_000, 1), "us": (1, 1), "ns": (1, 1_000)}
"""Per unit: (multiplier, floor divisor) to microseconds."""
_EPOCH_SHIFT = {"s": 6, "ms": 3, "us": 0, "ns": -3}
"""Per unit: the power of ten to microseconds, for exact decimal scaling."""
_MAX_EPOCH_DIGITS = 30  # beyond any int64 microsecond count in any unit

_DECIMAL_TEXT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_DECIMAL_CONTEXT = decimal.Context(prec=2 * DecimalType.MAX_PRECISION)
_UUID_TEXT = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_ISO_TIME = r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
_TIME_TEXT = re.compile(_ISO_TIME)
_TIMESTAMP_TEXT = re.compile(r"([+-]?\d{4,}-\d{2}-\d{2})(?:[T ]" + _ISO_TIME + r"(Z|[+-]\d{2}(?::?\d{2})?)?)?")


def _mismatch(t: IcebergType, value: Any) -> _Reject:
    return _Reject(f"expected {t}, got {describe(value)}")


def _boolean(t: BooleanType, _options: MappingOptions) -> Converter:
    def convert(value: Any) -> bool:
        if value is True or value is False:
            return value
        raise _mismatch(t, value)

    return convert


def _integer(t: PrimitiveType, _options: MappingOptions) -> Converter:
    low, high = (INT_MIN, INT_MAX) if isinstance(t, IntegerType) else (LONG_MIN, LONG_MAX)

    def convert(value: Any) -> int:
        if type(value) is not int:  # bool is an int subclass: rejected here
            raise _mismatch(t, value)
        if not low <= value <= high:
            raise _Reject(f"{describe(value)} is out of range for {t}")
        return value

    return convert


def _floating(t: PrimitiveType, _options: MappingOptions) -> Converter:
    limit = _FLOAT32_MAX if isinstance(t, FloatType) else math.inf

    def convert(value: Any) -> float:
        if type(value) is float:
            result = value
        elif type(value) is int or isinstance(value, Decimal):
            result = _to_float(t, value)
        else:
            raise _mismatch(t, value)
        if math.isfinite(result) and abs(result) > limit:
            raise _Reject(f"{describe(value)} is out of range for {t}")
        return result

    return convert


def _to_float(t: IcebergType, value: int | Decimal) -> float:
    """The nearest float; ints and decimals too large for a double are refused, not made infinite."""
    if isinstance(value, Decimal) and not value.is_finite():
        return math.nan if value.is_nan() else float(value)
    try:
        result = float(value)
    except OverflowError:
        result = math.inf
    if math.isinf(result):
        raise _Reject(f"{describe(value)} is out of range for {t}")
    return result


def _decimal(t: DecimalType, _options: MappingOptions) -> Converter:
    quantum = Decimal((0, (1,), -t.scale))
    max_adjusted = t.precision - t.scale  # the most significant digit must sit below 10**this

    def convert(value: Any) -> Decimal:
        if isinstance(value, Decimal):
            exact = value
        elif type(value) is int or (type(value) is str and _DECIMAL_TEXT.fullmatch(value)):
            exact = Decimal(value)
        elif type(value) is float:
            exact = Decimal(repr(value))  # the shortest text that reads back as this float
        else:
            raise _mismatch(t, value)
        if not exact.is_finite():
            raise _Reject(f"{describe(value)} is not a finite {t}")
        if exact and exact.adjusted() >= max_adjusted:
            raise _Reject(f"{describe(value)} does not fit {t}")
        result = exact.quantize(quantum, context=_DECIMAL_CONTEXT)
        if result != exact:
            raise _Reject(f"{describe(value)} has more than {t.scale} fractional digits for {t}")
        return result

    return convert


def _string(t: StringType, _options: MappingOptions) -> Converter:
    def convert(value: Any) -> str:
        if type(value) is not str:
            raise _mismatch(t, value)
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _Reject(f"{describe(value)} is not valid Unicode (unpaired surrogate)") from None
        return value

    return convert


def _date(t: DateType, _options: MappingOptions) -> Converter:
    def convert(value: Any) -> int:
        if type(value) is str:
            try:
                days = parse_iso_date(value)
            except ValidationError:
                raise _mismatch(t, value) from None
        elif type(value) is int:
            days = value
        elif type(value) is date:  # a datetime is not a date here
            days = value.toordinal() - _EPOCH_ORDINAL
        else:
            raise _mismatch(t, value)
        if not INT_MIN <= days <= INT_MAX:
            raise _Reject(f"{describe(value)} is out of range for {t}")
        return days

    return convert


def _time(t: TimeType, options: MappingOptions) -> Converter:
    def convert(value: Any) -> int:
        if type(value) is str:
            match = _TIME_TEXT.fullmatch(value)
            if not match:
                raise _mismatch(t, value)
            micros = _time_of_day(t, value, *match.groups())
        elif type(value) is int:
            micros = _epoch_micros(value, options.epoch_unit)
        elif type(value) is time and value.tzinfo is None:
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
        else:
            raise _mismatch(t, value)
        if not 0 <= micros < MICROS_PER_DAY:
            raise _Reject(f"{describe(value)} is out of range for {t}")
        return micros

    return convert


def _time_of_day(t: IcebergType, text: str, hour: str, minute: str, second: str | None, fraction: str | None) -> int:
    h, m, s = int(hour), int(minute), int(second or 0)
    if h > 23 or m > 59 or s > 59:
        raise _mismatch(t, text)
    return ((h * 60 + m) * 60 + s) * 1_000_000 + int((fraction or "")[:6].ljust(6, "0"))


def _epoch_micros(value: int, unit: str) -> int:
    multiplier, divisor = _EPOCH_SCALE[unit]
    return value * multiplier // divisor


def _timestamp(t: PrimitiveType, options: MappingOptions) -> Converter:
    zoned = isinstance(t, TimestamptzType)
    multiplier, divisor = _EPOCH_SCALE[options.epoch_unit]

    def convert(value: Any) -> int:
        if type(value) is str:
            micros = _timestamp_text(t, zoned, value)
        elif type(value) is int:
            micros = value * multiplier // divisor
        elif type(value) is float or isinstance(value, Decimal):
            micros = _fractional_epoch(t, value, options.epoch_unit)
        elif isinstance(value, datetime):
            micros = _datetime_micros(t, zoned, value)
        else:
            raise _mismatch(t, value)
        if not LONG_MIN <= micros <= LONG_MAX:
            raise _Reject(f"{describe(value)} is out of range for {t}")
        return micros

    return convert


def _timestamp_text(t: IcebergType, zoned: bool, text: str) -> int:
    match = _TIMESTAMP_TEXT.fullmatch(text)
    if not match:
        raise _mismatch(t, text)
    day_text, hour, minute, second, fraction, offset = match.groups()
    try:
        days = parse_iso_date(day_text)
    except ValidationError:
        raise _mismatch(t, text) from None
    micros = days * MICROS_PER_DAY + (_time_of_day(t, text, hour, minute, second, fraction) if hour else 0)
    offset_micros = _offset_micros(t, text, offset)
    if zoned and offset_micros is None:
        raise _Reject(f"expected {t}, got {describe(text)} without a zone offset")
    if not zoned and offset_micros:
        raise _Reject(f"expected {t} (no zone), got {describe(text)} with a non-zero offset")
    return micros - (offset_micros or 0)


def _offset_micros(t: IcebergType, text: str, offset: str | None) -> int | None:
    if offset is None:
        return None
    if offset == "Z":
        return 0
    digits = offset[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise _mismatch(t, text)
    micros = (hours * 60 + minutes) * 60_000_000
    return -micros if offset[0] == "-" else micros


def _fractional_epoch(t: IcebergType, value: Any, unit: str) -> int:
    exact = Decimal(repr(value)) if type(value) is float else value
    if not exact.is_finite() or (exact and exact.adjusted() > _MAX_EPOCH_DIGITS):
        raise _Reject(f"{describe(value)} is out of range for {t}")
    exact_context = decimal.Context(prec=len(exact.as_tuple().digits) + 1)  # scaling never rounds
    micros = exact.scaleb(_EPOCH_SHIFT[unit], context=exact_context)
    return int(micros.to_integral_value(rounding=decimal.ROUND_FLOOR, context=exact_context))


def _datetime_micros(t: IcebergType, zoned: bool, value: datetime) -> int:
    offset = value.utcoffset()
    if offset is None:
        if zoned:
            raise _Reject(f"expected {t}, got {describe(value)} without a zone")
        return (value - _EPOCH_NAIVE) // _ONE_MICRO
    if not zoned and offset:
        raise _Reject(f"expected {t} (no zone), got {describe(value)} with a non-zero offset")
    return (value - _EPOCH_UTC) // _ONE_MICRO


def _uuid(t: UUIDType, _options: MappingOptions) -> Converter:
    def convert(value: Any) -> bytes:
        if isinstance(value, uuid.UUID):
            return value.bytes
        if type(value) is str and _UUID_TEXT.fullmatch(value):
            return uuid.UUID(value).bytes
        if isinstance(value, (bytes, bytearray)) and len(value) == 16:
            return bytes(value)
        raise _mismatch(t, value)

    return convert


def _bytes(t: PrimitiveType, _options: MappingOptions) -> Converter:
    length = t.length if isinstance(t, FixedType) else None

    def convert(value: Any) -> bytes:
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
        elif type(value) is str:
            try:
                data = base64.b64decode(value, validate=True)
            except ValueError:  # binascii.Error, or non-ASCII text
                raise _Reject(f"expected {t}, got {describe(value)} that is not base64") from None
        else:
            raise _mismatch(t, value)
        if length is not None and len(data) != length:
            raise _Reject(f"expected {t}, got {len(data)} bytes")
        return data

    return convert


_CONVERTERS: dict[type, Callable[[Any, MappingOptions], Converter]] = {
    BooleanType: _boolean,
    IntegerType: _integer,
    LongType: _integer,
    FloatType: _floating,
    DoubleType: _floating,
    DecimalType: _decimal,
    StringType: _string,
    DateType: _date,
    TimeType: _time,
    TimestampType: _timestamp,
    TimestamptzType: _timestamp,
    UUIDType: _uuid,
    FixedType: _bytes,
    BinaryType: _bytes,
}


def value_converter(t: PrimitiveType, options: MappingOptions = MappingOptions()) -> Converter:
    """The per-value converter of ``t`` (exposed for tests and for single values)."""
    return _CONVERTERS[type(t)](t, options)


# ---------------------------------------------------------------------------
# The Arrow fast path for whole primitive columns
# ---------------------------------------------------------------------------

_FastPath = Callable[[pa.Array, PrimitiveType, pa.DataType, MappingOptions], pa.Array | None]


def _fast_identity(check: Callable[[pa.DataType], bool]) -> _FastPath:
    return lambda a, _t, target, _o: a if check(a.type) else None


def _fast_integer(a: pa.Array, _t: PrimitiveType, target: pa.DataType, _o: MappingOptions) -> pa.Array | None:
    return pc.cast(a, target) if pa.types.is_int64(a.type) else None


def _fast_floating(a: pa.Array, _t: PrimitiveType, target: pa.DataType, _o: MappingOptions) -> pa.Array | None:
    if not (pa.types.is_float64(a.type) or pa.types.is_int64(a.type)):
        return None
    result = pc.cast(a, target)  # checked for ints; float64 -> float32 may overflow to inf
    if pa.types.is_float32(target) and pc.sum(pc.is_inf(result)).as_py() != pc.sum(pc.is_inf(a)).as_py():
        return None
    return result


_PLAIN_DECIMAL = r"^[+-]?(\d+(\.\d*)?|\.\d+)$"
_PLAIN_DECIMAL_CHARS = 38  # so at most 38 digits: Arrow's parser is exact only within 128 bits


def _fast_decimal(a: pa.Array, _t: PrimitiveType, target: pa.DataType, _o: MappingOptions) -> pa.Array | None:
    if pa.types.is_int64(a.type):
        a = pc.cast(a, pa.decimal128(19, 0))
    elif pa.types.is_string(a.type) and not _plain_decimals(a):
        return None  # Arrow misreads (or crashes on) long digit strings and large exponents
    if pa.types.is_decimal(a.type) or pa.types.is_string(a.type):
        return pc.cast(a, target)  # checked: refuses to round or overflow
    return None


def _plain_decimals(a: pa.Array) -> bool:
    """Whether every string is a short decimal without exponent, checked in Arrow."""
    plain = pc.and_(pc.match_substring_regex(a, _PLAIN_DECIMAL), pc.less_equal(pc.utf8_length(a), _PLAIN_DECIMAL_CHARS))
    return pc.all(plain).as_py() is not False


def _fast_date(a: pa.Array, _t: PrimitiveType, target: pa.DataType, _o: MappingOptions) -> pa.Array | None:
    if pa.types.is_string(a.type):
        return pc.cast(a, target)
    if pa.types.is_int64(a.type):
        return pc.cast(pc.cast(a, pa.int32()), target)
    return None


def _fast_timestamp(a: pa.Array, _t: PrimitiveType, target: pa.DataType, o: MappingOptions) -> pa.Array | None:
    if pa.types.is_string(a.type):
        return pc.cast(a, target)  # ISO-8601; refuses a missing or unexpected zone offset
    if not pa.types.is_int64(a.type):
        return None
    multiplier, divisor = _EPOCH_SCALE[o.epoch_unit]
    if multiplier != 1:
        a = pc.multiply_checked(a, multiplier)
    if divisor != 1:
        if (pc.min(a).as_py() or 0) < 0:
            return None  # Arrow divides towards zero; the converter floors
        a = pc.divide(a, divisor)
    return pc.cast(a, target)


def _fast_bytes(a: pa.Array, _t: PrimitiveType, target: pa.DataType, _o: MappingOptions) -> pa.Array | None:
    return pc.cast(a, target) if pa.types.is_binary(a.type) else None  # fixed: refuses a wrong length


_FAST_PATHS: dict[type, tuple[frozenset[type], _FastPath]] = {
    BooleanType: (frozenset({bool}), _fast_identity(pa.types.is_boolean)),
    IntegerType: (frozenset({int}), _fast_integer),
    LongType: (frozenset({int}), _fast_integer),
    FloatType: (frozenset({int, float}), _fast_floating),
    DoubleType: (frozenset({int, float}), _fast_floating),
    DecimalType: (frozenset({int, Decimal, str}), _fast_decimal),
    StringType: (frozenset({str}), _fast_identity(pa.types.is_string)),
    DateType: (frozenset({int, str}), _fast_date),
    TimestampType: (frozenset({int, str}), _fast_timestamp),
    TimestamptzType: (frozenset({int, str}), _fast_timestamp),
    BinaryType: (frozenset({bytes}), _fast_bytes),
    FixedType: (frozenset({bytes}), _fast_bytes),
}
"""Per type: the Python types a column may hold to try Arrow, and how Arrow converts it.

The Python types are checked exactly first, because Arrow's inference is
lenient in places (``[1.5, True]`` infers double, ``["a", b"b"]`` binary)."""


def fast_column(values: Sequence[Any], t: PrimitiveType, options: MappingOptions = MappingOptions()) -> pa.Array | None:
    """The column as Arrow when Arrow alone can convert every value; None otherwise."""
    entry = _FAST_PATHS.get(type(t))
    if entry is None:
        return None
    kinds, fast_path = entry
    present = set(map(type, values))
    present.discard(type(None))
    if not present <= kinds:
        return None
    try:
        inferred = pa.array(values, from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError, ArithmeticError):  # mixed or unencodable values
        return None
    target = type_to_arrow(t)
    if inferred.null_count == len(inferred):
        return pa.nulls(len(inferred), target)
    try:
        return fast_path(inferred, t, target, options)
    except (pa.ArrowException, ArithmeticError):  # some value needs the converter's verdict
        return None


# ---------------------------------------------------------------------------
# Columns: recursive conversion with per-record errors
# ---------------------------------------------------------------------------

Rows: TypeAlias = Sequence[int] | None
"""For each value of a column, the index of the record it belongs to; None: value i is record i."""


class _Context:
    """State of one :func:`map_rows` call: the options, errors so far, partial records."""

    def __init__(self, options: MappingOptions, partial: Sequence[bool] | None) -> None:
        self.options = options
        self.partial = partial
        self.errors: dict[int, FieldError] = {}
        self._converters: dict[PrimitiveType, Converter] = {}

    def fail(self, row: int, path: str, reason: str) -> None:
        """Record the first error of ``row``; later ones add nothing an operator needs."""
        if row not in self.errors:
            self.errors[row] = FieldError(reason, path or None)

    def exempt(self, row: int) -> bool:
        """Whether ``row`` skips required checks (a delete carries only its key)."""
        return self.partial is not None and self.partial[row]

    def converter(self, t: PrimitiveType) -> Converter:
        if t not in self._converters:
            self._converters[t] = value_converter(t, self.options)
        return self._converters[t]


def _row(rows: Rows, i: int) -> int:
    return i if rows is None else rows[i]


def _convert(values: list[Any], rows: Rows, t: IcebergType, path: str, ctx: _Context) -> pa.Array:
    if isinstance(t, StructType):
        return _convert_struct(values, rows, t, path, ctx)
    if isinstance(t, ListType):
        return _convert_list(values, rows, t, path, ctx)
    if isinstance(t, MapType):
        return _convert_map(values, rows, t, path, ctx)
    assert isinstance(t, PrimitiveType)
    return _convert_primitive(values, rows, t, path, ctx)


def _convert_primitive(values: list[Any], rows: Rows, t: PrimitiveType, path: str, ctx: _Context) -> pa.Array:
    fast = fast_column(values, t, ctx.options)
    if fast is not None:
        return fast
    convert = ctx.converter(t)
    out: list[Any] = [None] * len(values)
    for i, value in enumerate(values):
        if value is not None:
            try:
                out[i] = convert(value)
            except _Reject as reject:
                ctx.fail(_row(rows, i), path, reject.reason)
    return pa.array(out, type=type_to_arrow(t))


def _convert_struct(values: list[Any], rows: Rows, t: StructType, path: str, ctx: _Context) -> pa.Array:
    dicts = _only(values, dict, rows, path, ctx, "expected struct (object), got {}")
    target = type_to_arrow(t)
    if not t.fields:
        return pa.array([None if d is None else {} for d in dicts], target)
    children = _convert_fields(dicts, rows, t.fields, path + ".", ctx, {})
    return pa.StructArray.from_arrays(children, fields=list(target), mask=_null_mask(dicts))


def _only(values: list[Any], kind: Any, rows: Rows, path: str, ctx: _Context, message: str) -> list[Any]:
    """``values`` with those not of ``kind`` rejected and replaced by None."""
    result = values
    for i, value in enumerate(values):
        if value is not None and not isinstance(value, kind):
            if result is values:
                result = list(values)
            ctx.fail(_row(rows, i), path, message.format(describe(value)))
            result[i] = None
    return result


def _convert_fields(
    dicts: list[dict | None],
    rows: Rows,
    fields: Sequence[NestedField],
    prefix: str,
    ctx: _Context,
    given: Mapping[str, ColumnValues],
) -> list[pa.Array]:
    """One array per field of a struct whose values are ``dicts`` (None: null struct)."""
    all_present = None not in dicts
    arrays = []
    for field in fields:
        path = prefix + field.name
        name = field.name
        supplied = given.get(name)
        values: list[Any]
        if isinstance(supplied, pa.Array):
            array = pc.cast(supplied, type_to_arrow(field.field_type))
        else:
            if supplied is not None:
                values = list(supplied)
            elif all_present:
                values = [d.get(name) for d in dicts]  # type: ignore[union-attr]  # all_present: every row is a dict
            else:
                values = [None if d is None else d.get(name) for d in dicts]
            array = _convert(values, rows, field.field_type, path, ctx)
        if field.required and array.null_count:
            if isinstance(supplied, pa.Array):
                values = [None if null else True for null in array.is_null().to_pylist()]
            _check_required(dicts, values, rows, field, path, ctx, supplied is not None)
        arrays.append(array)
    return arrays


def _check_required(
    dicts: list[dict | None],
    values: list[Any],
    rows: Rows,
    field: NestedField,
    path: str,
    ctx: _Context,
    supplied: bool,
) -> None:
    for i, (parent, value) in enumerate(zip(dicts, values)):
        if value is None and parent is not None:
            row = _row(rows, i)
            if not ctx.exempt(row):
                absent = not supplied and field.name not in parent
                ctx.fail(row, path, "required field is missing" if absent else "required field is null")


def _convert_list(values: list[Any], rows: Rows, t: ListType, path: str, ctx: _Context) -> pa.Array:
    lists = _only(values, (list, tuple), rows, path, ctx, f"expected {t} (array), got {{}}")
    offsets, flat, flat_rows = _flatten(lists, rows)
    element_path = path + ".element"
    elements = _convert(flat, flat_rows, t.element_type, element_path, ctx)
    if t.element_required and elements.null_count:
        _check_entries(flat, flat_rows, element_path, "required element is null", ctx)
    return pa.ListArray.from_arrays(offsets, elements, type=type_to_arrow(t), mask=_null_mask(lists))


def _flatten(lists: Sequence[Sequence[Any] | None], rows: Rows) -> tuple[pa.Array, list[Any], list[int]]:
    """Offsets, concatenated items and each item's record of a column of lists."""
    offsets = [0]
    flat: list[Any] = []
    flat_rows: list[int] = []
    for i, items in enumerate(lists):
        if items:
            flat.extend(items)
            flat_rows.extend([_row(rows, i)] * len(items))
        offsets.append(len(flat))
    return pa.array(offsets, pa.int32()), flat, flat_rows


def _check_entries(values: list[Any], rows: list[int], path: str, reason: str, ctx: _Context) -> None:
    for value, row in zip(values, rows):
        if value is None and not ctx.exempt(row):
            ctx.fail(row, path, reason)


def _convert_map(values: list[Any], rows: Rows, t: MapType, path: str, ctx: _Context) -> pa.Array:
    pairs: list[list[tuple[Any, Any]] | None] = []
    for i, value in enumerate(values):
        entries = _map_entries(value)
        if entries is None and value is not None:
            ctx.fail(_row(rows, i), path, f"expected {t} (object or [key, value] pairs), got {describe(value)}")
        elif entries and not isinstance(value, dict) and _has_duplicate_keys(entries):
            ctx.fail(_row(rows, i), path, "a map key appears twice")
        pairs.append(entries)
    offsets, flat, flat_rows = _flatten(pairs, rows)
    keys = _convert([k for k, _ in flat], flat_rows, t.key_type, path + ".key", ctx)
    items = _convert([v for _, v in flat], flat_rows, t.value_type, path + ".value", ctx)
    if keys.null_count:
        _check_entries([k for k, _ in flat], flat_rows, path + ".key", "map key is null", ctx)
        offsets, keys, items = _drop_null_keys(offsets, keys, items)  # Arrow maps cannot hold them
    if t.value_required and items.null_count:
        _check_entries([v for _, v in flat], flat_rows, path + ".value", "required map value is null", ctx)
    return pa.MapArray.from_arrays(offsets, keys, items, type=type_to_arrow(t), mask=_null_mask(pairs))


def _map_entries(value: Any) -> list[tuple[Any, Any]] | None:
    """A map value as (key, value) pairs; None when it is null or not a map."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return [(k, v) for k, v in value]
    return None


def _has_duplicate_keys(entries: list[tuple[Any, Any]]) -> bool:
    try:
        return len({k for k, _ in entries}) != len(entries)
    except TypeError:  # unhashable keys are refused by the key conversion anyway
        return False


def _drop_null_keys(offsets: pa.Array, keys: pa.Array, items: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array]:
    """The entries whose key converted; their records already failed, only the shape matters."""
    valid = keys.is_valid()
    kept = pc.cumulative_sum(pc.cast(valid, pa.int32())).to_pylist()
    new_offsets = [0] + [kept[end - 1] if end else 0 for end in offsets.to_pylist()[1:]]
    return pa.array(new_offsets, pa.int32()), keys.filter(valid), items.filter(valid)


def _null_mask(values: list[Any]) -> pa.Array | None:
    if None not in values:
        return None
    return pa.array([v is None for v in values], pa.bool_())


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------

ColumnValues: TypeAlias = pa.Array | list[Any]
"""Values of a top-level column supplied from outside the record value: an Arrow
array is cast (for Kafka's typed metadata), a list is converted like values."""


@dataclass(frozen=True)
class MappedRows:
    """The table rows of some decoded records, and which records failed.

    ``batch`` has one row per input record, conformed to the table's Arrow
    schema; a failed record's row holds nulls and must be dropped (its index
    is in ``errors``). Partial (delete) records may hold nulls in required
    columns other than their key.
    """

    batch: pa.RecordBatch
    errors: dict[int, FieldError]


def map_rows(
    rows: Sequence[dict[str, Any]],
    schema: Schema,
    options: MappingOptions = MappingOptions(),
    *,
    partial: Sequence[bool] | None = None,
    columns: Mapping[str, ColumnValues] | None = None,
) -> MappedRows:
    """Convert decoded records (one dict each) into rows of ``schema``.

    ``partial[i]`` exempts record ``i`` from required-field checks: a delete
    needs only its key. ``columns`` supplies top-level columns from elsewhere
    (Kafka metadata); they take precedence over fields of the same name.
    """
    ctx = _Context(options, partial)
    target = schema_to_arrow(schema)
    given = dict(columns or {})
    unknown = set(given) - {f.name for f in schema.fields}
    if unknown:
        raise ValueError(f"columns {sorted(unknown)} are not top-level columns of the table")
    dicts = _only(list(rows), dict, None, "", ctx, "expected a record (object), got {}")
    arrays = _convert_fields(dicts, None, schema.fields, "", ctx, given)
    if not schema.fields:
        return MappedRows(pa.RecordBatch.from_pylist([{}] * len(dicts), schema=target), ctx.errors)
    return MappedRows(pa.RecordBatch.from_arrays(arrays, schema=target), ctx.errors)


def lookup(obj: Any, path: str) -> Any:
    """The value at dotted ``path`` inside nested dicts; None when any step is absent."""
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj
