"""Per-micro-batch orchestration on the driver: one Kafka batch -> at most one Iceberg commit.

:class:`BatchProcessor` is the ``foreachBatch`` function. The driver plans and
commits; every record-level step runs on executors, and what comes back to
the driver is the written files' metadata and the decode tasks' aggregates
(per partition: offsets, newest timestamp, counts), never rows (keys only
where the driver writes a batch's key index segments):

1. Skip a replay before reading Kafka: the table's history says whether this
   writer (the streaming query id) already committed this batch id.
2. Choose the batch's write plan and run it: one Spark job that decodes
   (policy ``fail`` raises at the first bad record) and writes the batch's
   files (:mod:`ingest.driver.write_plans`, which also says how the plans differ).
3. Only if the batch had bad records (policy ``dead-letter``): a second pass
   produces them to the dead-letter topic, before the commit
   (:mod:`ingest.driver.dead_letter_pass`).
4. One commit, which records writer id, batch id and offsets: exactly once, and
   a lost race retries (:mod:`ingest.driver.batch_committer`).

A failure anywhere raises: Spark does not mark the batch done, so it is
replayed after a restart. Files written by a batch that did not commit are
deleted, except when the commit's outcome is unknown (they may be in the table).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from commit.catalog.base import Catalog
from commit.exactly_once import BatchStatus, branch_history, check_batch, committed_offsets
from ingest.driver.batch_committer import BatchCommitter, IndexRaced
from ingest.driver.batch_write import BatchOutcome, BatchWrite, delete_uncommitted
from ingest.driver.dead_letter_pass import send_dead_letters
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import batch_size, replayed_records, through_planned_ends
from ingest.driver.offset_log import OffsetLog
from ingest.driver.write_plans import BatchSource, PlanChooser
from ingest.job import IngestJob, TableSpec
from ingest.kafka_source.rows import KafkaRows
from ingest.tasks.frame import reads_headers
from ingest.tasks.output import BatchFiles
from table.metadata import TableMetadata

log = logging.getLogger("floe.ingest")

WRITER_ID_TIMEOUT_S = 120.0
MAX_INDEX_REDOS = 3


class WriterIdUnbound(RuntimeError):
    """A batch started but the query id it must be committed under never arrived."""


class BatchProcessor:
    """The ``foreachBatch`` function of one ingest query.

    ``table`` decodes into the table's own schema (see
    :func:`ingest.job.with_decode_schema`). The writer id, the query id, is
    known only once the query has started: :meth:`bind` supplies it and the
    first batch waits for it. ``on_commit`` runs after each commit (the lag
    monitor's poke).
    """

    def __init__(
        self,
        job: IngestJob,
        table: TableSpec,
        catalog: Catalog,
        metrics: IngestMetrics,
        on_commit: Callable[[], None] = lambda: None,
    ) -> None:
        self._job = job
        self._table = table
        self._catalog = catalog
        self._metrics = metrics
        self._writer_id: str | None = None
        self._bound = threading.Event()
        self.offset_log = OffsetLog(job, table.identifier)
        self._plans = PlanChooser(table)
        self._committer = BatchCommitter(table, catalog, metrics, on_commit)

    def bind(self, writer_id: str) -> None:
        self._writer_id = writer_id
        self._bound.set()

    @property
    def writer_id(self) -> str:
        if not self._bound.wait(WRITER_ID_TIMEOUT_S):
            raise WriterIdUnbound(f"the streaming query id (writer id) was not bound within {WRITER_ID_TIMEOUT_S}s")
        assert self._writer_id is not None
        return self._writer_id

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            outcome = self.process(df, batch_id)
        except BaseException:
            self._metrics.batch_failed(self._table.identifier)
            log.exception("batch %d failed", batch_id, extra={"table": self._table.identifier, "batch_id": batch_id})
            raise
        files = outcome.data_files + outcome.delete_files
        log.info(
            "batch %d %s",
            batch_id,
            outcome.result,
            extra={"table": self._table.identifier, "files": files, **vars(outcome)},
        )

    def process(self, df: Any, batch_id: int) -> BatchOutcome:
        """Write and commit the batch; written again on a newer snapshot when the key index raced (bounded)."""
        started = time.monotonic()
        for redo in range(MAX_INDEX_REDOS + 1):
            try:
                return self._process_once(df, batch_id, started)
            except IndexRaced as raced:
                if redo == MAX_INDEX_REDOS:
                    raise raced.error from raced
                log.warning(
                    "batch %d: %s; writing it again on the new snapshot",
                    batch_id,
                    raced.error,
                    extra={"table": self._table.identifier, "batch_id": batch_id},
                )
        raise AssertionError("unreachable")

    def _process_once(self, df: Any, batch_id: int, started: float) -> BatchOutcome:
        """Check for a replay, choose the plan, run it, commit, account."""
        loaded = self._catalog.load_table(self._table.identifier)
        metadata = loaded.metadata
        replayed = self._replayed(metadata, batch_id, started)
        if replayed is not None:
            return replayed
        planned = self.offset_log.planned_ends(batch_id)  # before the write: a failure leaves no file behind
        size = batch_size(self.offset_log.planned_starts(batch_id), planned) if self._table.mode == "upsert" else None
        rows = KafkaRows(df, self._job.source.consume_settings() if self._job.source.reader == "python" else None)
        written = self._plans.choose(loaded, size).write(BatchSource(rows, reads_headers(self._table.decode)))
        self._plans.learn(written)
        committed = committed_offsets(metadata, partitions=planned) if planned else {}
        written = written.with_stats(through_planned_ends(written.stats, planned, committed))
        if written.stats.empty:
            return self._empty(batch_id, written, started)
        if written.stats.bad_records:
            try:
                send_dead_letters(self._job, self._table, rows, written.stats)
            except BaseException as error:
                written.discard(error)
                raise
        return self._committer.commit(self.writer_id, batch_id, written, started)

    def _replayed(self, metadata: TableMetadata, batch_id: int, started: float) -> BatchOutcome | None:
        """The outcome of a batch this writer already committed (a replay), or None."""
        check = check_batch(branch_history(metadata), self.writer_id, batch_id, None)
        if check.status != BatchStatus.ALREADY_COMMITTED:
            return None
        assert check.committed is not None
        records = replayed_records(check.committed.offsets)
        self._metrics.batch_skipped(self._table.identifier, records, time.monotonic() - started)
        snapshot_id = check.committed.snapshot.snapshot_id
        return BatchOutcome(
            batch_id, "skipped", records=records, snapshot_id=snapshot_id, duration_s=time.monotonic() - started
        )

    def _empty(self, batch_id: int, written: BatchWrite, started: float) -> BatchOutcome:
        """A batch with no record to land: its index files go, and where it covers offsets (transaction
        markers, aborted records) it commits where the table now stands."""
        delete_uncommitted(written.io, [] if written.index is None else written.index.paths)
        if written.stats.covers_offsets:
            nothing = BatchWrite(BatchFiles([], [], 0), written.stats, written.path, written.io)
            return self._committer.commit(self.writer_id, batch_id, nothing, started)
        self._metrics.batch_empty(self._table.identifier)
        return BatchOutcome(batch_id, "empty", duration_s=time.monotonic() - started)
