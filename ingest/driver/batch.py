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
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from commit.catalog.base import Catalog, LoadedTable
from commit.exactly_once import BatchStatus, branch_history, check_batch, committed_offsets
from ingest.driver.batch_committer import BatchCommitter, IndexRaced
from ingest.driver.batch_write import BatchOutcome, BatchWrite, delete_uncommitted
from ingest.driver.dead_letter_pass import send_dead_letters
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import (
    PerPartition,
    batch_size,
    covering_every_partition,
    replayed_records,
    through_planned_ends,
)
from ingest.driver.offset_log import OffsetLog
from ingest.driver.table_setup import evolve_table
from ingest.driver.write_plans import BatchSource, PlanChooser, WritePlan
from ingest.driver.writer_schemas.subject import SCHEMA_CHANGE, SubjectFollower, VersionFolded, with_versions
from ingest.job import IngestJob, TableSpec, with_decode_schema
from ingest.kafka_source.rows import KafkaRows
from ingest.kafka_source.table_ranges import TableRanges
from ingest.tasks.decoding import ConfluentFormat
from ingest.tasks.frame import reads_headers
from ingest.tasks.output import BatchFiles
from table.metadata import TableMetadata

log = logging.getLogger("floe.ingest")

WRITER_ID_TIMEOUT_S = 120.0
MAX_INDEX_REDOS = 10
"""How often a batch whose deletes raced another commit is written again. A compactor's partial-progress run
commits its file groups one after another (``compaction.partial_progress.max_commits``, 10 by default), and each
commit can race one write of the batch; with :func:`redo_backoff` between writes, the run is over first."""


class IngestStopped(RuntimeError):
    """A batch was refused, or given up in a wait, because the query is stopping; it is replayed on restart."""


def redo_backoff(redo: int) -> float:
    """Seconds to wait before writing a raced batch again: 0.25 s doubling to 8 s, jittered down by up to half,
    so a writer racing a run of compaction commits lets the run finish rather than racing each of them."""
    return min(0.25 * 2**redo, 8.0) * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class PreparedBatch:
    """A batch about to be written for one table: its planned ends and the table's committed offsets
    there (both of the table's topics only), and its write plan."""

    batch_id: int
    started: float
    planned: PerPartition
    committed: PerPartition
    plan: WritePlan
    starts: PerPartition = field(default_factory=dict)  # planned starts, where the table needs them
    floors: PerPartition = field(default_factory=dict)  # where its share starts (:func:`floors_of`)


def floors_of(start: PerPartition, committed: PerPartition) -> PerPartition:
    """Where a table's share of a shared query's batch starts, per partition: its committed offset, or
    where it started in this process if that is later (a table added on restart, one told to skip ahead:
    what a query of its own would start from). Pure."""
    floors = {t: dict(parts) for t, parts in committed.items()}
    for topic, parts in start.items():
        for partition, offset in parts.items():
            into = floors.setdefault(topic, {})
            into[partition] = max(offset, into.get(partition, offset))
    return floors


class WriterIdUnbound(RuntimeError):
    """A batch started but the query id it must be committed under never arrived."""


