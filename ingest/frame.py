"""The decoded frame: one Spark schema for a micro-batch's rows and dead letters.

``decode_frame`` runs on executors inside ``mapInArrow`` over the Kafka
source's rows. It calls :func:`ingest.decode_batch.decode_batch` (per topic,
because decoded rows do not name their topic) and emits both outcomes in one
schema, so the driver can persist a single frame and read Kafka once:

* the table's columns, in *transport* types (below);
* Floe's internal columns (``_floe_op``, ``_floe_partition``, ``_floe_offset``,
  ``_floe_kafka_ts``) plus ``_floe_topic`` and ``_floe_pkey``, the row's
  table partition as bytes, by which the writer's input is repartitioned
  (a bucket or day is a table partition; hashing the source column would
  spread one partition over every task);
* the dead letter, in flat columns that are null for a row: original key and
  value, its headers (pickled: Spark's Arrow bridge is slow on nested types,
  so no column here is a list of structs) and the error's class, message and
  field.

The Kafka ``headers`` column is costly for the same reason, so it reaches the
decoder only when a metadata column reads a header (``FrameSpec.headers``);
otherwise a dead letter's original headers are joined back when it is sent.

Transport types: Spark's Arrow bridge has no fixed-size binary, uuid or
time, so those travel as ``binary``, ``binary`` and ``int64`` microseconds
(:func:`to_transport`); :func:`from_transport` restores the table's types on
the writer side. Every transport field is nullable: a dead letter has no row.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ingest.changes import Op
from ingest.decode_batch import (
    KAFKA_TIMESTAMP_COLUMN,
    OFFSET_COLUMN,
    OP_COLUMN,
    PARTITION_COLUMN,
    DecodeSpec,
    decode_batch,
)
from ingest.mapping import HEADER_PREFIX
from table.arrow_schema import rebased, type_to_arrow
from table.partitioning import PartitionSpec, partition_spec_from_json
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

TOPIC_COLUMN = "_floe_topic"
PKEY_COLUMN = "_floe_pkey"
DL_KEY = "_floe_dl_key"
DL_VALUE = "_floe_dl_value"
DL_HEADERS = "_floe_dl_headers"
ERROR_CLASS = "_floe_error_class"
ERROR_MESSAGE = "_floe_error_message"
ERROR_FIELD = "_floe_error_field"
DEAD_LETTER_COLUMNS = (DL_KEY, DL_VALUE, DL_HEADERS, ERROR_CLASS, ERROR_MESSAGE, ERROR_FIELD)

INTERNAL_TRANSPORT = (
    pa.field(OP_COLUMN, pa.int8()),
    pa.field(PARTITION_COLUMN, pa.int32()),
    pa.field(OFFSET_COLUMN, pa.int64()),
    pa.field(KAFKA_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC")),
    pa.field(TOPIC_COLUMN, pa.string()),
    pa.field(PKEY_COLUMN, pa.binary()),
    pa.field(DL_KEY, pa.binary()),
    pa.field(DL_VALUE, pa.binary()),
    pa.field(DL_HEADERS, pa.binary()),
    pa.field(ERROR_CLASS, pa.string()),
    pa.field(ERROR_MESSAGE, pa.string()),
    pa.field(ERROR_FIELD, pa.string()),
)
_PKEY_SEPARATOR = b"\x1f"
_PKEY_NULL = b"\x00"


# ---------------------------------------------------------------------------
# Transport types
# ---------------------------------------------------------------------------


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


def frame_arrow_schema(schema: Schema) -> pa.Schema:
    """The decoded frame's Arrow schema for a table of ``schema``."""
    return pa.schema(transport_fields(schema) + list(INTERNAL_TRANSPORT))


def frame_spark_schema(schema: Schema) -> Any:
    """The decoded frame's Spark schema (a ``StructType``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(frame_arrow_schema(schema), prefer_timestamp_ntz=True)


Leaf = Callable[[pa.Array, PrimitiveType], pa.Array]


def _convert(array: pa.Array, t: IcebergType, leaf: Leaf) -> pa.Array:
    """Rebuild ``array`` of Iceberg type ``t`` with ``leaf`` applied to every primitive."""
    if isinstance(t, StructType):
        children = [_convert(array.field(i), f.field_type, leaf) for i, f in enumerate(t.fields)]
        fields = [pa.field(f.name, c.type) for f, c in zip(t.fields, children)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=_mask(array))
    if isinstance(t, ListType):
        offsets, (values,) = rebased(array, array.values)
        values = _convert(values, t.element_type, leaf)
        return pa.ListArray.from_arrays(offsets, values, type=pa.list_(pa.field("element", values.type)), mask=_mask(array))
    if isinstance(t, MapType):
        offsets, (keys, items) = rebased(array, array.keys, array.items)
        keys, items = _convert(keys, t.key_type, leaf), _convert(items, t.value_type, leaf)
        return pa.MapArray.from_arrays(offsets, keys, items, type=pa.map_(keys.type, items.type), mask=_mask(array))
    assert isinstance(t, PrimitiveType)
    return leaf(array, t)


def _mask(array: pa.Array) -> Optional[pa.Array]:
    return array.is_null() if array.null_count else None


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


# ---------------------------------------------------------------------------
# Partition keys (routing only)
# ---------------------------------------------------------------------------


def source_array(batch: pa.RecordBatch, schema: Schema, source_id: int) -> pa.Array:
    """The column (perhaps nested in structs) with field id ``source_id``."""
    path = schema.find_column_name(source_id).split(".")
    array = batch.column(path[0])
    for name in path[1:]:
        array = pc.struct_field(array, name)
    return array


def partition_keys(batch: pa.RecordBatch, schema: Schema, spec: PartitionSpec) -> pa.Array:
    """Each row's partition tuple as bytes: equal tuples, equal keys. Only for routing rows."""
    if not spec.fields:
        return pa.nulls(batch.num_rows, pa.binary())
    parts = []
    for field in spec.fields:
        values = field.transform.apply_arrow(source_array(batch, schema, field.source_id))
        if isinstance(values, pa.ExtensionArray):
            values = values.storage
        if not (pa.types.is_binary(values.type) or pa.types.is_fixed_size_binary(values.type)):
            values = pc.cast(values, pa.string())
        parts.append(pc.cast(values, pa.binary()))
    return pc.binary_join_element_wise(*parts, _PKEY_SEPARATOR, null_handling="replace", null_replacement=_PKEY_NULL)


