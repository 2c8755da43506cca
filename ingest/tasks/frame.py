"""The decoded frame: what the decode tasks of a micro-batch hand to Spark.

``decode_frame`` runs on executors inside ``mapInArrow`` over the Kafka
source's rows. It calls :func:`ingest.tasks.decode_records.decode_records` (per topic,
because decoded rows do not name their topic) and emits:

* each row: the table's columns in *transport* types (below), Floe's internal
  columns (``_floe_op``, ``_floe_partition``, ``_floe_offset``,
  ``_floe_kafka_ts``), ``_floe_topic`` and ``_floe_pkey``, the row's table
  partition as bytes, by which the writer's input is repartitioned (a bucket
  or a day is one table partition; hashing the source column would spread it
  over every task);
* at the end of the task, one *stats row*: every other column null and
  ``_floe_stats`` holding the task's aggregate (:class:`TaskStats`: per topic,
  partition and error class, the offsets seen, the newest Kafka timestamp,
  the counts; and a row per record the skip list took out, :mod:`ingest.skips`).
  Stats rows travel with the rows through the shuffle (unique
  ``_floe_stats`` values keep them apart in the reduction) and the write tasks
  return them, so one Spark job per batch yields both the files and the
  offsets to commit: nothing is cached, nothing is read twice.

Bad records are not rows of the frame: policy ``fail`` raises
:class:`~ingest.tasks.record_errors.BadRecordError` in the task at the first
one; otherwise they are only counted, and produced by a second pass
(:func:`~ingest.tasks.dead_letter_task.decode_and_send`) that runs only for a batch
that has some. The Kafka ``headers`` column reaches the decoder only when a
metadata column reads a header (``FrameSpec.headers``): Spark's Arrow bridge
is slow on lists of structs, and no frame column is one.

Columns travel in Spark's transport types (:mod:`ingest.tasks.transport`); every
frame field is nullable: a stats row has no row.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from commit.key_index.key_hash import key_buckets
from commit.key_index.segments import keys_of
from ingest.skips import SKIPPED, RecordRef
from ingest.tasks.changes import ChangeKind
from ingest.tasks.decode_records import (
    KAFKA_TIMESTAMP_COLUMN,
    OFFSET_COLUMN,
    OP_COLUMN,
    PARTITION_COLUMN,
    DecodeSpec,
    decode_records,
)
from ingest.tasks.kafka_columns import HEADER_PREFIX
from ingest.tasks.record_errors import BadRecordError
from ingest.tasks.transport import to_transport, transport_fields
from table.partitioning import PartitionSpec, partition_columns, partition_spec_from_json
from table.schema import Schema

TOPIC_COLUMN = "_floe_topic"
PKEY_COLUMN = "_floe_pkey"
STATS_COLUMN = "_floe_stats"
BUCKET_COLUMN = "_floe_bucket"
DELETE_FILE_COLUMN = "_floe_delete_file"
DELETE_POS_COLUMN = "_floe_delete_pos"

INTERNAL_TRANSPORT = (
    pa.field(OP_COLUMN, pa.int8()),
    pa.field(PARTITION_COLUMN, pa.int32()),
    pa.field(OFFSET_COLUMN, pa.int64()),
    pa.field(KAFKA_TIMESTAMP_COLUMN, pa.timestamp("us", tz="UTC")),
    pa.field(TOPIC_COLUMN, pa.string()),
    pa.field(PKEY_COLUMN, pa.binary()),
    pa.field(STATS_COLUMN, pa.binary()),
    pa.field(BUCKET_COLUMN, pa.int32()),
    pa.field(DELETE_FILE_COLUMN, pa.string()),
    pa.field(DELETE_POS_COLUMN, pa.int64()),
)
_PKEY_SEPARATOR = b"\x1f"
_PKEY_NULL = b"\x00"


# ---------------------------------------------------------------------------
# The frame's schema
# ---------------------------------------------------------------------------


def frame_arrow_schema(schema: Schema) -> pa.Schema:
    """The decoded frame's Arrow schema for a table of ``schema``."""
    return pa.schema(transport_fields(schema) + list(INTERNAL_TRANSPORT))


