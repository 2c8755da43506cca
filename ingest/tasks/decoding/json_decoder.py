"""JSON values: one UTF-8 JSON object per Kafka message.

Records are decoded one at a time, and the mapping layer then builds Arrow
columns from them a field at a time. Measured against ``pyarrow.json`` on
NDJSON (which is faster at parsing alone: about 1 against 5 microseconds per
200-byte record with ``json.loads``, on the development machine), the
per-record parser wins on what matters here: it
gives each record its own error, it tolerates values with raw newlines, and it
keeps one set of conversion rules (``ingest.tasks.mapping``) for JSON and Avro alike
instead of a second, subtly different set in Arrow's JSON reader.

Two parsers, one set of results. The standard library's ``json`` module is
the definition: its values, and its messages for what it refuses. orjson
parses the same objects several times faster (docs/performance.md) and is
used whenever it is known to give exactly what ``json`` gives:

* Only for tables without decimal columns. With them, numbers with a fraction
  or exponent are parsed as ``Decimal`` (so that ``12.30`` reaches a
  ``decimal(10,2)`` column without a detour through binary floating point),
  which orjson cannot do.
* Not when the parsed value holds a float at or beyond -2**63 or 2**64.
  orjson turns an integer beyond the 64-bit range into such a float, where
  ``json`` keeps the integer (and the mapping refuses it for a ``long``
  column). Such values are rare, and ``json`` reads those records again.
* Whatever orjson refuses goes to ``json``, which accepts it or gives its own
  message. Where the two differ, ``json``'s answer stands: it accepts a lone
  surrogate and ``1e400`` (infinity), and refuses ``NaN`` here. So a record's
  dead-letter message does not depend on which parser ran.

Duplicate keys keep the last value in both. ``NaN`` and ``Infinity`` are not
JSON and are rejected. ``tests/ingest/test_json_decoder.py`` compares the two
parsers on edge cases and on random values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from ingest.tasks.record_errors import DecodeError


@dataclass(frozen=True)
class JsonFormat:
    """Kafka values are JSON objects."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_FLOAT_OF_A_HUGE_INTEGER = (-(2.0**63), 2.0**64)
"""orjson reads an integer literal outside [-2**63, 2**64) as a float at or beyond these bounds."""


def _may_hold_a_huge_integer(values: Iterable[Any]) -> bool:
    """Whether orjson may have turned an integer beyond 64 bits into a float somewhere here.

    A walk over the parsed values rather than a regular expression over the
    payload, which cost more than the parse (docs/performance.md).
    """
    low, high = _FLOAT_OF_A_HUGE_INTEGER
    for value in values:
        kind = type(value)
        if kind is float:
            if value <= low or value >= high:
                return True
        elif kind is dict:
            if _may_hold_a_huge_integer(value.values()):
                return True
        elif kind is list and _may_hold_a_huge_integer(value):
            return True
    return False


class JsonDecoder:
    """Decodes one JSON object per message; ``exact_decimals`` parses fractions as Decimal.

    One ``json.JSONDecoder`` is built up front: ``json.loads`` with options
    builds a new one per call, which costs a quarter of the parse.
    """

    def __init__(self, exact_decimals: bool = False) -> None:
        self.exact_decimals = exact_decimals
        self._parse = json.JSONDecoder(
            parse_float=Decimal if exact_decimals else float, parse_constant=_reject_constant
        ).decode
        self._fast: Callable[[bytes], Any] | None = None if exact_decimals else orjson.loads

    def decode(self, payload: bytes) -> dict[str, Any]:
        fast = self._fast
        if fast is not None:
            try:
                value = fast(payload)
            except orjson.JSONDecodeError:
                pass  # json decides, with its own message
            else:
                if type(value) is dict and not _may_hold_a_huge_integer(value.values()):
                    return value
        return self._decode_exactly(payload)  # also every refusal: json words it

    def _decode_exactly(self, payload: bytes) -> dict[str, Any]:
        """The standard library's parse: the definition of every value and message."""
        try:
            value = self._parse(payload.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise DecodeError(f"invalid JSON: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except ValueError as exc:  # json.JSONDecodeError and rejected constants
            raise DecodeError(f"invalid JSON: {exc}") from None
        except RecursionError:
            raise DecodeError("invalid JSON: nested too deeply") from None
        if not isinstance(value, dict):
            raise DecodeError(f"expected a JSON object, got {_json_kind(value)}")
        return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"
