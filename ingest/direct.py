"""The direct path: decode and write in one executor pass (append, no shuffle).

When nothing has to be regrouped (append mode into a table whose rows need
neither clustering by partition nor sorting: ``write.distribution-mode`` is
``none``, Iceberg's default for unpartitioned tables, and no sort order),
one ``mapInArrow`` over the Kafka rows decodes each batch and hands the rows
straight to a write task. Rows cross the JVM/Python boundary once instead of
three times (decode, cache, write), which is most of the cost of a batch.

The task returns its files and, as ``stats`` rows of the same output, the
per-partition aggregate of :mod:`ingest.planning`. Bad records: with policy
``fail`` the task raises :class:`~ingest.dead_letter_writer.BadRecordError`
at the first one; with ``dead-letter`` they are produced afterwards by
:func:`~ingest.dead_letter_writer.decode_and_send`, a second pass that reads
the batch with its Kafka headers, still before the commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ingest.dead_letter_writer import BadRecordError
from ingest.decode_batch import KAFKA_TIMESTAMP_COLUMN, OFFSET_COLUMN, PARTITION_COLUMN, DecodeSpec, decode_batch
from ingest.frame import by_topic
from ingest.writer import WRITTEN_SCHEMA, WriteTask, task_writer, written_batch

STATS = "stats"
StatsKey = tuple[str, int, Any]  # topic, partition, error class (None for rows)


@dataclass(frozen=True)
class DirectTask:
    """Decoding, writing and the bad-record policy of one direct batch."""

    decode: DecodeSpec
    write: WriteTask
    table: str
    fail_on_bad_records: bool


class _Stats:
    """The per (topic, partition, error class) aggregate of one task."""

    def __init__(self) -> None:
        self.groups: dict[StatsKey, list[Any]] = {}  # first, last, records, max_ts

    def add(self, topic: str, partitions: pa.Array, offsets: pa.Array, classes: Any, micros: Any) -> None:
        columns = {"p": partitions, "o": offsets, "c": classes if classes is not None else pa.nulls(len(offsets), pa.string()),
                   "t": micros if micros is not None else pa.nulls(len(offsets), pa.int64())}
        grouped = pa.table(columns).group_by(["p", "c"]).aggregate(
            [("o", "min"), ("o", "max"), ("o", "count"), ("t", "max")]
        )
        for row in grouped.to_pylist():
            key = (topic, row["p"], row["c"])
            found = self.groups.get(key)
            values = [row["o_min"], row["o_max"], row["o_count"], row["t_max"]]
            if found is None:
                self.groups[key] = values
            else:
                self.groups[key] = [min(found[0], values[0]), max(found[1], values[1]), found[2] + values[2],
                                    _max(found[3], values[3])]

    def batch(self) -> pa.RecordBatch:
        rows = [dict(topic=t, partition=p, error_class=c, first_offset=v[0], last_offset=v[1], records=v[2], max_ts=v[3])
                for (t, p, c), v in self.groups.items()]
        payload = json.dumps(rows).encode()
        return pa.RecordBatch.from_arrays(
            [pa.array([STATS]), pa.array([payload], pa.binary()), pa.array([len(rows)], pa.int64()),
             pa.array([0], pa.int64())],
            schema=WRITTEN_SCHEMA,
        )


def _max(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)


def decode_and_write(batches: Iterator[pa.RecordBatch], task: DirectTask) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows -> data files of their final rows, plus the stats."""
    names = [f.name for f in task.decode.table_schema().fields]
    writer = task_writer(task.write)
    stats = _Stats()
    try:
        for batch in batches:
            for topic, part in by_topic(batch):
                decoded = decode_batch(part, task.decode)
                rows, dead = decoded.rows, decoded.dead_letters
                micros = pc.cast(rows.column(KAFKA_TIMESTAMP_COLUMN), pa.int64())
                stats.add(topic, rows.column(PARTITION_COLUMN), rows.column(OFFSET_COLUMN), None, micros)
                if dead.num_rows:
                    if task.fail_on_bad_records:
                        raise _bad_record(task.table, dead)
                    stats.add(topic, dead.column("source_partition"), dead.column("source_offset"),
                              dead.column("error_class"), None)
                if rows.num_rows:
                    writer.write_table_rows(rows.select(names))
        data, _ = writer.finish()
    except BaseException:
        writer.abort()
        raise
    yield written_batch(data, [], 0)
    yield stats.batch()


def _bad_record(table: str, dead: pa.RecordBatch) -> BadRecordError:
    first = dead.slice(0, 1).to_pylist()[0]
    return BadRecordError(table, first["source_topic"], first["source_partition"], first["source_offset"],
                          first["error_class"], first["error_message"], first["error_field"], dead.num_rows)


def read_stats(rows: pa.Table) -> list[dict[str, Any]]:
    """The stats rows of the direct tasks' output, for :func:`ingest.planning.batch_stats`."""
    found: list[dict[str, Any]] = []
    for kind, payload in zip(rows.column("kind").to_pylist(), rows.column("payload").to_pylist()):
        if kind == STATS:
            found.extend(json.loads(payload))
    return found
