"""One micro-batch of a shared query, landed in every table it feeds: the ``foreachBatch`` function.

A shared query (:class:`ingest.job.SharedIngestJob`) reads the topics of all its
tables in one batch. On the driver, per batch:

1. Only the tables whose topics moved in this batch (Spark's offset log says
   where each partition starts and ends) are looked at at all: a quiet table
   costs no catalog call, no task and no commit.
2. Each of them is prepared in parallel (:meth:`BatchProcessor.prepare`):
   loaded, checked for a replay, its write plan chosen, its committed offsets
   read. Those offsets are its floors: the batch lands a table's records at or
   past them only (:mod:`ingest.kafka_source.table_ranges`), so a table's own
   commits, not the checkpoint, say what it holds.
3. The append tables that take the direct path are written by one Spark job
   (:mod:`ingest.tasks.fan_out`): each task reads its ranges once and writes
   every table they feed. Every other table (upserts, tables that want their
   rows clustered or sorted) runs its own plan on its share of the batch.
4. Every table commits on its own, exactly once, with its own offsets
   (:class:`~ingest.driver.batch_committer.BatchCommitter`); up to
   ``commit_threads`` tables are written and committed at once.

A table that fails fails the batch, after the others have finished: those
that committed skip the batch when Spark replays it, and the failed one lands
it then.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from commit.catalog.base import Catalog
from ingest.arrow_udf import map_in_arrow
from ingest.driver.batch import BatchProcessor, PreparedBatch
from ingest.driver.batch_committer import IndexRaced
from ingest.driver.batch_write import BatchOutcome, BatchWrite
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import PerPartition, batch_stats
from ingest.driver.offset_log import OffsetLog
from ingest.driver.write_plans import DirectAppend
from ingest.job import SharedIngestJob, TableSpec
from ingest.kafka_source.table_ranges import TableRanges
from ingest.tasks.fan_out import FAN_OUT_DDL, TABLE_COLUMN, FanOutAppend, FanOutTable, fan_out_append
from ingest.tasks.frame import reads_headers
from ingest.tasks.output import read_stats, read_written

log = logging.getLogger("floe.ingest")

Prepared = tuple[BatchProcessor, PreparedBatch]


class SharedBatch:
    """The ``foreachBatch`` function of a shared query; ``tables`` decode into each table's own schema,
    in the order of ``shared.jobs``. ``on_batch`` gets the tables a batch committed."""

    def __init__(
        self,
        shared: SharedIngestJob,
        tables: Sequence[TableSpec],
        catalog: Catalog,
        metrics: IngestMetrics,
        on_batch: Callable[[Sequence[str]], None] = lambda committed: None,
    ) -> None:
        self._processors = [
            BatchProcessor(
                job, table, catalog, metrics, ranges=TableRanges(job.source.topics, job.source.topic_pattern)
            )
            for job, table in zip(shared.jobs, tables)
        ]
        self._offset_log = OffsetLog(shared.jobs[0], "shared query")
        self._consume = shared.source.consume_settings()
        self._pool = ThreadPoolExecutor(shared.commit_threads, thread_name_prefix="floe-table")
        self._on_batch = on_batch

    def bind(self, writer_id: str) -> None:
        for processor in self._processors:
            processor.bind(writer_id)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __call__(self, df: Any, batch_id: int) -> None:
        started = time.monotonic()
        tables = self._tables_with_records(batch_id)
        prepared = self._prepare(tables, batch_id, started)
        fan_out = [(p, b) for p, b in prepared if isinstance(b.plan, DirectAppend)]
        own = [(p, b) for p, b in prepared if not isinstance(b.plan, DirectAppend)]
        futures = [(p, self._pool.submit(self._own_plan, p, b, df)) for p, b in own]
        futures += self._fan_out(fan_out, df)
        self._finish(futures, batch_id)

    def _tables_with_records(self, batch_id: int) -> list[BatchProcessor]:
        """The tables reading a partition that moved in this batch (all, where the offset log is unreadable)."""
        ends = self._offset_log.planned_ends(batch_id)
        if not ends:
            return list(self._processors)
        moved = _moved_topics(self._offset_log.planned_starts(batch_id), ends)
        return [p for p in self._processors if any(p.ranges is not None and p.ranges.reads(t) for t in moved)]

    def _prepare(self, tables: list[BatchProcessor], batch_id: int, started: float) -> list[Prepared]:
        """Each table prepared, in parallel; replays are reported and drop out."""
        futures = [(p, self._pool.submit(p.prepare, batch_id, started)) for p in tables]
        return [(p, outcome) for p, outcome in _results(futures, batch_id) if isinstance(outcome, PreparedBatch)]

    def _own_plan(self, processor: BatchProcessor, prepared: PreparedBatch, df: Any) -> BatchOutcome:
        """A table that is not a direct append: its own plan on its share; written again when its key index raced."""
        try:
            return processor.write_prepared(df, prepared)
        except IndexRaced as raced:
            log.warning(
                "batch %d: %s; writing it again on the new snapshot",
                prepared.batch_id,
                raced.error,
                extra={"table": processor.table.identifier, "batch_id": prepared.batch_id},
            )
            return processor.process(df, prepared.batch_id)

    def _fan_out(self, tables: list[Prepared], df: Any) -> list[tuple[BatchProcessor, Future[BatchOutcome]]]:
        """The direct append tables written by one Spark job; each one's commit submitted."""
        if not tables:
            return []
        job = FanOutAppend(
            tuple(FanOutTable(_direct(b).task(), _floored(p, b)) for p, b in tables),
            replace(self._consume, with_headers=any(reads_headers(p.table.decode) for p, _ in tables)),
        )
        out = map_in_arrow(df, partial(fan_out_append, job=job), FAN_OUT_DDL).toArrow()
        futures = []
        for i, (processor, prepared) in enumerate(tables):
            mine = out.filter(pc.equal(out.column(TABLE_COLUMN), pa.scalar(i, pa.int32())))
            written = BatchWrite(read_written(mine), batch_stats(read_stats(mine)), "fan-out", _direct(prepared).io)
            rows = processor.rows_of(df, prepared)  # for a dead-letter pass over this table's share
            futures.append((processor, self._pool.submit(processor.finish, prepared, written, rows)))
        return futures

    def _finish(self, futures: list[tuple[BatchProcessor, Future[BatchOutcome]]], batch_id: int) -> None:
        """Report every table's outcome, then raise the first failure (after all have finished)."""
        committed = [p.table.identifier for p, outcome in _results(futures, batch_id) if outcome.result == "committed"]
        self._on_batch(committed)


def _results(futures: list[tuple[BatchProcessor, Future[Any]]], batch_id: int) -> list[tuple[BatchProcessor, Any]]:
    """Each table's result, reported; the first error raised once every future is done."""
    results, first = [], None
    for processor, future in futures:
        try:
            result = future.result()
        except BaseException as error:  # noqa: BLE001 - each table's failure is logged; the first is raised below
            processor.failed(batch_id, error)
            first = first or error
            continue
        if isinstance(result, BatchOutcome):
            processor.report(result)
        results.append((processor, result))
    if first is not None:
        raise first
    return results


def _direct(prepared: PreparedBatch) -> DirectAppend:
    assert isinstance(prepared.plan, DirectAppend)
    return prepared.plan


def _floored(processor: BatchProcessor, prepared: PreparedBatch) -> TableRanges:
    assert processor.ranges is not None
    return processor.ranges.with_floors(prepared.committed)


def _moved_topics(starts: PerPartition, ends: PerPartition) -> set[str]:
    """Topics with a partition whose planned end is past its start (or whose start is unknown). Pure."""
    return {
        topic
        for topic, parts in ends.items()
        for partition, end in parts.items()
        if end > starts.get(topic, {}).get(partition, -1)
    }
