"""One micro-batch of a shared query, landed in every table it feeds: the ``foreachBatch`` function.

A shared query (:class:`ingest.job.SharedIngestJob`) reads the topics of all its
tables in one batch. On the driver, per batch:

1. Only the tables whose topics moved in this batch (Spark's offset log says
   where each partition starts and ends) are looked at at all: a quiet table
   costs no catalog call, no task and no commit. A table under a commit
   interval that is not due sits the batch out (:mod:`ingest.driver.commit_clock`),
   and so does a held one (below).
2. Each of the others is prepared in parallel (:meth:`BatchProcessor.prepare`):
   loaded, checked for a replay, its write plan chosen, its committed offsets
   read. With where it started, those make its floors: the batch lands a
   table's records at or past them only (:mod:`ingest.kafka_source.table_ranges`),
   so a table's own commits, not the checkpoint, say what it holds. Where a
   floor is behind the batch's start (a table that waited, or was added), the
   batch's ranges reach back to it (:mod:`ingest.driver.catch_up`).
3. The append tables that take the direct path are written by one Spark job
   (:mod:`ingest.tasks.fan_out`): each task reads its ranges once and writes
   every table they feed. Every other table (upserts, tables that want their
   rows clustered or sorted) runs its own plan on its share of the batch.
4. Every table commits on its own, exactly once, with its own offsets
   (:class:`~ingest.driver.batch_committer.BatchCommitter`); up to
   ``commit_threads`` tables are written and committed at once.

A table whose part fails is held (:mod:`ingest.driver.table_holds`): the batch
goes on for the others, and it is tried again later, from its floors. A
failure of the fan-out job itself fails the batch: the tables that committed
skip it when Spark replays it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from commit.catalog.base import Catalog
from ingest.arrow_udf import map_in_arrow
from ingest.driver.batch import BatchProcessor, IngestStopped, PreparedBatch
from ingest.driver.batch_committer import IndexRaced
from ingest.driver.batch_write import BatchOutcome, BatchWrite
from ingest.driver.catch_up import catch_up_ranges, ranges_frame
from ingest.driver.commit_clock import CommitClock
from ingest.driver.failure_cause import failure_cause
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import PerPartition, batch_stats
from ingest.driver.offset_log import OffsetLog
from ingest.driver.table_holds import TableHolds
from ingest.driver.write_plans import DirectAppend
from ingest.job import SharedIngestJob, TableSpec
from ingest.kafka_source.table_ranges import TableRanges
from ingest.tasks.fan_out import FAN_OUT_DDL, TABLE_COLUMN, FanOutAppend, FanOutTable, fan_out_append
from ingest.tasks.frame import reads_headers
from ingest.tasks.output import read_stats, read_written
from runtime.logging import summarize_error

log = logging.getLogger("floe.ingest")

Prepared = tuple[BatchProcessor, PreparedBatch]


class SharedBatch:
    """The ``foreachBatch`` function of a shared query; ``tables`` decode into each table's own schema,
    in the order of ``shared.jobs``. ``on_batch`` gets the tables a batch committed. ``last_commits``:
    each table's last commit (seconds since the epoch), where its commit interval starts from.
    ``starts``: where each table starts in this process (its floors until it commits past them).
    ``between_batches`` is the query's slot for work between batches (``StopGate.between_batches``):
    the due timer lands waiting tables through it on a quiet stream."""

    def __init__(
        self,
        shared: SharedIngestJob,
        tables: Sequence[TableSpec],
        catalog: Catalog,
        metrics: IngestMetrics,
        *,
        last_commits: Mapping[str, float] | None = None,
        starts: Sequence[PerPartition] = (),
        between_batches: Callable[[], AbstractContextManager[bool]] | None = None,
        on_batch: Callable[[Sequence[str]], None] = lambda committed: None,
        stopping: threading.Event | None = None,
    ) -> None:
        self._offset_log = OffsetLog(shared.jobs[0], "shared query")
        self._processors = [
            BatchProcessor(
                job,
                table,
                catalog,
                metrics,
                ranges=TableRanges(job.source.topics, job.source.topic_pattern),
                offset_log=self._offset_log,
                start=start,
                stopping=stopping,
            )
            for job, table, start in zip(shared.jobs, tables, starts or [{}] * len(tables))
        ]
        self._consume = shared.source.consume_settings()
        self._max_tasks = shared.source.max_tasks_per_batch
        self._pool = ThreadPoolExecutor(shared.commit_threads, thread_name_prefix="floe-table")
        self._on_batch = on_batch
        back_fill = shared.trigger.available_now  # it ends once caught up: nothing may be left waiting
        self._clock = CommitClock(
            {job.table.identifier: None if back_fill else job.commit_interval_seconds for job in shared.jobs},
            last_commits or {},
            grace=shared.trigger.processing_time_seconds,  # a table lands at most one trigger late, with others
        )
        self._lock = threading.Lock()  # a batch and a due commit never overlap
        self._holds = TableHolds()
        self._readers: dict[str, list[BatchProcessor]] = {}  # topic -> the tables reading it
        self._metrics = metrics
        self._failure: BaseException | None = None
        self._spark: Any = None
        self._last_batch = -1
        self._timer = _DueTimer(self._next_due, self._land_due, between_batches) if between_batches else None

    def bind(self, writer_id: str) -> None:
        for processor in self._processors:
            processor.bind(writer_id)
        if self._timer is not None:
            self._timer.start()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def failure(self) -> BaseException | None:
        """What failed between batches (a due commit): the query must end with it."""
        return self._failure

    def __call__(self, df: Any, batch_id: int) -> None:
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._spark, self._last_batch = df.sparkSession, batch_id
            started, now = time.monotonic(), time.time()
            due = []
            moved = [p for p in self._tables_of(batch_id) if not self._holds.waits(p.table.identifier)]
            sitting_out = self._clock.sitting_out((p.table.identifier for p in moved), now)
            for processor in moved:  # a held table is left out: its records wait in Kafka until its next try
                if processor.table.identifier in sitting_out:
                    self._clock.waited(processor.table.identifier, batch_id)
                else:
                    due.append(processor)
            self._land(df, batch_id, due, started)
        if self._timer is not None:
            self._timer.poke()

    def _land(self, df: Any, batch_id: int, tables: list[BatchProcessor], started: float) -> None:
        """Write and commit ``tables``' shares of the batch (``df`` None: a due commit, from floors only)."""
        prepared = self._prepare(tables, batch_id, started)
        replayed = set(tables) - {p for p, _ in prepared}  # each committed this batch before: nothing waits
        self._clock.landed((p.table.identifier for p in replayed), time.time())
        df = self._reaching_back(df, batch_id, prepared)
        if df is None:
            self._clock.landed((p.table.identifier for p, _ in prepared), time.time())
            return
        fan_out = [(p, b) for p, b in prepared if isinstance(b.plan, DirectAppend)]
        own = [(p, b) for p, b in prepared if not isinstance(b.plan, DirectAppend)]
        futures = [(p, self._pool.submit(self._own_plan, p, b, df)) for p, b in own]
        futures += self._fan_out(fan_out, df)
        self._finish(futures, batch_id)

    def _next_due(self) -> tuple[float, int, list[str]] | None:
        """For the due timer: when (seconds since the epoch) the earliest table is due without a batch, the
        batch id its records were planned in, and the tables due then: those waiting for their interval, and
        the held ones due for another try."""
        due = self._clock.next_due()
        retry_in = self._holds.next_retry_in()
        if retry_in is None or self._last_batch < 0:
            return due
        retry_at = time.time() + retry_in
        if due is None or retry_at < due[0]:
            return retry_at, self._last_batch, list(self._holds.held())
        return due

    def _land_due(self, batch_id: int, tables: Sequence[str]) -> None:
        """The due timer: land the records that wait for ``tables`` now, without a batch (a quiet stream), and
        try held tables again. A failure outside any table is kept, and ends the query (:attr:`failure`).
        The records land up to the end of the latest batch: a batch may have run while the timer waited for
        the query's slot, and a held table sat it out, so its share would otherwise wait for a batch that a
        quiet stream never brings."""
        with self._lock:
            batch_id = max(batch_id, self._last_batch)
            retry = set(self._holds.due())
            sitting_out = self._clock.sitting_out(tables, time.time())
            due = [
                p
                for p in self._processors
                if p.table.identifier in tables
                and (
                    p.table.identifier in retry
                    or (self._clock.waiting(p.table.identifier) and p.table.identifier not in sitting_out)
                )
            ]
            if not due or self._failure is not None or self._spark is None:
                return
            log.info("landing %d tables between batches (their commit interval is up, or a retry)", len(due))
            try:
                self._land(None, batch_id, due, time.monotonic())
            except BaseException as error:  # noqa: BLE001 - kept: the query ends with it (see failure)
                self._failure = error

    def _reaching_back(self, df: Any | None, batch_id: int, prepared: list[Prepared]) -> Any | None:
        """The batch's ranges, reaching back to the lowest floor of ``prepared`` where one is behind the batch's
        start (tables that waited); ``df`` itself where none is. A due commit (``df`` None) reads only from the
        floors to the batch's planned ends; None when nothing is left to read."""
        if not prepared:
            return df
        ends = self._offset_log.planned_ends(batch_id)
        starts = ends if df is None else self._offset_log.planned_starts(batch_id)
        if not ends or not starts:
            return df
        floors = [_floored(p, b) for p, b in prepared]
        ranges = catch_up_ranges(starts, ends, floors)
        if not ranges:
            return df
        return ranges_frame(self._spark if df is None else df.sparkSession, ranges, self._max_tasks)

    def _tables_of(self, batch_id: int) -> list[BatchProcessor]:
        """The tables with records in this batch, and the held ones due for another try."""
        retry = set(self._holds.due())
        moved = self._tables_with_records(batch_id)
        return moved + [p for p in self._processors if p.table.identifier in retry and p not in moved]

    def _tables_with_records(self, batch_id: int) -> list[BatchProcessor]:
        """The tables reading a partition that moved in this batch (all, where the offset log is unreadable)."""
        ends = self._offset_log.planned_ends(batch_id)
        if not ends:
            return list(self._processors)
        moved = set()
        for topic in _moved_topics(self._offset_log.planned_starts(batch_id), ends):
            moved.update(self._readers_of(topic))
        return [p for p in self._processors if p in moved]

    def _readers_of(self, topic: str) -> list[BatchProcessor]:
        """The tables that read ``topic``, worked out once per topic: a batch asks per moved topic, not per
        table and topic."""
        readers = self._readers.get(topic)
        if readers is None:
            readers = [p for p in self._processors if p.ranges is not None and p.ranges.reads(topic)]
            self._readers[topic] = readers
        return readers

    def _prepare(self, tables: list[BatchProcessor], batch_id: int, started: float) -> list[Prepared]:
        """Each table prepared, in parallel; replays are reported and drop out."""
        futures = [(p, self._pool.submit(p.prepare, batch_id, started)) for p in tables]
        return [(p, outcome) for p, outcome in self._results(futures, batch_id) if isinstance(outcome, PreparedBatch)]

    def _own_plan(self, processor: BatchProcessor, prepared: PreparedBatch, df: Any) -> BatchOutcome:
        """A table that is not a direct append: its own plan on its share; written again when its key index raced."""
        try:
            return processor.write_prepared(df, prepared)
        except IndexRaced as raced:
            return processor.process(df, prepared.batch_id, raced)

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
        """Report every table's outcome; the tables that failed are held."""
        results = self._results(futures, batch_id)
        # one landing time for all: tables that land together stay due together (one Spark job per interval)
        self._clock.landed((p.table.identifier for p, _ in results), time.time())
        self._on_batch([p.table.identifier for p, outcome in results if outcome.result == "committed"])

    def _results(
        self, futures: list[tuple[BatchProcessor, Future[Any]]], batch_id: int
    ) -> list[tuple[BatchProcessor, Any]]:
        """Each table's result once every future is done: outcomes reported (a held table that landed is
        released), failures held. Anything but an ``Exception`` (an interrupt) is raised."""
        results: list[tuple[BatchProcessor, Any]] = []
        fatal: BaseException | None = None
        for processor, future in futures:
            try:
                result = future.result()
            except IngestStopped as error:  # a table gave up waiting: the stop asked for, raised below
                fatal = fatal or error
                continue
            except Exception as error:  # noqa: BLE001 - the table is held; the others go on
                self._hold(processor, batch_id, error)
                continue
            except BaseException as error:  # noqa: BLE001 - raised below, once every table's future is done
                fatal = fatal or error
                continue
            if isinstance(result, BatchOutcome):
                processor.report(result)
                self._release(processor.table.identifier)
            results.append((processor, result))
        if fatal is not None:
            raise fatal
        return results

    def _hold(self, processor: BatchProcessor, batch_id: int, error: Exception) -> None:
        table = processor.table.identifier
        cause = failure_cause(error)
        hold = self._holds.hold(table, summarize_error(error), cause)
        self._metrics.batch_failed(table)
        self._metrics.set_held(table, True, cause)
        log.warning(
            "batch %d failed for %s: %s; the table is held, its records wait in Kafka, and it is tried again "
            "in %.0fs (failure %d in a row); the other tables go on",
            batch_id,
            table,
            hold.reason,
            hold.retry_at - time.monotonic(),
            hold.failures,
            extra={"table": table, "batch_id": batch_id},
            exc_info=error if log.isEnabledFor(logging.DEBUG) else None,
        )

    def _release(self, table: str) -> None:
        hold = self._holds.release(table)
        if hold is not None:
            self._metrics.set_held(table, False)
            log.info("%s lands again, after %d failed tries", table, hold.failures, extra={"table": table})