# ---------------------------------------------------------------------------
# The executor function
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameSpec:
    """What an executor needs to build the frame: decoding, and how to key partitions.

    ``partition_spec`` is the table's spec as JSON text (empty: unpartitioned).
    ``keyed_deletes``: deletes get a partition key too (every partition source
    column is a key column); otherwise a delete's key is null. ``headers``:
    the decoder needs the Kafka headers (a metadata column reads one).
    """

    decode: DecodeSpec
    partition_spec: str = ""
    keyed_deletes: bool = False

    @property
    def headers(self) -> bool:
        columns = self.decode.metadata_columns
        sources = columns.values() if isinstance(columns, Mapping) else [source for _, source in columns]
        return any(source.startswith(HEADER_PREFIX) for source in sources)

    def spec(self) -> PartitionSpec:
        if not self.partition_spec:
            return PartitionSpec(0, ())
        return partition_spec_from_json(json.loads(self.partition_spec))


def decode_frame(batches: Iterator[pa.RecordBatch], frame: FrameSpec) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka-source batches -> decoded-frame batches."""
    schema = frame.decode.table_schema()
    spec = frame.spec()
    target = frame_arrow_schema(schema)
    for batch in batches:
        for topic, part in by_topic(batch):
            decoded = decode_batch(part, frame.decode)
            if decoded.rows.num_rows:
                yield _rows_frame(decoded.rows, topic, schema, spec, frame.keyed_deletes, target)
            if decoded.dead_letters.num_rows:
                yield _dead_letter_frame(decoded.dead_letters, target)


def by_topic(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The batch's rows per topic (decoded rows do not say which topic they came from)."""
    if batch.num_rows == 0:
        return
    topics = batch.column("topic")
    unique = pc.unique(topics).to_pylist()
    if len(unique) == 1:
        yield unique[0], batch
        return
    for topic in unique:
        yield topic, batch.filter(pc.equal(topics, topic))


def _rows_frame(
    rows: pa.RecordBatch, topic: str, schema: Schema, spec: PartitionSpec, keyed_deletes: bool, target: pa.Schema
) -> pa.RecordBatch:
    n = rows.num_rows
    columns = [to_transport(rows.column(f.name), f.field_type) for f in schema.fields]
    pkeys = partition_keys(rows, schema, spec)
    if spec.fields and not keyed_deletes:
        is_delete = pc.equal(rows.column(OP_COLUMN), pa.scalar(int(Op.DELETE), pa.int8()))
        pkeys = pc.if_else(is_delete, pa.scalar(None, pa.binary()), pkeys)
    by_name = {
        OP_COLUMN: rows.column(OP_COLUMN),
        PARTITION_COLUMN: rows.column(PARTITION_COLUMN),
        OFFSET_COLUMN: rows.column(OFFSET_COLUMN),
        KAFKA_TIMESTAMP_COLUMN: rows.column(KAFKA_TIMESTAMP_COLUMN),
        TOPIC_COLUMN: pa.array([topic] * n, pa.string()),
        PKEY_COLUMN: pkeys,
    }
    internal = [by_name.get(f.name, pa.nulls(n, f.type)) for f in INTERNAL_TRANSPORT]
    return pa.RecordBatch.from_arrays(columns + internal, schema=target)


def _dead_letter_frame(dead: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    n = dead.num_rows
    headers = [pickle.dumps([(h["key"], h["value"]) for h in row or []]) for row in dead.column("headers").to_pylist()]
    by_name = {
        PARTITION_COLUMN: dead.column("source_partition"),
        OFFSET_COLUMN: dead.column("source_offset"),
        TOPIC_COLUMN: dead.column("source_topic"),
        DL_KEY: dead.column("key"),
        DL_VALUE: dead.column("value"),
        DL_HEADERS: pa.array(headers, pa.binary()),
        ERROR_CLASS: dead.column("error_class"),
        ERROR_MESSAGE: dead.column("error_message"),
        ERROR_FIELD: dead.column("error_field"),
    }
    columns = [by_name.get(f.name, pa.nulls(n, f.type)) for f in target]
    return pa.RecordBatch.from_arrays(columns, schema=target)
