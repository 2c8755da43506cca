"""The direct path: decode and write in one executor pass (append, no shuffle).

When nothing has to be regrouped (append mode into a table whose rows need
neither clustering by partition nor sorting: ``write.distribution-mode`` is
``none``, Iceberg's default for unpartitioned tables, and no sort order),
one ``mapInArrow`` over the Kafka rows decodes each Arrow batch and hands its
rows straight to a write task, in the table's own Arrow types. Rows cross
the JVM/Python boundary once instead of twice (decode, then write).

The task returns its files and, as a ``stats`` row of the same output, its
aggregate (:class:`ingest.tasks.frame.TaskStats`); bad records are handled as on the
main path (:mod:`ingest.tasks.frame`).

**The direct upsert** does the same for an upsert batch under the position
strategy with a small key index (:mod:`ingest.tasks.indexed_writer`), when the
table wants its rows neither clustered nor sorted. Each task decodes its
records, keeps each key's last change among them
(:func:`ingest.driver.reduction.latest_positions`), looks those keys up in the index
(once per bucket for the whole task), and writes data files, position
deletes and index entries itself: no exchange, no window sort, and the rows
never enter the JVM on Floe's Kafka source.

It is right when no key's changes are split over two tasks: true when
producers key records by the table's key (a key's records then share a
Kafka partition, and a task reads whole partition ranges). It is checked,
not assumed: the driver looks for a key in the index entries of two tasks
(:func:`ingest.tasks.indexed_writer.keys_in_two_tasks`), and if it finds one the batch's
files are deleted and the batch is written again the shuffled way
(:class:`ingest.driver.batch.BatchProcessor`). A task holds its rows until it writes
them, so the driver takes this path only for batches it knows to be small
(``floe.upsert.direct-write-max-records``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from commit.key_index.segments import keys_of
from ingest.tasks.decode_records import DecodeSpec
from ingest.tasks.frame import FrameSpec, TaskStats, decode_frame, decoded_batches
from ingest.tasks.indexed_writer import IndexPlan, look_up_changes, write_indexed
from ingest.tasks.latest_change import latest_positions
from ingest.tasks.output import split_side_rows, stats_batch, written_batch
from ingest.tasks.transport import table_batch
from ingest.tasks.writer import WriteTask, task_writer
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


@dataclass(frozen=True)
class DirectUpsertTask:
    """Decoding with the map-side key lookup, and the indexed write, of one direct upsert batch."""

    frame: FrameSpec
    write: WriteTask
    plan: IndexPlan


def decode_reduce_and_write(batches: Iterator[pa.RecordBatch], task: DirectUpsertTask) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: Kafka rows -> each key's last change in this task, written with its position
    delete and index entry (the output of :func:`ingest.tasks.indexed_writer.write_indexed`)."""
    return write_indexed(_latest_of_task(decode_frame(batches, task.frame), task.plan), task.write, task.plan)


def _latest_of_task(batches: Iterator[pa.RecordBatch], plan: IndexPlan) -> Iterator[pa.RecordBatch]:
    """The task's frame rows reduced to each key's last change, looked up in the index, then its stats rows
    (held until the end: a key's last change may be in the task's last batch).

    The lookup follows the reduction: every change of a key would get the same live row (the index as of
    the batch's start), and the task's keys are then looked up once per bucket, not once per batch.
    """
    rows, stats = [], []
    for batch in batches:
        side, batch = split_side_rows(batch)
        if side is not None:
            stats.append(side)
        if batch.num_rows:
            rows.append(batch)
    if rows:
        key_schema = plan.key_schema()
        keys = pa.concat_tables([keys_of(table_batch(b, key_schema), key_schema, plan.key_ids) for b in rows])
        changes = pa.Table.from_batches(rows)
        kept = pa.array(latest_positions(changes, keys))
        yield from look_up_changes(changes.take(kept), keys.take(kept), plan).to_batches()
    yield from stats