class _DueTimer:
    """One thread for all waiting and held tables: it sleeps until the earliest is due and lands those due
    then, unless a batch came first (which lands them itself). It wakes for nothing else: a table that waits
    for nothing costs it nothing."""

    def __init__(
        self,
        next_due: Callable[[], tuple[float, int, list[str]] | None],
        land: Callable[[int, Sequence[str]], None],
        between_batches: Callable[[], AbstractContextManager[bool]],
    ) -> None:
        self._next_due = next_due
        self._land = land
        self._between_batches = between_batches
        self._wake = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floe-due-timer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._done.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._done.is_set():
            due = self._next_due()
            wait = None if due is None else max(due[0] - time.time(), 0.0)
            if self._wake.wait(wait):
                self._wake.clear()
                continue
            if due is None or self._done.is_set():
                continue
            with self._between_batches() as may_run:
                if may_run:
                    self._land(due[1], due[2])
            self._done.wait(1.0)  # a table that could not land (the query failing) is not retried in a spin


def _direct(prepared: PreparedBatch) -> DirectAppend:
    assert isinstance(prepared.plan, DirectAppend)
    return prepared.plan


def _floored(processor: BatchProcessor, prepared: PreparedBatch) -> TableRanges:
    return processor.floored(prepared)


def _moved_topics(starts: PerPartition, ends: PerPartition) -> set[str]:
    """Topics with a partition whose planned end is past its start (or whose start is unknown). Pure."""
    return {
        topic
        for topic, parts in ends.items()
        for partition, end in parts.items()
        if end > starts.get(topic, {}).get(partition, -1)
    }
