"""Compares rows from different Iceberg readers by the table's schema.

Readers hand back the same values in different Python shapes: a uuid as
``uuid.UUID``, 16 bytes or a string (Spark), a map as a dict or a list of
pairs. ``normalize`` brings each to one shape, guided by the Iceberg type.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Iterable, Optional

from table.schema import Schema
from table.types import IcebergType, ListType, MapType, StructType, TimestampType, TimestamptzType, UUIDType


def normalize_value(t: IcebergType, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(t, UUIDType):
        if isinstance(value, (bytes, bytearray)):
            return str(uuid.UUID(bytes=bytes(value)))
        return str(value)
    if isinstance(t, TimestamptzType):
        return value.astimezone(dt.timezone.utc) if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(t, TimestampType):
        return value.replace(tzinfo=None)
    if isinstance(t, StructType):
        return {f.name: normalize_value(f.field_type, value.get(f.name)) for f in t.fields}
    if isinstance(t, ListType):
        return [normalize_value(t.element_type, v) for v in value]
    if isinstance(t, MapType):
        pairs = value.items() if isinstance(value, dict) else value
        return sorted((normalize_value(t.key_type, k), normalize_value(t.value_type, v)) for k, v in pairs)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def normalize(rows: Iterable[dict[str, Any]], schema: Schema, columns: Optional[list[str]] = None,
              key: str = "id") -> list[dict[str, Any]]:
    """Rows reduced to ``columns`` (default: every top-level column), sorted by ``key``."""
    fields = [f for f in schema.fields if columns is None or f.name in columns]
    result = [{f.name: normalize_value(f.field_type, r.get(f.name)) for f in fields} for r in rows]
    return sorted(result, key=lambda r: r[key])
