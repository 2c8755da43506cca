"""The direct path: decode and write in one executor pass (append, no shuffle).

When nothing has to be regrouped (append mode into a table whose rows need
neither clustering by partition nor sorting: ``write.distribution-mode`` is
``none``, Iceberg's default for unpartitioned tables, and no sort order),
one ``mapInArrow`` over the Kafka rows decodes each Arrow batch and hands its
rows straight to a write task, in the table's own Arrow types. Rows cross
the JVM/Python boundary once instead of twice (decode, then write).

The task returns its files and, as a ``stats`` row of the same output, its
aggregate (:class:`ingest.frame.TaskStats`); bad records are handled as on the
main path (:mod:`ingest.frame`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from ingest.decode_batch import DecodeSpec
from ingest.frame import TaskStats, decoded_batches
from ingest.writer import WriteTask, stats_batch, task_writer, written_batch
from table.parquet.writer import abort_after


@dataclass(frozen=True)
class DirectTask:
    """Decoding, writing and the bad-record policy of one direct batch."""

    decode: DecodeSpec
    write: WriteTask
    table: str
    fail_on_bad_records: bool


def decode_and_write(batches: Iterator[pa.RecordBatch], task: DirectTask) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows -> data files of their rows, plus the task's stats."""
    names = [f.name for f in task.decode.table_schema().fields]
    writer = task_writer(task.write)
    stats = TaskStats()
    fail_table = task.table if task.fail_on_bad_records else None
    try:
        for _topic, rows in decoded_batches(batches, task.decode, stats, fail_table):
            if rows.num_rows:
                writer.write_table_rows(rows.select(names))
        data, _ = writer.finish()
    except BaseException as error:
        abort_after(error, writer)
        raise
    yield written_batch(data, [], 0)
    yield stats_batch([stats.payload()])
