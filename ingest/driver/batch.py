"""Per-micro-batch orchestration on the driver: one Kafka batch -> at most one Iceberg commit.

:class:`BatchProcessor` is the ``foreachBatch`` function. The driver plans and
commits; every record-level step runs on executors, and what comes back to
the driver is the written files' metadata and the decode tasks' aggregates
(per partition: offsets, newest timestamp, counts), never rows (keys only
where the driver writes a batch's key index segments):

1. Skip a replay before reading Kafka: the table's history says whether this
   writer (the streaming query id) already committed this batch id.
2. One Spark job writes the batch: decode (:func:`ingest.tasks.frame.decode_frame`;
   policy ``fail`` raises at the first bad record), then in upsert mode
   reduce each key to its last change (:mod:`ingest.driver.reduction`), repartition by
   table partition, sort by it and the table's sort order, and write
   (:mod:`ingest.tasks.writer`). The write tasks return the files and pass on the
   decode tasks' aggregates. An append that needs no clustering or sorting
   decodes and writes in one pass instead (:mod:`ingest.tasks.direct`), and so does
   an upsert under the position strategy while no key's changes span two
   tasks (checked on the driver; else the batch is written the shuffled way).
3. Only if the batch had bad records (policy ``dead-letter``): a second pass
   produces them to the dead-letter topic, before the commit.
4. One commit through :func:`commit.batch_commit.commit_batch`, which records
   writer id, batch id and offsets (exactly once; a lost race retries).

A failure anywhere raises: Spark does not mark the batch done, so it is
replayed after a restart. Files written by a batch that did not commit are
deleted, except when the commit's outcome is unknown (they may be in the table).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from commit.batch_commit import BatchCommitResult, commit_batch
from commit.catalog.base import Catalog
from commit.errors import CommitStateUnknown
from commit.exactly_once import BatchStatus, branch_history, check_batch, committed_offsets
from commit.key_index.bucket_change import BucketChange
from commit.key_index.manifest import KeyIndexConflict, KeyIndexStale
from commit.operations.errors import DuplicateDeletionVectors, MissingFiles, MissingReferencedDataFiles
from ingest.arrow_udf import map_in_arrow
from ingest.driver.key_index_steps import (
    IndexStart,
    index_update,
    keys_in_two_tasks,
    plan_index,
    read_index_changes,
    read_referenced,
    write_batch_vectors,
    write_index_segments_here,
)
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import (
    MAX_TIMESTAMPS,
    PINNED_START,
    BatchStats,
    PerPartition,
    batch_size,
    batch_stats,
    encode_timestamps,
    parse_offset_log_entry,
    parse_pinned_offsets,
    replayed_records,
    through_planned_ends,
)
from ingest.driver.reduction import key_column, reduce_to_latest
from ingest.job import IngestJob, TableSpec
from ingest.kafka_source.rows import KafkaRows
from ingest.skips import SKIPPED_RECORDS, format_refs
from ingest.tasks.dead_letter_task import SENT_DDL, DeadLetterTarget, decode_and_send
from ingest.tasks.dead_letters import DeadLetterDeliveryError
from ingest.tasks.direct import DirectTask, DirectUpsertTask, decode_and_write, decode_reduce_and_write
from ingest.tasks.frame import BUCKET_COLUMN, PKEY_COLUMN, FrameSpec, decode_frame, frame_spark_schema, reads_headers
from ingest.tasks.indexed_writer import (
    decode_and_look_up,
    lookup_previous_rows,
    write_index_segments,
    write_indexed,
)
from ingest.tasks.output import OUTPUT_DDL, BatchFiles, file_counts, read_stats, read_written
from ingest.tasks.writer import WriteTask, keys_determine_partition, write_files
from table import properties
from table.io import FileIO, FileIOError
from table.metadata import TableMetadata
from table.sort_order import NullOrder, SortDirection
from table.storage_credentials import VENDED

log = logging.getLogger("floe.ingest")

WRITER_ID_TIMEOUT_S = 120.0


class WriterIdUnbound(RuntimeError):
    """A batch started but the query id it must be committed under never arrived."""


@dataclass(frozen=True)
class BatchOutcome:
    """What one micro-batch did (also the fields of its log line).

    ``records``: Kafka records read (``floe_ingest_records_read_total``);
    ``rows_decoded``: rows the records decoded to, before the upsert reduction;
    ``rows_committed``: data rows plus deleted keys committed, after it
    (``floe_ingest_records_committed_total``).
    """

    batch_id: int
    result: str  # committed, skipped, empty
    records: int = 0
    rows_decoded: int = 0
    rows_committed: int = 0
    bad_records: int = 0
    data_files: int = 0
    delete_files: int = 0
    attempts: int = 0
    snapshot_id: int | None = None
    duration_s: float = 0.0
    write: str = ""  # how the batch was written: direct (append), direct-upsert, exchange
    skipped: str = ""  # the records the skip list took out (ingest.skips): topic/partition@offset,...


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
        self._on_commit = on_commit
        self._writer_id: str | None = None
        self._bound = threading.Event()
        self._last_changes = 0  # keys the last position-strategy batch changed (0: none yet)
        self._offset_log_warned = False
        self._keys_span_tasks = False  # a batch had a key in two tasks: upserts take the exchange from then on
        self._write_path = ""  # how the last batch was written (BatchOutcome.write)

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
        ident = self._table.identifier
        metadata = self._catalog.load_table(ident).metadata
        check = check_batch(branch_history(metadata), self.writer_id, batch_id, None)
        if check.status == BatchStatus.ALREADY_COMMITTED:
            assert check.committed is not None
            records = replayed_records(check.committed.offsets)
            self._metrics.batch_skipped(ident, records, time.monotonic() - started)
            return BatchOutcome(
                batch_id,
                "skipped",
                records=records,
                snapshot_id=check.committed.snapshot.snapshot_id,
                duration_s=time.monotonic() - started,
            )
        planned = self._planned_ends(batch_id)  # before the write: a failure here leaves no file behind
        size = batch_size(self._planned_starts(batch_id), planned) if self._table.mode == "upsert" else None
        with VENDED.scoped_to(metadata.location):  # the batch's tasks carry this table's vended keys only
            written, stats, index = self._write(df, metadata, size)
        committed = committed_offsets(metadata, partitions=planned) if planned else {}
        stats = through_planned_ends(stats, planned, committed)
        if stats.empty:
            _delete_files(metadata, _index_paths(index))
            if stats.covers_offsets:  # transaction markers, aborted records: commit where the table now stands
                return self._finish(batch_id, stats, BatchFiles([], [], 0), metadata, started)
            self._metrics.batch_empty(ident)
            return BatchOutcome(batch_id, "empty", duration_s=time.monotonic() - started)
        if stats.bad_records:
            try:
                with VENDED.scoped_to(metadata.location):
                    self._dead_letters(df, stats)
            except BaseException as error:
                _delete_files(metadata, written.paths + _index_paths(index), error)
                raise
        return self._finish(batch_id, stats, written, metadata, started, index)

    # -- steps -------------------------------------------------------------------

    def _write(
        self, df: Any, metadata: TableMetadata, size: int | None
    ) -> tuple[BatchFiles, BatchStats, BatchIndex | None]:
        """The one Spark job of the batch: its files, its aggregate and (position strategy) its index change.
        ``size``: the offsets the batch holds, where known (:func:`ingest.driver.offset_accounting.batch_size`)."""
        source = self._kafka_rows(df)
        fail = self._table.bad_records == "fail"
        index = None
        self._write_path = "exchange"
        if direct_path(metadata, self._table.mode):
            self._write_path = "direct"
            write = WriteTask.for_table(metadata, (), clustered=False, sorted_by_order=False)
            task = DirectTask(self._table.decode, write, self._table.identifier, fail)
            out = source.map(partial(decode_and_write, task=task), OUTPUT_DDL, self._headers).toArrow()
        elif self._position_deletes(metadata):
            start = plan_index(
                FileIO.for_location(metadata.location), metadata, self._equality_ids(metadata), self._table.identifier
            )
            try:
                out = self._indexed(source, metadata, fail, start, size)
            except BaseException as error:
                _delete_files(metadata, start.paths, error)
                raise
            changes, update_s = read_index_changes(out)
            index = BatchIndex(start, changes, read_referenced(out), update_s)
            written = read_written(out)
            self._last_changes = written.records_committed()
            if start.plan.deletion_vectors:
                written = self._with_vectors(written, out, metadata, index)
            return written, batch_stats(read_stats(out)), index
        else:
            out = self._shuffled(source, metadata, fail)
        return read_written(out), batch_stats(read_stats(out)), index

    def _planned_ends(self, batch_id: int) -> PerPartition:
        """The batch's end offsets in Spark's offset log (written before the batch runs).

        Nothing where the entry cannot be read, warned once: the offsets seen
        then stand, as before Floe read the log, and a transactional topic's
        trailing markers show as lag. That is a checkpoint on a store Floe's
        file IO does not serve (``hdfs://``, S3A configured only in Hadoop's
        settings), or ``process`` called outside a streaming query.
        """
        try:
            return self._checkpoint_file(f"offsets/{batch_id}", parse_offset_log_entry)
        except (FileIOError, ValueError) as error:
            if not self._offset_log_warned:
                self._offset_log_warned = True
                log.warning(
                    "cannot read the batch's end offsets from Spark's offset log: %s; offsets are recorded "
                    "up to the last record seen, so transaction markers show as lag",
                    error,
                    extra={"table": self._table.identifier, "batch_id": batch_id},
                )
            return {}

    def _planned_starts(self, batch_id: int) -> PerPartition:
        """Where the batch starts: the previous batch's end in Spark's offset log, or, for batch 0 of Floe's
        source, the starting offsets it pinned in the checkpoint. Empty where not known (batch 0 of Spark's
        source; an entry Floe's file IO cannot read): the batch's size is then unknown."""
        try:
            if batch_id > 0:
                return self._checkpoint_file(f"offsets/{batch_id - 1}", parse_offset_log_entry)
            if self._job.source.reader == "python":
                return self._checkpoint_file(PINNED_START, parse_pinned_offsets)
        except (FileIOError, ValueError):
            pass  # the size is unknown: the exchange, which spills, writes the batch
        return {}

    def _checkpoint_file(self, name: str, parse: Callable[[str, str], PerPartition]) -> PerPartition:
        """The checkpoint's file ``name``, parsed (``parse(text, path)``); FileIOError or ValueError."""
        path = f"{self._job.checkpoint_location.rstrip('/')}/{name}"
        return parse(FileIO.for_location(path).read_bytes(path).decode(), path)

    def _kafka_rows(self, df: Any) -> KafkaRows:
        """The batch's records: in ``df`` (Spark's Kafka source), or read by the tasks from its ranges."""
        source = self._job.source
        return KafkaRows(df, source.consume_settings() if source.reader == "python" else None)

    @property
    def _headers(self) -> bool:
        """Whether the decode tasks need the ``headers`` column (slow to ship: only for header columns)."""
        return reads_headers(self._table.decode)

    def _with_vectors(self, written: BatchFiles, out: Any, metadata: TableMetadata, index: BatchIndex) -> BatchFiles:
        """v3: the batch's deletion vectors, written on the driver from the tasks' deleted positions."""
        try:
            vectors, replaced = write_batch_vectors(
                FileIO.for_location(metadata.location), index.start, out, f"{metadata.location}/data"
            )
        except BaseException as error:
            _delete_files(metadata, written.paths + index.paths, error)
            raise
        return written._replace(delete_files=written.delete_files + vectors, replaced_deletes=tuple(replaced))

    def _position_deletes(self, metadata: TableMetadata) -> bool:
        """Whether this upsert batch deletes previous rows by position (``floe.upsert.delete-strategy``)."""
        return (
            self._table.mode == "upsert" and properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position"
        )

    def _indexed(
        self, source: KafkaRows, metadata: TableMetadata, fail: bool, start: IndexStart, size: int | None
    ) -> Any:
        """The batch's job under the position strategy (:mod:`ingest.tasks.indexed_writer`): one linear plan, or
        the direct upsert (:mod:`ingest.tasks.direct`) where it fits and no key's changes span two tasks."""
        from pyspark.sql import functions as F

        spec = metadata.spec()
        frame_spec = FrameSpec(
            self._table.decode,
            json.dumps(spec.to_json()) if spec.fields else "",
            True,
            fail,
            self._table.identifier,
            index_buckets=start.manifest.buckets,
            key_ids=start.plan.key_ids,
        )
        if self._direct_upsert_fits(metadata, start, size):
            out = self._direct_upsert(source, metadata, frame_spec, start)
            if out is not None:
                return out
        schema = self._table.decode.table_schema()
        frame_schema = frame_spark_schema(schema)
        if map_side_lookup(start, metadata):
            # a small index: the decode tasks look each change's key up themselves, and one exchange
            # serves the reduction and the writer when the key determines the partition
            rows = source.map(
                partial(decode_and_look_up, frame=frame_spec, plan=start.plan), frame_schema, self._headers
            )
            by = PKEY_COLUMN if spec.fields and keys_determine_partition(spec, start.plan.key_ids) else BUCKET_COLUMN
            rows = reduce_to_latest(rows.repartition(F.col(by)), self._table.key_fields(), [by])
            if spec.fields and by != PKEY_COLUMN:
                rows = rows.repartition(F.col(PKEY_COLUMN))
        else:
            rows = source.map(partial(decode_frame, frame=frame_spec), frame_schema, self._headers)
            rows = reduce_to_latest(rows.repartition(F.col(BUCKET_COLUMN)), self._table.key_fields(), [BUCKET_COLUMN])
            rows = map_in_arrow(rows, partial(lookup_previous_rows, plan=start.plan), frame_schema)
            if spec.fields:
                rows = rows.repartition(F.col(PKEY_COLUMN))
        order, sortable = sort_columns(metadata)
        keys = ([F.col(PKEY_COLUMN)] if spec.fields else []) + order
        if keys:
            rows = rows.sortWithinPartitions(*keys)
        task = WriteTask.for_table(metadata, (), clustered=bool(spec.fields), sorted_by_order=sortable and bool(order))
        written = map_in_arrow(rows, partial(write_indexed, task=task, plan=start.plan), OUTPUT_DDL)
        if 0 < self._last_changes <= DRIVER_INDEX_WRITE_MAX_CHANGES:
            return write_index_segments_here(written.toArrow(), start.plan)
        segments = map_in_arrow(
            written.repartition(F.col("bucket")), partial(write_index_segments, plan=start.plan), OUTPUT_DDL
        )
        return segments.toArrow()

    def _direct_upsert_fits(self, metadata: TableMetadata, start: IndexStart, size: int | None) -> bool:
        """A small index looked up map-side, a table that wants no exchange, a batch known to be small
        (its tasks hold their rows), and no batch yet that had a key in two tasks."""
        return (
            not self._keys_span_tasks
            and map_side_lookup(start, metadata)
            and wants_no_exchange(metadata)
            and size is not None
            and size <= properties.UPSERT_DIRECT_MAX_RECORDS.read(metadata.properties)
        )

    def _direct_upsert(
        self, source: KafkaRows, metadata: TableMetadata, frame: FrameSpec, start: IndexStart
    ) -> Any | None:
        """The batch written by its decode tasks; None (its files deleted) when a key was in two tasks."""
        write = WriteTask.for_table(metadata, (), clustered=False, sorted_by_order=False)
        task = DirectUpsertTask(frame, write, start.plan)
        out = source.map(partial(decode_reduce_and_write, task=task), OUTPUT_DDL, self._headers).toArrow()
        repeated = keys_in_two_tasks(out)
        if repeated == 0:
            self._write_path = "direct-upsert"
            return write_index_segments_here(out, start.plan)
        self._keys_span_tasks = True
        log.info(
            "%d keys had changes in two tasks (records of one key in two Kafka partitions, or a partition "
            "split over tasks): the batch is written again with an exchange by key, and so are later ones",
            repeated,
            extra={"table": self._table.identifier},
        )
        paths = read_written(out).paths
        try:
            _delete_files(metadata, paths)
        except Exception as error:  # noqa: BLE001 - uncommitted files: orphans, not a reason to fail the batch
            log.warning(
                "could not delete the %d files of the discarded pass: %s (uncommitted: orphan removal takes them)",
                len(paths),
                error,
                extra={"table": self._table.identifier},
            )
        return None

    def _shuffled(self, source: KafkaRows, metadata: TableMetadata, fail: bool) -> Any:
        from pyspark.sql import functions as F

        spec = metadata.spec()
        equality_ids = self._equality_ids(metadata)
        frame_spec = FrameSpec(
            self._table.decode,
            json.dumps(spec.to_json()) if spec.fields else "",
            keys_determine_partition(spec, equality_ids),
            fail,
            self._table.identifier,
        )
        schema = self._table.decode.table_schema()
        rows = source.map(partial(decode_frame, frame=frame_spec), frame_spark_schema(schema), self._headers)
        clustered = False
        if self._table.mode == "upsert":
            if spec.fields and frame_spec.keyed_deletes:  # one exchange serves the reduction and the writer
                rows = reduce_to_latest(rows.repartition(F.col(PKEY_COLUMN)), self._table.key_fields(), [PKEY_COLUMN])
                clustered = True
            else:
                rows = reduce_to_latest(rows, self._table.key_fields())
        if spec.fields and not clustered:
            rows = rows.repartition(F.col(PKEY_COLUMN))
        order, sortable = sort_columns(metadata)
        keys = ([F.col(PKEY_COLUMN)] if spec.fields else []) + order
        if keys:
            rows = rows.sortWithinPartitions(*keys)  # Spark drops it when the window already sorted so
        task = WriteTask.for_table(
            metadata, equality_ids, clustered=bool(spec.fields), sorted_by_order=sortable and bool(order)
        )
        return map_in_arrow(rows, partial(write_files, task=task), OUTPUT_DDL).toArrow()

    def _dead_letters(self, df: Any, stats: BatchStats) -> None:
        """Produce the batch's bad records (decoded again, with their headers) to the dead-letter topic."""
        from pyspark.sql import functions as F

        assert self._table.dead_letter_topic is not None  # the fail policy raised in the decode tasks
        target = DeadLetterTarget(self._table.dead_letter_topic, tuple(self._job.source.librdkafka_config().items()))
        counts = self._kafka_rows(df).map(
            partial(decode_and_send, decode=self._table.decode, target=target), SENT_DDL, headers=True
        )
        sent = counts.agg(F.sum("sent").alias("sent")).collect()[0]["sent"] or 0
        if sent != stats.bad_records:
            raise DeadLetterDeliveryError(f"{sent} dead letters acknowledged by Kafka, {stats.bad_records} expected")

    def _finish(
        self,
        batch_id: int,
        stats: BatchStats,
        written: BatchFiles,
        metadata: TableMetadata,
        started: float,
        index: BatchIndex | None = None,
    ) -> BatchOutcome:
        """Commit the batch's files and account for it."""
        ident = self._table.identifier
        commit_started = time.monotonic()
        result = self._commit(batch_id, stats, written, metadata, index)
        commit_s = time.monotonic() - commit_started
        duration = time.monotonic() - started
        if not result.committed:
            _delete_files(metadata, written.paths + _index_paths(index))  # a concurrent replica landed it first
            self._metrics.batch_skipped(ident, stats.records, duration)
            return BatchOutcome(
                batch_id,
                "skipped",
                stats.records,
                stats.rows,
                0,
                stats.bad_records,
                attempts=result.attempts,
                snapshot_id=result.snapshot.snapshot_id,
                duration_s=duration,
            )
        self._metrics.dead_lettered(ident, stats.dead_letters)
        if index is not None and result.index is not None:
            self._metrics.index_committed(
                ident,
                entries=result.index.entries,
                size_bytes=result.index.size_bytes,
                lookups=written.records_committed(),
                update_s=index.update_s,
                rebuilt=index.start.rebuilt,
            )
        self._metrics.batch_committed(
            ident,
            records=stats.records,
            committed_rows=written.records_committed(),
            attempts=result.attempts,
            files=file_counts(written),
            duration_s=duration,
            commit_s=commit_s,
        )
        self._on_commit()
        if stats.skipped:
            log.warning(
                "batch %d skipped %s, as skip_records asked; the batch landed every other record",
                batch_id,
                format_refs(stats.skipped),
                extra={"table": ident, "batch_id": batch_id},
            )
        return BatchOutcome(
            batch_id,
            "committed",
            stats.records,
            stats.rows,
            written.records_committed(),
            stats.bad_records,
            len(written.data_files),
            len(written.delete_files),
            result.attempts,
            result.snapshot.snapshot_id,
            duration,
            self._write_path,
            format_refs(stats.skipped),
        )

    def _commit(
        self,
        batch_id: int,
        stats: BatchStats,
        written: BatchFiles,
        metadata: TableMetadata,
        index: BatchIndex | None = None,
    ) -> BatchCommitResult:
        ident = self._table.identifier
        try:
            return commit_batch(
                self._catalog,
                ident,
                self.writer_id,
                batch_id,
                stats.offsets,
                written.data_files,
                written.delete_files,
                fast_append=self._table.mode == "append",
                snapshot_properties=_summary(stats),
                index_update=None if index is None else index_update(index.start, index.changes, ident),
                referenced_data_files=() if index is None else index.referenced,
                removed_delete_files=written.replaced_deletes,
            )
        except CommitStateUnknown:
            raise  # the files may be in the table now: keep them
        except BaseException as error:
            _delete_files(metadata, written.paths + _index_paths(index), error)
            if index is not None and isinstance(error, INDEX_RACES):
                raise IndexRaced(error) from error
            raise

    def _equality_ids(self, metadata: TableMetadata) -> tuple[int, ...]:
        if self._table.mode != "upsert":
            return ()
        schema = metadata.schema()
        return tuple(schema.find_field(p).field_id for p in self._table.key_fields())


def _summary(stats: BatchStats) -> dict[str, str]:
    """Floe's snapshot summary entries of a batch: its partitions' newest timestamps, and the records it
    skipped (only when it skipped some, so that ``floe table history`` shows each skip once)."""
    summary = {MAX_TIMESTAMPS: encode_timestamps(stats.max_timestamps)}
    if stats.skipped:
        summary[SKIPPED_RECORDS] = format_refs(stats.skipped)
    return summary


# ---------------------------------------------------------------------------
# Planning helpers
# ---------------------------------------------------------------------------


def map_side_lookup(start: IndexStart, metadata: TableMetadata) -> bool:
    """Whether the decode tasks look keys up (an index within ``floe.key-index.map-side-lookup-max-bytes``)
    instead of a lookup stage after an exchange by index bucket."""
    return start.manifest.size_bytes <= properties.KEY_INDEX_MAP_SIDE_MAX_BYTES.read(metadata.properties)


def direct_path(metadata: TableMetadata, mode: str) -> bool:
    """Append into a table that wants its rows neither clustered nor sorted (see :mod:`ingest.tasks.direct`)."""
    return mode == "append" and wants_no_exchange(metadata)


def wants_no_exchange(metadata: TableMetadata) -> bool:
    """A table whose rows need neither clustering by partition (``write.distribution-mode`` none, the
    default only when unpartitioned) nor sorting: its decode tasks may write."""
    spec = metadata.spec()
    distribution = properties.DISTRIBUTION_MODE.read(metadata.properties) or ("hash" if spec.fields else "none")
    return metadata.sort_order().is_unsorted and distribution == "none"


def sort_columns(metadata: TableMetadata) -> tuple[list[Any], bool]:
    """Spark sort expressions for the table's sort order, and whether they realize it.

    Sorting by a source column realizes an order-preserving transform of it
    (identity, day, truncate...); a bucket order cannot be realized that way,
    so then nothing is sorted and no file claims the order.
    """
    from pyspark.sql import functions as F

    order = metadata.sort_order()
    if order.is_unsorted or not all(f.transform.preserves_order for f in order.fields):
        return [], False
    schema = metadata.schema()
    columns = []
    for field in order.fields:
        column = F.col(key_column(schema.find_column_name(field.source_id)))
        ascending = field.direction is SortDirection.ASC
        nulls_first = field.null_order is NullOrder.NULLS_FIRST
        if ascending:
            columns.append(column.asc_nulls_first() if nulls_first else column.asc_nulls_last())
        else:
            columns.append(column.desc_nulls_first() if nulls_first else column.desc_nulls_last())
    return columns, True


MAX_INDEX_REDOS = 3
DRIVER_INDEX_WRITE_MAX_CHANGES = 200_000
"""A position-strategy batch whose predecessor changed at most this many keys writes its index
segments on the driver (a few MB of entries, one Spark stage fewer, which is faster: see
docs/performance.md); bigger batches (back-fills) write them in a stage of their own, spread
over the executors."""
INDEX_RACES = (MissingReferencedDataFiles, KeyIndexConflict, KeyIndexStale, DuplicateDeletionVectors, MissingFiles)
"""Commit failures after which a position-strategy batch is written again on the new snapshot: a
compaction rewrote a file its deletes point at, or the key index moved in a way it cannot rebase on;
in v3, a deletion vector was added to, or removed from, a data file this batch's DV replaces."""


class IndexRaced(Exception):
    """The batch's commit lost to a concurrent change of the key index or of the files it points at."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class BatchIndex:
    """The key index a position-strategy batch started from, and the segments it wrote."""

    start: IndexStart
    changes: list[BucketChange]
    referenced: frozenset[str] = frozenset()
    update_s: float = 0.0

    @property
    def paths(self) -> list[str]:
        return self.start.paths + [c.segment.path for c in self.changes]


def _index_paths(index: BatchIndex | None) -> list[str]:
    return [] if index is None else index.paths


def _delete_files(metadata: TableMetadata, paths: list[str], error: BaseException | None = None) -> None:
    """Delete a batch's uncommitted files; a failure to do so is noted on ``error`` or raised."""
    if not paths:
        return
    try:
        FileIO.for_location(paths[0]).delete_many(paths)
    except Exception as cleanup:
        if error is None:
            raise
        error.add_note(f"and deleting the batch's {len(paths)} uncommitted files failed: {cleanup!r}")
