"""Spark's Arrow transport types: how a table's columns travel through Spark and back.

Rows cross Spark between the decode tasks and the write tasks (the shuffle
of upsert mode, the clustering by partition). Spark's Arrow bridge has no
fixed-size binary, uuid or time, so those travel as ``binary``, ``binary``
and ``int64`` microseconds (:func:`to_transport`); every transport field is
nullable and carries no field id. On the writer side :func:`table_batch`
restores the table's types (:func:`from_transport`) for the columns of a
(possibly projected) schema, ready for :func:`table.arrow_schema.cast_to_schema`.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

from table.arrow_schema import null_mask, rebased, type_to_arrow
from table.schema import Schema
from table.types import (
    FixedType,
    IcebergType,
    ListType,
    MapType,
    PrimitiveType,
    StructType,
    TimestamptzType,
    TimeType,
    UUIDType,
)


def transport_type(t: IcebergType) -> pa.DataType:
    """The Arrow type ``t`` travels as through Spark (no field ids, all nullable)."""
    if isinstance(t, StructType):
        return pa.struct([pa.field(f.name, transport_type(f.field_type)) for f in t.fields])
    if isinstance(t, ListType):
        return pa.list_(pa.field("element", transport_type(t.element_type)))
    if isinstance(t, MapType):
        return pa.map_(transport_type(t.key_type), transport_type(t.value_type))
    if isinstance(t, (UUIDType, FixedType)):
        return pa.binary()
    if isinstance(t, TimeType):
        return pa.int64()
    return type_to_arrow(t)


def transport_fields(schema: Schema) -> list[pa.Field]:
    return [pa.field(f.name, transport_type(f.field_type)) for f in schema.fields]


Leaf = Callable[[pa.Array, PrimitiveType], pa.Array]


def _convert(array: pa.Array, t: IcebergType, leaf: Leaf) -> pa.Array:
    """Rebuild ``array`` of Iceberg type ``t`` with ``leaf`` applied to every primitive."""
    if isinstance(t, StructType):
        children = [_convert(array.field(i), f.field_type, leaf) for i, f in enumerate(t.fields)]
        fields = [pa.field(f.name, c.type) for f, c in zip(t.fields, children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=null_mask(array))
    if isinstance(t, ListType):
        offsets, (values,) = rebased(array, array.values)
        values = _convert(values, t.element_type, leaf)
        return pa.ListArray.from_arrays(
            offsets, values, type=pa.list_(pa.field("element", values.type)), mask=null_mask(array)
        )
    if isinstance(t, MapType):
        offsets, (keys, items) = rebased(array, array.keys, array.items)
        keys, items = _convert(keys, t.key_type, leaf), _convert(items, t.value_type, leaf)
        return pa.MapArray.from_arrays(offsets, keys, items, type=pa.map_(keys.type, items.type), mask=null_mask(array))
    assert isinstance(t, PrimitiveType)
    return leaf(array, t)


def _has_special(t: IcebergType) -> bool:
    if isinstance(t, (UUIDType, FixedType, TimeType)):
        return True
    if isinstance(t, StructType):
        return any(_has_special(f.field_type) for f in t.fields)
    if isinstance(t, ListType):
        return _has_special(t.element_type)
    if isinstance(t, MapType):
        return _has_special(t.key_type) or _has_special(t.value_type)
    return False


def _to_transport_leaf(array: pa.Array, t: PrimitiveType) -> pa.Array:
    if isinstance(array, pa.ExtensionArray):
        array = array.storage
    if isinstance(t, (UUIDType, FixedType)):
        return array.cast(pa.binary())
    if isinstance(t, TimeType):
        return array.cast(pa.int64())
    return array


def _from_transport_leaf(array: pa.Array, t: PrimitiveType) -> pa.Array:
    if isinstance(t, UUIDType):
        return pa.ExtensionArray.from_storage(pa.uuid(), array.cast(pa.binary(16)))
    if isinstance(t, FixedType):
        return array.cast(pa.binary(t.length))
    if isinstance(t, TimeType):
        return array.cast(pa.time64("us"))
    if isinstance(t, TimestamptzType):
        return array.cast(pa.timestamp("us", tz="UTC"))
    return array


def to_transport(array: pa.Array, t: IcebergType) -> pa.Array:
    """A column in the table's Arrow type -> its transport type."""
    if not _has_special(t):
        return array.cast(transport_type(t)) if array.type != transport_type(t) else array
    return _convert(array, t, _to_transport_leaf)


def from_transport(array: pa.Array, t: IcebergType) -> pa.Array:
    """A column as Spark hands it back -> the table's types (field ids are set later)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    return _convert(array, t, _from_transport_leaf)


def table_batch(rows: pa.RecordBatch, schema: Schema) -> pa.RecordBatch:
    """The columns of ``schema`` (pruned structs included) from a transport batch, in table types."""
    arrays, names = [], []
    for field in schema.fields:
        arrays.append(from_transport(_prune(rows.column(field.name), field.field_type), field.field_type))
        names.append(field.name)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def _prune(array: pa.Array, t) -> pa.Array:
    """A struct column cut down to the fields of ``t`` (a projected key schema)."""
    if not isinstance(t, StructType) or not pa.types.is_struct(array.type):
        return array
    names = [array.type.field(i).name for i in range(array.type.num_fields)]
    if names == [f.name for f in t.fields]:
        return array
    children = [_prune(array.field(f.name), f.field_type) for f in t.fields]
    return pa.StructArray.from_arrays(children, names=[f.name for f in t.fields], mask=null_mask(array))