def frame_spark_schema(schema: Schema) -> Any:
    """The decoded frame's Spark schema (a ``StructType``)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(frame_arrow_schema(schema), prefer_timestamp_ntz=True)


# ---------------------------------------------------------------------------
# Partition keys (routing only)
# ---------------------------------------------------------------------------


def partition_routing_keys(batch: pa.RecordBatch, schema: Schema, spec: PartitionSpec) -> pa.Array:
    """Each row's partition tuple (:func:`table.partitioning.partition_columns`) as
    bytes, for Spark to repartition by: equal tuples, equal keys."""
    if not spec.fields:
        return pa.nulls(batch.num_rows, pa.binary())
    parts = []
    for values in partition_columns(batch, schema, spec):
        if not (pa.types.is_binary(values.type) or pa.types.is_fixed_size_binary(values.type)):
            values = pc.cast(values, pa.string())
        parts.append(pc.cast(values, pa.binary()))
    return pc.binary_join_element_wise(*parts, _PKEY_SEPARATOR, null_handling="replace", null_replacement=_PKEY_NULL)


# ---------------------------------------------------------------------------
# Task statistics
# ---------------------------------------------------------------------------

StatsKey = tuple[str, int, Any]  # topic, partition, error class (None for rows)


class TaskStats:
    """One task's aggregate per (topic, partition, error class): the rows of
    :data:`ingest.driver.offset_accounting.STATS_COLUMNS`, folded on the driver by ``batch_stats``."""

    def __init__(self) -> None:
        self.groups: dict[StatsKey, list[Any]] = {}  # first, last, records, max_ts
        self.skipped: list[RecordRef] = []  # the records of the skip list this task took out

    def add_rows(self, topic: str, rows: pa.RecordBatch) -> None:
        micros = pc.cast(rows.column(KAFKA_TIMESTAMP_COLUMN), pa.int64())
        self._add(topic, rows.column(PARTITION_COLUMN), rows.column(OFFSET_COLUMN), None, micros)

    def add_dead_letters(self, topic: str, dead: pa.RecordBatch) -> None:
        self._add(
            topic, dead.column("source_partition"), dead.column("source_offset"), dead.column("error_class"), None
        )

    def add_skipped(self, refs: tuple[RecordRef, ...]) -> None:
        self.skipped.extend(refs)

    def _add(
        self,
        topic: str,
        partitions: pa.Array,
        offsets: pa.Array,
        classes: pa.Array | None,
        micros: pa.Array | None,
    ) -> None:
        if len(offsets) == 0:
            return
        n = len(offsets)
        table = pa.table(
            {
                "p": partitions,
                "o": offsets,
                "c": classes if classes is not None else pa.nulls(n, pa.string()),
                "t": micros if micros is not None else pa.nulls(n, pa.int64()),
            }
        )
        grouped = table.group_by(["p", "c"]).aggregate([("o", "min"), ("o", "max"), ("o", "count"), ("t", "max")])
        for row in grouped.to_pylist():
            key = (topic, row["p"], row["c"])
            values = [row["o_min"], row["o_max"], row["o_count"], row["t_max"]]
            found = self.groups.get(key)
            self.groups[key] = (
                values
                if found is None
                else [
                    min(found[0], values[0]),
                    max(found[1], values[1]),
                    found[2] + values[2],
                    _max(found[3], values[3]),
                ]
            )

    def payload(self) -> bytes:
        """The aggregate as JSON, tagged with a fresh id so that no two stats rows are equal."""
        rows = [
            {
                "topic": t,
                "partition": p,
                "error_class": c,
                "first_offset": v[0],
                "last_offset": v[1],
                "records": v[2],
                "max_ts": v[3],
            }
            for (t, p, c), v in self.groups.items()
        ]
        rows += [
            {
                "topic": t,
                "partition": p,
                "error_class": SKIPPED,
                "first_offset": o,
                "last_offset": o,
                "records": 1,
                "max_ts": None,
            }
            for t, p, o in self.skipped
        ]  # one row each: the commit lists them
        return json.dumps({"id": uuid.uuid4().hex, "rows": rows}).encode()


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def stats_rows(payloads: list[bytes]) -> list[dict[str, Any]]:
    """The aggregate rows in stats payloads."""
    return [row for payload in payloads for row in json.loads(payload)["rows"]]


# ---------------------------------------------------------------------------
# The executor function
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameSpec:
    """What an executor needs to build the frame: decoding, partition keys, the bad-record policy.

    ``partition_spec`` is the table's spec as JSON text (empty: unpartitioned).
    ``keyed_deletes``: deletes get a partition key too (every partition source
    column is a key column); otherwise a delete's key is null.
    ``fail_on_bad_records`` raises at the first bad record (``table`` names it).
    ``index_buckets``: with the position delete strategy, each row's key index
    bucket (of key fields ``key_ids``) goes in ``_floe_bucket``.
    """

    decode: DecodeSpec
    partition_spec: str = ""
    keyed_deletes: bool = False
    fail_on_bad_records: bool = False
    table: str = ""
    index_buckets: int = 0
    key_ids: tuple[int, ...] = ()

    @property
    def headers(self) -> bool:
        """Whether the decoder needs the Kafka headers (a metadata column reads one)."""
        return reads_headers(self.decode)

    def spec(self) -> PartitionSpec:
        if not self.partition_spec:
            return PartitionSpec(0, ())
        return partition_spec_from_json(json.loads(self.partition_spec))


def reads_headers(decode: DecodeSpec) -> bool:
    columns = decode.metadata_columns
    sources = columns.values() if isinstance(columns, Mapping) else [source for _, source in columns]
    return any(source.startswith(HEADER_PREFIX) for source in sources)


def decode_frame(batches: Iterator[pa.RecordBatch], frame: FrameSpec) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka-source batches -> frame rows, then the task's stats row."""
    schema = frame.decode.table_schema()
    spec = frame.spec()
    target = frame_arrow_schema(schema)
    stats = TaskStats()
    for topic, decoded in decoded_batches(
        batches, frame.decode, stats, frame.table if frame.fail_on_bad_records else None
    ):
        if decoded.num_rows:
            yield _rows_frame(decoded, topic, schema, spec, frame, target)
    yield _stats_frame(stats.payload(), target)


