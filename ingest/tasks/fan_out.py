"""The fan-out append: one task reads its ranges once and writes every append table they feed.

In a shared query (:mod:`ingest.driver.shared_batch`) the append tables that
take the direct path (:mod:`ingest.tasks.direct`) are written by one Spark
job, not one job each. A task consumes all of its offset ranges at once
(:func:`~ingest.kafka_source.consume.consume_many`), each from the lowest
floor of the tables reading that topic
(:class:`~ingest.kafka_source.table_ranges.TableRanges`), and hands each table
its records from its own floor: the table's decoder and write task turn them
into that table's files. The output is the usual write output
(:mod:`ingest.tasks.output`) per table, each row tagged with the table's
index in :attr:`FanOutAppend.tables`.

A table costs a task nothing when none of the task's records are for it: its
writer opens on its first record.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ingest.kafka_source.consume import ConsumeSettings, consume_many
from ingest.kafka_source.offsets import OffsetRange
from ingest.kafka_source.table_ranges import TableRanges
from ingest.tasks.direct import DirectTask
from ingest.tasks.frame import TaskStats, decoded_batches
from ingest.tasks.output import OUTPUT_DDL, stats_batch, written_batch
from ingest.tasks.writer import TaskWriter, task_writer
from table.parquet.writer import abort_after

TABLE_COLUMN = "fan_out_table"
FAN_OUT_DDL = f"{OUTPUT_DDL}, {TABLE_COLUMN} int"
"""The write output (:data:`~ingest.tasks.output.OUTPUT_DDL`) with the index of the table each row is of."""


@dataclass(frozen=True)
class FanOutTable:
    """One append table of the job: how its records are decoded and written, and which it takes."""

    task: DirectTask
    ranges: TableRanges


@dataclass(frozen=True)
class FanOutAppend:
    """The append tables one fan-out job writes, and how its tasks read Kafka."""

    tables: tuple[FanOutTable, ...]
    consume: ConsumeSettings

    def readers(self, topic: str) -> list[int]:
        """The indexes of the tables reading ``topic``."""
        return [i for i, table in enumerate(self.tables) if table.ranges.reads(topic)]


class _TableOutput:
    """One table's writer and stats in this task, opened on its first record."""

    def __init__(self, task: DirectTask) -> None:
        self._task = task
        self._names = [f.name for f in task.decode.table_schema().fields]
        self._writer: TaskWriter | None = None
        self.stats = TaskStats()

    def add(self, records: pa.RecordBatch) -> None:
        task = self._task
        fail_table = task.table if task.fail_on_bad_records else None
        for _topic, rows in decoded_batches(iter([records]), task.decode, self.stats, fail_table):
            if rows.num_rows:
                self._open().write_table_rows(rows.select(self._names))

    def finish(self) -> list[pa.RecordBatch]:
        data = self._writer.finish()[0] if self._writer is not None else []
        return [written_batch(data, [], 0), stats_batch([self.stats.payload()])]

    def abort(self, error: BaseException) -> None:
        if self._writer is not None:
            abort_after(error, self._writer)

    def _open(self) -> TaskWriter:
        if self._writer is None:
            self._writer = task_writer(self._task.write)
        return self._writer


def fan_out_append(ranges: Iterator[pa.RecordBatch], job: FanOutAppend) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body over a shared batch's range rows: each table's files and stats, tagged."""
    outputs: dict[int, _TableOutput] = {}
    readers: dict[str, list[int]] = {}
    try:
        wanted = []
        for batch in ranges:
            for row in batch.to_pylist():
                topic, partition, until = row["topic"], row["partition"], row["until_offset"]
                mine = readers.setdefault(topic, job.readers(topic))
                floors = [job.tables[i].ranges.floor(topic, partition) for i in mine]
                start = max(row["start_offset"], min(floors, default=until))
                if start < until:
                    wanted.append(OffsetRange(topic, partition, start, until))
        for records in consume_many(wanted, job.consume):
            for i in readers[records.column("topic")[0].as_py()]:
                share = job.tables[i].ranges.records_from_floor(records)
                if share.num_rows:
                    outputs.setdefault(i, _TableOutput(job.tables[i].task)).add(share)
        finished = [(i, out.finish()) for i, out in sorted(outputs.items())]
    except BaseException as error:
        for out in outputs.values():
            out.abort(error)
        raise
    for i, batches in finished:
        for out_batch in batches:
            yield _tagged(out_batch, i)


def _tagged(batch: pa.RecordBatch, table: int) -> pa.RecordBatch:
    column = pa.array([table] * batch.num_rows, pa.int32())
    return pa.RecordBatch.from_arrays([*batch.columns, column], names=[*batch.schema.names, TABLE_COLUMN])
