"""The ``orders`` table the benchmarks write: one schema, so their figures compare."""

from __future__ import annotations

from table.schema import Schema
from table.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

ORDERS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "customer", StringType()),
    NestedField(3, "amount", DoubleType()),
    NestedField(4, "event_ts", TimestamptzType()),
    NestedField(5, "status", StringType()),
    NestedField(6, "note", StringType()),
    identifier_field_ids=[1],
)