class BatchProcessor:
    """The ``foreachBatch`` function of one ingest query.

    ``table`` decodes into the table's own schema (see
    :func:`ingest.job.with_decode_schema`). The writer id, the query id, is
    known only once the query has started: :meth:`bind` supplies it and the
    first batch waits for it. ``on_commit`` runs after each commit (the lag
    monitor's poke). ``ranges``: in a shared query, the topics of this table
    (:mod:`ingest.driver.shared_batch`); ``start``: where it started in this process. A table under a commit interval
    records every partition of its topics in every commit
    (:func:`~ingest.driver.offset_accounting.covering_every_partition`).
    """

    def __init__(
        self,
        job: IngestJob,
        table: TableSpec,
        catalog: Catalog,
        metrics: IngestMetrics,
        on_commit: Callable[[], None] = lambda: None,
        ranges: TableRanges | None = None,
        offset_log: OffsetLog | None = None,
        start: PerPartition | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        self._job = job
        self._stopping = stopping or threading.Event()  # set when the query stops: a backoff gives up
        self.ranges = ranges
        self.covers_every_partition = job.commit_interval_seconds is not None
        self._start = start or {}  # in a shared query: where the table started (see floors_of)
        self._table = table
        self._catalog = catalog
        self._metrics = metrics
        self._writer_id: str | None = None
        self._bound = threading.Event()
        self.offset_log = offset_log or OffsetLog(job, table.identifier)
        self._plans = PlanChooser(table)
        self._committer = BatchCommitter(table, catalog, metrics, on_commit)
        self._subject = SubjectFollower.of(table.decode.format, table.key_fields())

    def bind(self, writer_id: str) -> None:
        self._writer_id = writer_id
        self._bound.set()

    @property
    def writer_id(self) -> str:
        if not self._bound.wait(WRITER_ID_TIMEOUT_S):
            raise WriterIdUnbound(f"the streaming query id (writer id) was not bound within {WRITER_ID_TIMEOUT_S}s")
        assert self._writer_id is not None
        return self._writer_id

    @property
    def table(self) -> TableSpec:
        return self._table

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            outcome = self.process(df, batch_id)
        except BaseException as error:
            self.failed(batch_id, error)
            raise
        self.report(outcome)

    def failed(self, batch_id: int, error: BaseException) -> None:
        """Count and log a failed batch (its traceback at DEBUG only: see runtime.logging)."""
        self._metrics.batch_failed(self._table.identifier)
        log.error(
            "batch %d failed", batch_id, exc_info=error, extra={"table": self._table.identifier, "batch_id": batch_id}
        )

    def report(self, outcome: BatchOutcome) -> None:
        """The one line of a batch's outcome."""
        batch_id = outcome.batch_id
        files = outcome.data_files + outcome.delete_files
        log.info(
            "batch %d %s",
            batch_id,
            outcome.result,
            extra={"table": self._table.identifier, "files": files, **vars(outcome)},
        )

    def process(self, df: Any, batch_id: int, raced: IndexRaced | None = None) -> BatchOutcome:
        """Write and commit the batch; written again on a newer snapshot when the key index raced (bounded,
        with a backoff between writes). ``raced``: the batch was written once already, and raced."""
        started = time.monotonic()
        if raced is not None:
            self._back_off(batch_id, raced, 0)
        for redo in range(0 if raced is None else 1, MAX_INDEX_REDOS + 1):
            try:
                return self._process_once(df, batch_id, started)
            except IndexRaced as error:
                if redo == MAX_INDEX_REDOS:
                    raise error.error from error
                self._back_off(batch_id, error, redo)
        raise AssertionError("unreachable")

    def _back_off(self, batch_id: int, raced: IndexRaced, redo: int) -> None:
        """Wait before write ``redo + 2`` of a raced batch; a stop ends the wait and the batch (it is replayed)."""
        pause = redo_backoff(redo)
        log.warning(
            "batch %d: %s; writing it again on the new snapshot in %.1fs (try %d of %d)",
            batch_id,
            raced.error,
            pause,
            redo + 2,
            MAX_INDEX_REDOS + 1,
            extra={"table": self._table.identifier, "batch_id": batch_id},
        )
        if self._stopping.wait(pause):
            raise IngestStopped(f"batch {batch_id} given up while waiting to be written again: the query is stopping")

    def _process_once(self, df: Any, batch_id: int, started: float) -> BatchOutcome:
        """Check for a replay, choose the plan, run it, commit, account."""
        prepared = self.prepare(batch_id, started)
        if isinstance(prepared, BatchOutcome):
            return prepared
        return self.write_prepared(df, prepared)

    def write_prepared(self, df: Any, prepared: PreparedBatch) -> BatchOutcome:
        """Run the prepared batch's plan on its records, and commit."""
        rows = self.rows_of(df, prepared)
        written = prepared.plan.write(BatchSource(rows, reads_headers(self._table.decode)))
        return self.finish(prepared, written, rows)

    def prepare(self, batch_id: int, started: float) -> PreparedBatch | BatchOutcome:
        """Where the table stands and how this batch is written; a replay's outcome instead, if it is one."""
        loaded = self._catalog.load_table(self._table.identifier)
        replayed = self._replayed(loaded.metadata, batch_id, started)
        if replayed is not None:
            return replayed
        if self._subject is not None:
            loaded = self._follow_subject(loaded, self._subject)
        metadata = loaded.metadata
        planned = self.offset_log.planned_ends(batch_id)  # before the write: a failure leaves no file behind
        if self.ranges is not None:
            planned = self.ranges.only_mine(planned)
        wants_starts = self._table.mode == "upsert" or self.covers_every_partition
        starts = self.offset_log.planned_starts(batch_id) if wants_starts else {}
        size = batch_size(starts, planned) if self._table.mode == "upsert" else None
        committed = committed_offsets(metadata, partitions=planned) if planned else {}
        plan = self._plans.choose(loaded, size)
        return PreparedBatch(batch_id, started, planned, committed, plan, starts, floors_of(self._start, committed))

    def _follow_subject(self, loaded: LoadedTable, subject: SubjectFollower) -> LoadedTable:
        """The table after its subject's new versions: evolved once for all of them, and the decoder told which
        schema ids it takes. Each version is one log line; the next snapshot names what changed."""
        versions = subject.new_versions()
        if not versions:
            return loaded
        metadata = loaded.metadata
        fold = subject.fold_into(metadata.schema(), metadata.last_column_id, versions)
        fmt = self._table.decode.format
        assert isinstance(fmt, ConfluentFormat)
        table = replace(self._table, decode=replace(self._table.decode, format=with_versions(fmt, fold)))
        if fold.changed and fold.folded is not None:
            loaded = evolve_table(self._catalog, with_decode_schema(table, fold.folded.schema), quiet=True)
            table = with_decode_schema(table, loaded.metadata.schema())
        known = {*fmt.schema_ids, *(i for i, _ in fmt.refused_ids)}  # folded at start-up: said then
        new = [v for v in fold.versions if v.version.schema_id not in known]
        for version in new:
            self._report_version(version)
        notes = [v.note() for v in new if v.refused or v in fold.changed]
        if notes:
            self._committer.pending_summary[SCHEMA_CHANGE] = "; ".join(notes)
        self._retable(table)
        subject.saw(versions)
        return loaded

    def _report_version(self, version: VersionFolded) -> None:
        ident = self._table.identifier
        extra = {"table": ident, "schema_id": version.version.schema_id}
        if version.refused:
            self._metrics.schema_version(ident, "refused")
            log.warning("table %s: %s; its records go to the dead letters", ident, version.note(), extra=extra)
        elif version.changes and version.changes != "no change":
            self._metrics.schema_version(ident, "evolved")
            log.info("table %s evolved for %s", ident, version.note(), extra=extra)
        else:
            self._metrics.schema_version(ident, "taken")
            log.info("table %s takes %s", ident, version.note(), extra=extra)

    def _retable(self, table: TableSpec) -> None:
        """Write and commit as ``table`` from now on (its schema or its decoder changed)."""
        self._table = table
        self._plans = PlanChooser(table)
        self._committer.table = table

    def rows_of(self, df: Any, prepared: PreparedBatch) -> KafkaRows:
        """The batch's records for this table: in a shared query, its share from its committed offsets on."""
        settings = self._job.source.consume_settings() if self._job.source.reader == "python" else None
        return KafkaRows(df, settings, None if self.ranges is None else self.floored(prepared))

    def floored(self, prepared: PreparedBatch) -> TableRanges:
        """This table's share of a shared query's batch, from its floors on."""
        assert self.ranges is not None
        return self.ranges.with_floors(prepared.floors)

    def finish(self, prepared: PreparedBatch, written: BatchWrite, rows: KafkaRows) -> BatchOutcome:
        """Account the written batch to its planned ends, send its dead letters, and commit it."""
        self._plans.learn(written)
        batch_id, started = prepared.batch_id, prepared.started
        written = written.with_stats(through_planned_ends(written.stats, prepared.planned, prepared.committed))
        if self.covers_every_partition:
            written = written.with_stats(covering_every_partition(written.stats, prepared.planned, prepared.starts))
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