def decoded_batches(
    batches: Iterator[pa.RecordBatch], decode: DecodeSpec, stats: TaskStats, fail_table: str | None
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decoded rows per topic, their stats counted; bad records counted, or raised when ``fail_table``."""
    for batch in batches:
        for topic, part in by_topic(batch):
            decoded = decode_records(part, decode)
            stats.add_rows(topic, decoded.rows)
            if decoded.skipped:
                stats.add_skipped(decoded.skipped)
            dead = decoded.dead_letters
            if dead.num_rows:
                if fail_table is not None:
                    raise BadRecordError.first_of(fail_table, dead)
                stats.add_dead_letters(topic, dead)
            yield topic, decoded.rows


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
    rows: pa.RecordBatch, topic: str, schema: Schema, spec: PartitionSpec, frame: FrameSpec, target: pa.Schema
) -> pa.RecordBatch:
    n = rows.num_rows
    columns = [to_transport(rows.column(f.name), f.field_type) for f in schema.fields]
    pkeys = partition_routing_keys(rows, schema, spec)
    if spec.fields and not frame.keyed_deletes:
        is_delete = pc.equal(rows.column(OP_COLUMN), pa.scalar(int(ChangeKind.DELETE), pa.int8()))
        pkeys = pc.if_else(is_delete, pa.scalar(None, pa.binary()), pkeys)
    by_name = {
        OP_COLUMN: rows.column(OP_COLUMN),
        PARTITION_COLUMN: rows.column(PARTITION_COLUMN),
        OFFSET_COLUMN: rows.column(OFFSET_COLUMN),
        KAFKA_TIMESTAMP_COLUMN: rows.column(KAFKA_TIMESTAMP_COLUMN),
        TOPIC_COLUMN: pa.array([topic] * n, pa.string()),
        PKEY_COLUMN: pkeys,
    }
    if frame.index_buckets:
        keys = keys_of(rows, schema, frame.key_ids)
        by_name[BUCKET_COLUMN] = key_buckets(keys.columns, frame.index_buckets)
    internal = [by_name.get(f.name, pa.nulls(n, f.type)) for f in INTERNAL_TRANSPORT]
    return pa.RecordBatch.from_arrays(columns + internal, schema=target)


def _stats_frame(payload: bytes, target: pa.Schema) -> pa.RecordBatch:
    columns = [pa.array([payload], pa.binary()) if f.name == STATS_COLUMN else pa.nulls(1, f.type) for f in target]
    return pa.RecordBatch.from_arrays(columns, schema=target)
