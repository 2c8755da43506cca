"""Single-value serialization (spec Appendix D).

Binary form: the bytes stored in manifest ``lower_bounds``/``upper_bounds`` and
in partition field summaries. JSON form: default values in schemas and
partition values in JSON documents. Python values follow docs/table-api.md.

Errors are :class:`ValidationError` naming the type and the value; callers that
parse files wrap them with the file path and field (``MalformedFileError``).
The calendar helpers work on plain integers so that every date Iceberg can
store (not only Python's years 1..9999) converts.
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from table.errors import ValidationError
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
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
MICROS_PER_SECOND = 1_000_000
MICROS_PER_HOUR = 3_600 * MICROS_PER_SECOND
MICROS_PER_DAY = 24 * MICROS_PER_HOUR
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


# --------------------------------------------------------------- calendar math


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a day count from 1970-01-01, proleptic Gregorian."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """Day count from 1970-01-01 of a proleptic Gregorian date (inverse of the above)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    return era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468


def _days_in_month(year: int, month: int) -> int:
    return days_from_civil(year + month // 12, month % 12 + 1, 1) - days_from_civil(year, month, 1)


def _iso_year(year: int) -> str:
    # java.time prints years beyond 4 digits with an explicit sign.
    if year > 9999:
        return f"+{year}"
    return f"-{-year:04d}" if year < 0 else f"{year:04d}"


def _fraction(micros: int) -> str:
    # ISO_LOCAL_TIME prints the fraction only when non-zero, without trailing zeros.
    return f".{micros:06d}".rstrip("0") if micros else ""


def iso_date(days: int) -> str:
    """ISO-8601 date, e.g. ``2017-11-16``."""
    year, month, day = civil_from_days(days)
    return f"{_iso_year(year)}-{month:02d}-{day:02d}"


def iso_time(micros: int) -> str:
    """ISO-8601 time of day with seconds, e.g. ``22:31:08.123456``."""
    seconds, frac = divmod(micros, MICROS_PER_SECOND)
    minutes, sec = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{hour:02d}:{minute:02d}:{sec:02d}{_fraction(frac)}"


def iso_timestamp(micros: int) -> str:
    """ISO-8601 local date-time, e.g. ``2017-11-16T22:31:08.123456``."""
    days, time_of_day = divmod(micros, MICROS_PER_DAY)
    return f"{iso_date(days)}T{iso_time(time_of_day)}"


def iso_timestamptz(micros: int) -> str:
    """ISO-8601 UTC date-time with the ``+00:00`` offset the spec requires."""
    return iso_timestamp(micros) + "+00:00"


_DATE = r"([+-]?\d{4,})-(\d{2})-(\d{2})"
_TIME = r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
_OFFSET = r"(Z|[+-]\d{2}:\d{2}(?::\d{2})?)"
_DATE_RE = re.compile(f"^{_DATE}$")
_TIME_RE = re.compile(f"^{_TIME}$")
_TIMESTAMP_RE = re.compile(f"^{_DATE}T{_TIME}$")
_TIMESTAMPTZ_RE = re.compile(f"^{_DATE}T{_TIME}{_OFFSET}$", re.IGNORECASE)


def _parse_date_parts(text: str, year: str, month: str, day: str) -> int:
    y, m, d = int(year), int(month), int(day)
    if not 1 <= m <= 12 or not 1 <= d <= _days_in_month(y, m):
        raise ValidationError(f"invalid date {text!r}")
    return days_from_civil(y, m, d)


def _parse_time_parts(text: str, hour: str, minute: str, sec: str | None, frac: str | None) -> int:
    h, m, s = int(hour), int(minute), int(sec or 0)
    digits = (frac or "").ljust(9, "0")
    if h > 23 or m > 59 or s > 59:
        raise ValidationError(f"invalid time {text!r}")
    if digits[6:] != "000":
        raise ValidationError(f"time {text!r} is finer than microsecond precision")
    return ((h * 60 + m) * 60 + s) * MICROS_PER_SECOND + int(digits[:6])


def parse_iso_date(text: str) -> int:
    """Days from 1970-01-01 of an ISO-8601 date."""
    if not (m := _DATE_RE.match(text)):
        raise ValidationError(f"not an ISO-8601 date: {text!r}")
    return _parse_date_parts(text, *m.groups())


def parse_iso_time(text: str) -> int:
    """Microseconds from midnight of an ISO-8601 time."""
    if not (m := _TIME_RE.match(text)):
        raise ValidationError(f"not an ISO-8601 time: {text!r}")
    return _parse_time_parts(text, *m.groups())


def parse_iso_timestamp(text: str) -> int:
    """Microseconds from the epoch of an ISO-8601 date-time without offset."""
    if not (m := _TIMESTAMP_RE.match(text)):
        raise ValidationError(f"not an ISO-8601 timestamp without zone: {text!r}")
    days = _parse_date_parts(text, *m.groups()[:3])
    return days * MICROS_PER_DAY + _parse_time_parts(text, *m.groups()[3:])


def parse_iso_timestamptz(text: str) -> int:
    """Microseconds from the epoch of an ISO-8601 date-time whose offset is UTC."""
    if not (m := _TIMESTAMPTZ_RE.match(text)):
        raise ValidationError(f"not an ISO-8601 timestamp with zone offset: {text!r}")
    if m.group(8).upper() != "Z" and m.group(8)[1:].strip("0:") != "":
        raise ValidationError(f"timestamptz {text!r}: offset must be +00:00")
    days = _parse_date_parts(text, *m.groups()[:3])
    return days * MICROS_PER_DAY + _parse_time_parts(text, *m.groups()[3:7])


# ------------------------------------------------------------ decimal helpers


def decimal_to_unscaled(value: Decimal, scale: int) -> int:
    """The unscaled integer of ``value`` at ``scale``; refuses to round."""
    if not isinstance(value, Decimal) or not value.is_finite():
        raise ValidationError(f"not a finite Decimal: {value!r}")
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits)) or "0")
    shift = exponent + scale  # type: ignore[operator]  # finite => int exponent
    if shift >= 0:
        unscaled *= 10**shift
    else:
        unscaled, rest = divmod(unscaled, 10**-shift)
        if rest:
            raise ValidationError(f"decimal {value} has more than {scale} fractional digits")
    return -unscaled if sign else unscaled


def unscaled_to_decimal(unscaled: int, scale: int) -> Decimal:
    """The Decimal ``unscaled * 10**-scale``, built exactly (no context rounding)."""
    digits = tuple(int(c) for c in str(abs(unscaled)))
    return Decimal((int(unscaled < 0), digits, -scale))


def min_twos_complement(value: int) -> bytes:
    """Big-endian two's complement in the fewest bytes (Java ``BigInteger.toByteArray``)."""
    magnitude = value if value >= 0 else ~value
    return value.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


def _decimal_unscaled(t: DecimalType, value: Any) -> int:
    unscaled = decimal_to_unscaled(value, t.scale)
    if len(str(abs(unscaled))) > t.precision:
        raise ValidationError(f"decimal {value} does not fit {t}")
    return unscaled


# ----------------------------------------------------------- value checking


def _check_int(t: IcebergType, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{t} value must be an int, got {value!r}")
    if not low <= value <= high:
        raise ValidationError(f"{t} value {value} is out of range [{low}, {high}]")
    return value


def _check_float(t: IcebergType, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{t} value must be a float, got {value!r}")
    return float(value)


def _check_type(t: IcebergType, value: Any, kind: type | tuple[type, ...]) -> Any:
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        names = " or ".join(k.__name__ for k in kinds)
        raise ValidationError(f"{t} value must be {names}, got {value!r}")
    return value


def _check_bytes(t: IcebergType, value: Any) -> bytes:
    data = bytes(_check_type(t, value, (bytes, bytearray, memoryview)))
    if isinstance(t, FixedType) and len(data) != t.length:
        raise ValidationError(f"{t} value must have {t.length} bytes, got {len(data)}")
    return data


def _utf8(t: IcebergType, value: Any) -> bytes:
    try:
        return _check_type(t, value, str).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{t} value {value!r} is not valid Unicode: {exc}") from exc


def _time_micros(t: IcebergType, value: Any) -> int:
    return _check_int(t, value, 0, MICROS_PER_DAY - 1)


def _pack(fmt: str, t: IcebergType, value: Any) -> bytes:
    try:
        return struct.pack(fmt, value)
    except (OverflowError, struct.error) as exc:
        raise ValidationError(f"{t} value {value!r} cannot be stored: {exc}") from exc


# ---------------------------------------------------------------- binary form

_Encoder = Callable[[Any, Any], bytes]
_Decoder = Callable[[Any, bytes], Any]

_TO_BYTES: dict[type, _Encoder] = {
    BooleanType: lambda t, v: b"\x01" if _check_type(t, v, bool) else b"\x00",
    IntegerType: lambda t, v: _pack("<i", t, _check_int(t, v, INT_MIN, INT_MAX)),
    LongType: lambda t, v: _pack("<q", t, _check_int(t, v, LONG_MIN, LONG_MAX)),
    FloatType: lambda t, v: _pack("<f", t, _check_float(t, v)),
    DoubleType: lambda t, v: _pack("<d", t, _check_float(t, v)),
    DateType: lambda t, v: _pack("<i", t, _check_int(t, v, INT_MIN, INT_MAX)),
    TimeType: lambda t, v: _pack("<q", t, _time_micros(t, v)),
    TimestampType: lambda t, v: _pack("<q", t, _check_int(t, v, LONG_MIN, LONG_MAX)),
    TimestamptzType: lambda t, v: _pack("<q", t, _check_int(t, v, LONG_MIN, LONG_MAX)),
    StringType: _utf8,
    UUIDType: lambda t, v: _check_type(t, v, uuid.UUID).bytes,
    FixedType: _check_bytes,
    BinaryType: _check_bytes,
    DecimalType: lambda t, v: min_twos_complement(_decimal_unscaled(t, v)),
}


def _unpack(fmt: str, t: IcebergType, data: bytes) -> Any:
    if len(data) != struct.calcsize(fmt):
        raise ValidationError(f"{t} bound must be {struct.calcsize(fmt)} bytes, got {len(data)}")
    return struct.unpack(fmt, data)[0]


def _widened(narrow: str, wide: str) -> _Decoder:
    # A column promoted int->long or float->double keeps its old 4-byte bounds.
    return lambda t, b: _unpack(narrow if len(b) == 4 else wide, t, b)


def _decode_bool(t: IcebergType, data: bytes) -> bool:
    if len(data) != 1:
        raise ValidationError(f"{t} bound must be 1 byte, got {len(data)}")
    return data != b"\x00"


def _decode_utf8(t: IcebergType, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{t} bound is not valid UTF-8: {exc}") from exc


def _decode_uuid(t: IcebergType, data: bytes) -> uuid.UUID:
    if len(data) != 16:
        raise ValidationError(f"{t} bound must be 16 bytes, got {len(data)}")
    return uuid.UUID(bytes=data)


def _decode_fixed(t: FixedType, data: bytes) -> bytes:
    # Shorter is allowed: writers may truncate binary bounds.
    if len(data) > t.length:
        raise ValidationError(f"{t} bound has {len(data)} bytes, more than {t.length}")
    return data


def _decode_decimal(t: DecimalType, data: bytes) -> Decimal:
    if not data:
        raise ValidationError(f"{t} bound is empty")
    return unscaled_to_decimal(int.from_bytes(data, "big", signed=True), t.scale)


_FROM_BYTES: dict[type, _Decoder] = {
    BooleanType: _decode_bool,
    IntegerType: lambda t, b: _unpack("<i", t, b),
    LongType: _widened("<i", "<q"),
    FloatType: lambda t, b: _unpack("<f", t, b),
    DoubleType: _widened("<f", "<d"),
    DateType: lambda t, b: _unpack("<i", t, b),
    TimeType: lambda t, b: _unpack("<q", t, b),
    TimestampType: lambda t, b: _unpack("<q", t, b),
    TimestamptzType: lambda t, b: _unpack("<q", t, b),
    StringType: _decode_utf8,
    UUIDType: _decode_uuid,
    FixedType: _decode_fixed,
    BinaryType: lambda t, b: b,
    DecimalType: _decode_decimal,
}


def _codec(table: dict[type, Any], t: IcebergType, what: str) -> Any:
    try:
        return table[type(t)]
    except KeyError:
        raise ValidationError(f"{what} is not defined for type {t}") from None


def to_bytes(t: IcebergType, value: Any) -> bytes:
    """Serialize one non-null value of primitive type ``t`` (Appendix D, binary)."""
    if value is None:
        raise ValidationError(f"cannot serialize a null {t} value to bytes")
    return _codec(_TO_BYTES, t, "binary serialization")(t, value)


def from_bytes(t: IcebergType, data: bytes) -> Any:
    """Deserialize one value of primitive type ``t`` written by :func:`to_bytes`."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValidationError(f"{t} bound must be bytes, got {type(data).__name__}")
    return _codec(_FROM_BYTES, t, "binary serialization")(t, bytes(data))


# ------------------------------------------------------------------ JSON form


def shortest_float32(value: float) -> float:
    """The double of the shortest decimal that reads back as the same float32.

    Java writes a ``float`` with ``Float.toString`` (e.g. ``0.1``); returning
    the double of that decimal makes ``json.dumps`` print the same text.
    """
    if not math.isfinite(value):
        return value
    target = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        if abs(candidate) <= _FLOAT32_MAX and struct.pack("<f", candidate) == target:
            return candidate
    return value


def _finite(t: IcebergType, value: Any) -> float:
    number = _check_float(t, value)
    if not math.isfinite(number):
        raise ValidationError(f"{t} value {value!r} has no JSON representation")
    return number


def _float32(t: IcebergType, value: Any) -> float:
    return struct.unpack("<f", _pack("<f", t, _finite(t, value)))[0]


def _decimal_json(t: DecimalType, value: Any) -> str:
    # Digits after the point carry the scale; a negative scale needs an exponent.
    exact = unscaled_to_decimal(_decimal_unscaled(t, value), t.scale)
    return format(exact, "f") if t.scale >= 0 else str(exact)


def _decimal_from_json(t: DecimalType, text: Any) -> Decimal:
    try:
        value = Decimal(_check_type(t, text, str))
    except InvalidOperation:
        raise ValidationError(f"{t} value {text!r} is not a decimal") from None
    if not value.is_finite() or value.as_tuple().exponent != -t.scale:
        raise ValidationError(f"{t} value {text!r} must be written with scale {t.scale}")
    _decimal_unscaled(t, value)
    return value


def _hex_from_json(t: IcebergType, text: Any) -> bytes:
    try:
        return _check_bytes(t, bytes.fromhex(_check_type(t, text, str)))
    except ValueError:
        raise ValidationError(f"{t} value {text!r} is not a hexadecimal string") from None


def _uuid_from_json(t: IcebergType, text: Any) -> uuid.UUID:
    if len(_check_type(t, text, str)) != 36:
        raise ValidationError(f"{t} value {text!r} is not a 36-character UUID string")
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValidationError(f"{t} value {text!r} is not a UUID") from None


def _float_to_json(t: IcebergType, value: Any) -> float:
    return shortest_float32(_float32(t, value))


# Booleans, ints, longs and doubles are JSON as they are, once checked.
_JSON_AS_IS: dict[type, Callable[[Any, Any], Any]] = {
    BooleanType: lambda t, v: _check_type(t, v, bool),
    IntegerType: lambda t, v: _check_int(t, v, INT_MIN, INT_MAX),
    LongType: lambda t, v: _check_int(t, v, LONG_MIN, LONG_MAX),
    DoubleType: _finite,
}

_TO_JSON: dict[type, Callable[[Any, Any], Any]] = {
    **_JSON_AS_IS,
    FloatType: _float_to_json,
    DecimalType: _decimal_json,
    DateType: lambda t, v: iso_date(_check_int(t, v, INT_MIN, INT_MAX)),
    TimeType: lambda t, v: iso_time(_time_micros(t, v)),
    TimestampType: lambda t, v: iso_timestamp(_check_int(t, v, LONG_MIN, LONG_MAX)),
    TimestamptzType: lambda t, v: iso_timestamptz(_check_int(t, v, LONG_MIN, LONG_MAX)),
    StringType: lambda t, v: _utf8(t, v).decode("utf-8"),
    UUIDType: lambda t, v: str(_check_type(t, v, uuid.UUID)),
    FixedType: lambda t, v: _check_bytes(t, v).hex(),
    BinaryType: lambda t, v: _check_bytes(t, v).hex(),
}

_FROM_JSON: dict[type, Callable[[Any, Any], Any]] = {
    **_JSON_AS_IS,
    FloatType: _float32,
    DecimalType: _decimal_from_json,
    DateType: lambda t, j: _check_int(t, parse_iso_date(_check_type(t, j, str)), INT_MIN, INT_MAX),
    TimeType: lambda t, j: parse_iso_time(_check_type(t, j, str)),
    TimestampType: lambda t, j: _check_int(t, parse_iso_timestamp(_check_type(t, j, str)), LONG_MIN, LONG_MAX),
    TimestamptzType: lambda t, j: _check_int(t, parse_iso_timestamptz(_check_type(t, j, str)), LONG_MIN, LONG_MAX),
    StringType: lambda t, j: _check_type(t, j, str),
    UUIDType: _uuid_from_json,
    FixedType: _hex_from_json,
    BinaryType: _hex_from_json,
}


def to_json(t: IcebergType, value: Any) -> Any:
    """JSON-ready Python object for one value of ``t`` (Appendix D, JSON).

    Nested values: a struct is a tuple in field order (null fields are
    omitted from the JSON object), a list a list, a map a dict.
    """
    if value is None:
        return None
    if isinstance(t, StructType):
        items = _check_type(t, value, (tuple, list))
        if len(items) != len(t.fields):
            raise ValidationError(f"{t} value needs {len(t.fields)} fields, got {len(items)}")
        return {str(f.field_id): to_json(f.field_type, v) for f, v in zip(t.fields, items) if v is not None}
    if isinstance(t, ListType):
        return [to_json(t.element_type, v) for v in _check_type(t, value, (list, tuple))]
    if isinstance(t, MapType):
        pairs = _check_type(t, value, dict).items()
        return {
            "keys": [to_json(t.key_type, k) for k, _ in pairs],
            "values": [to_json(t.value_type, v) for _, v in pairs],
        }
    return _codec(_TO_JSON, t, "JSON serialization")(t, value)


def from_json(t: IcebergType, json_value: Any) -> Any:
    """Python value of ``t`` from its JSON single-value form (inverse of :func:`to_json`)."""
    if json_value is None:
        return None
    if isinstance(t, StructType):
        obj = _check_type(t, json_value, dict)
        return tuple(from_json(f.field_type, obj.get(str(f.field_id))) for f in t.fields)
    if isinstance(t, ListType):
        return [from_json(t.element_type, v) for v in _check_type(t, json_value, list)]
    if isinstance(t, MapType):
        return _map_from_json(t, json_value)
    return _codec(_FROM_JSON, t, "JSON serialization")(t, json_value)


def _map_from_json(t: MapType, json_value: Any) -> dict[Any, Any]:
    obj = _check_type(t, json_value, dict)
    keys, values = obj.get("keys"), obj.get("values")
    if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
        raise ValidationError(f"{t} value needs 'keys' and 'values' lists of equal length")
    return {from_json(t.key_type, k): from_json(t.value_type, v) for k, v in zip(keys, values)}
