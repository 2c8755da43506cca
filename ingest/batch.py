"""Per-micro-batch orchestration on the driver: one Kafka batch -> at most one Iceberg commit.

:class:`BatchProcessor` is the ``foreachBatch`` function. The driver plans and
commits; every record-level step is a Spark job on executors, and what comes
back to the driver is a small aggregate per partition and the written files'
metadata, never rows:

1. Skip a replay before reading Kafka: the table's history says whether this
   writer (the streaming query id) already committed this batch id.
2. Decode (:func:`ingest.frame.decode_frame`) into one persisted frame of rows
   and dead letters; one aggregate gives offsets, newest timestamps and counts.
3. Bad records: policy ``fail`` raises :class:`BadRecordError` with the first;
   ``dead-letter`` produces them from executors, before the commit.
4. Upsert mode reduces each key to its last change (:mod:`ingest.reduce`).
5. Write tasks (:mod:`ingest.writer`) over rows repartitioned by table
   partition and sorted by it and the table's sort order.
6. One commit through :func:`commit.coordinator.commit_batch`, which records
   writer id, batch id and offsets (exactly once; a lost race retries).

An append into a table that wants its rows neither clustered nor sorted
takes the direct path instead (:mod:`ingest.direct`): steps 2, 3 and 5 in a
single pass over the Kafka rows, no cache, no shuffle.

A failure anywhere raises: Spark does not mark the batch done, so it is
replayed after a restart. Files written by a batch that did not commit are
deleted, except when the commit's outcome is unknown (they may be in the table).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Optional

from commit.catalog import Catalog
from commit.coordinator import BatchCommitResult, commit_batch
from commit.errors import CommitStateUnknown
from commit.exactly_once import BatchStatus, branch_history, check_batch
from ingest.arrow_udf import map_in_arrow
from ingest.decode_batch import KAFKA_TIMESTAMP_COLUMN, OFFSET_COLUMN, PARTITION_COLUMN
from ingest.dead_letter_writer import SENT_DDL, BadRecordError, DeadLetterTarget, decode_and_send, send_dead_letters
from ingest.direct import DirectTask, decode_and_write, read_stats
from ingest.frame import (
    DEAD_LETTER_COLUMNS,
    DL_HEADERS,
    DL_KEY,
    DL_VALUE,
    ERROR_CLASS,
    ERROR_FIELD,
    ERROR_MESSAGE,
    PKEY_COLUMN,
    TOPIC_COLUMN,
    FrameSpec,
    decode_frame,
    frame_spark_schema,
)
from ingest.job import IngestJob, TableSpec
from ingest.metrics import IngestMetrics
from ingest.planning import MAX_TIMESTAMPS, BatchStats, batch_stats, encode_timestamps, replayed_records
from ingest.reduce import key_column, reduce_to_latest
from ingest.writer import (
    WRITTEN_DDL,
    WriteTask,
    WrittenFiles,
    file_counts,
    keys_determine_partition,
    read_written,
    write_files,
)
from table.io import FileIO
from table.metadata import TableMetadata
from table.sort_order import NullOrder, SortDirection

log = logging.getLogger("floe.ingest")

WRITER_ID_TIMEOUT_S = 120.0
DISTRIBUTION_MODE = "write.distribution-mode"


@dataclass(frozen=True)
class BatchOutcome:
    """What one micro-batch did (also the fields of its log line)."""

    batch_id: int
    result: str  # committed, skipped, empty
    records: int = 0
    rows: int = 0
    bad_records: int = 0
    data_files: int = 0
    delete_files: int = 0
    attempts: int = 0
    snapshot_id: Optional[int] = None
    duration_s: float = 0.0


class BatchProcessor:
    """The ``foreachBatch`` function of one ingest query.

    ``table`` decodes into the table's own schema (see
    :func:`ingest.job.with_decode_schema`). The writer id, the query id, is
    known only once the query has started: :meth:`bind` supplies it and the
    first batch waits for it. ``on_commit`` runs after each commit (the lag
    monitor's poke).
    """

    def __init__(self, job: IngestJob, table: TableSpec, catalog: Catalog, metrics: IngestMetrics,
                 on_commit: Callable[[], None] = lambda: None) -> None:
        self._job = job
        self._table = table
        self._catalog = catalog
        self._metrics = metrics
        self._on_commit = on_commit
        self._writer_id: Optional[str] = None
        self._bound = threading.Event()

    def bind(self, writer_id: str) -> None:
        self._writer_id = writer_id
        self._bound.set()

    @property
    def writer_id(self) -> str:
        if not self._bound.wait(WRITER_ID_TIMEOUT_S):
            raise RuntimeError("the streaming query id (writer id) was never bound")
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
        log.info("batch %d %s", batch_id, outcome.result,
                 extra={"table": self._table.identifier, "files": files, **vars(outcome)})

    def process(self, df: Any, batch_id: int) -> BatchOutcome:
        started = time.monotonic()
        ident = self._table.identifier
        metadata = self._catalog.load_table(ident).metadata
        check = check_batch(branch_history(metadata), self.writer_id, batch_id, None)
        if check.status == BatchStatus.ALREADY_COMMITTED:
            assert check.committed is not None
            records = replayed_records(check.committed.offsets)
            self._metrics.batch_skipped(ident, records, time.monotonic() - started)
            return BatchOutcome(batch_id, "skipped", records=records,
                                snapshot_id=check.committed.snapshot.snapshot_id,
                                duration_s=time.monotonic() - started)
        if direct_path(metadata, self._table.mode):
            return self._land_direct(df, batch_id, metadata, started)
        frame = self._decode(df, metadata)
        try:
            outcome = self._land(df, frame, batch_id, metadata, started)
        except BaseException as error:
            _unpersist(frame, error)
            raise
        _unpersist(frame)
        return outcome

    # -- steps -------------------------------------------------------------------

    def _decode(self, df: Any, metadata: TableMetadata) -> Any:
        from pyspark import StorageLevel

        spec = metadata.spec()
        frame_spec = FrameSpec(
            self._table.decode,
            json.dumps(spec.to_json()) if spec.fields else "",
            keys_determine_partition(spec, self._equality_ids(metadata)),
        )
        schema = self._table.decode.table_schema()
        frame = map_in_arrow(self._source(df), partial(decode_frame, frame=frame_spec), frame_spark_schema(schema))
        return frame.persist(StorageLevel.MEMORY_AND_DISK)

    def _source(self, df: Any) -> Any:
        """The Kafka rows the decoder needs: without headers unless a column reads one (they are slow)."""
        return df if FrameSpec(self._table.decode).headers else df.drop("headers")

    def _land(self, df: Any, frame: Any, batch_id: int, metadata: TableMetadata, started: float) -> BatchOutcome:
        stats = aggregate_stats(frame)
        if stats.empty:
            return self._empty(batch_id, started)
        if stats.bad_records:
            self._bad_records(df, frame, stats)
        written = self._write(frame, metadata) if stats.rows else WrittenFiles([], [], 0)
        return self._finish(batch_id, stats, written, metadata, started)

    def _land_direct(self, df: Any, batch_id: int, metadata: TableMetadata, started: float) -> BatchOutcome:
        """Append without a shuffle (:mod:`ingest.direct`): decode and write in one pass."""
        from pyspark.sql import functions as F

        task = DirectTask(self._table.decode, WriteTask.for_table(metadata, (), clustered=False, sorted_by_order=False),
                          self._table.identifier, self._table.bad_records == "fail")
        out = map_in_arrow(self._source(df), partial(decode_and_write, task=task), WRITTEN_DDL).toArrow()
        written, stats = read_written(out), batch_stats(read_stats(out))
        if stats.empty:
            return self._empty(batch_id, started)
        if stats.bad_records:
            try:
                target = self._dead_letter_target()
                counts = map_in_arrow(df, partial(decode_and_send, decode=self._table.decode, target=target), SENT_DDL)
                _check_sent(counts.agg(F.sum("sent").alias("sent")).collect()[0]["sent"], stats)
            except BaseException as error:
                _delete_files(metadata, written.paths, error)
                raise
        return self._finish(batch_id, stats, written, metadata, started)

    def _empty(self, batch_id: int, started: float) -> BatchOutcome:
        self._metrics.batch_empty(self._table.identifier)
        return BatchOutcome(batch_id, "empty", duration_s=time.monotonic() - started)

    def _finish(self, batch_id: int, stats: BatchStats, written: WrittenFiles, metadata: TableMetadata,
                started: float) -> BatchOutcome:
        """Commit the batch's files and account for it."""
        ident = self._table.identifier
        commit_started = time.monotonic()
        result = self._commit(batch_id, stats, written, metadata)
        commit_s = time.monotonic() - commit_started
        duration = time.monotonic() - started
        if not result.committed:
            _delete_files(metadata, written.paths)  # a concurrent replica landed this batch first
            self._metrics.batch_skipped(ident, stats.records, duration)
            return BatchOutcome(batch_id, "skipped", stats.records, stats.rows, stats.bad_records,
                                attempts=result.attempts, snapshot_id=result.snapshot.snapshot_id, duration_s=duration)
        self._metrics.dead_lettered(ident, stats.dead_letters)
        self._metrics.batch_committed(
            ident, records=stats.records, committed_rows=written.records_committed(), attempts=result.attempts,
            files=file_counts(written), duration_s=duration, commit_s=commit_s,
        )
        self._on_commit()
        return BatchOutcome(batch_id, "committed", stats.records, stats.rows, stats.bad_records,
                            len(written.data_files), len(written.delete_files), result.attempts,
                            result.snapshot.snapshot_id, duration)

    def _dead_letter_target(self) -> DeadLetterTarget:
        assert self._table.dead_letter_topic is not None
        return DeadLetterTarget(self._table.dead_letter_topic, tuple(self._job.source.librdkafka_config().items()))

    def _bad_records(self, df: Any, frame: Any, stats: BatchStats) -> None:
        from pyspark.sql import functions as F

        letters = frame.where(F.col(ERROR_CLASS).isNotNull())
        if self._table.bad_records == "fail":
            raise first_bad_record(letters, self._table.identifier, stats.bad_records)
        target = self._dead_letter_target()
        payload = letters.select(
            F.col(DL_KEY).alias("key"), F.col(DL_VALUE).alias("value"), F.col(DL_HEADERS).alias("floe_headers"),
            TOPIC_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN,
        )
        if "headers" in df.columns and not FrameSpec(self._table.decode).headers:
            payload = with_original_headers(payload, df)
        counts = map_in_arrow(payload, partial(send_dead_letters, target=target), SENT_DDL)
        _check_sent(counts.agg(F.sum("sent").alias("sent")).collect()[0]["sent"], stats)

    def _write(self, frame: Any, metadata: TableMetadata) -> WrittenFiles:
        from pyspark.sql import functions as F

        rows = frame.where(F.col(ERROR_CLASS).isNull()).drop(*DEAD_LETTER_COLUMNS)
        if self._table.mode == "upsert":
            rows = reduce_to_latest(rows, self._table.key_fields())
        partitioned = bool(metadata.spec().fields)
        order, sortable = sort_columns(metadata)
        if partitioned:
            rows = rows.repartition(F.col(PKEY_COLUMN))
        keys = ([F.col(PKEY_COLUMN)] if partitioned else []) + order
        if keys:
            rows = rows.sortWithinPartitions(*keys)
        task = WriteTask.for_table(metadata, self._equality_ids(metadata), clustered=partitioned,
                                   sorted_by_order=sortable and bool(order))
        written = map_in_arrow(rows, partial(write_files, task=task), WRITTEN_DDL).toArrow()
        return read_written(written)

    def _commit(self, batch_id: int, stats: BatchStats, written: WrittenFiles,
                metadata: TableMetadata) -> BatchCommitResult:
        try:
            return commit_batch(
                self._catalog, self._table.identifier, self.writer_id, batch_id, stats.offsets,
                written.data_files, written.delete_files,
                fast_append=self._table.mode == "append",
                snapshot_properties={MAX_TIMESTAMPS: encode_timestamps(stats.max_timestamps)},
            )
        except CommitStateUnknown:
            raise  # the files may be in the table now: keep them
        except BaseException as error:
            _delete_files(metadata, written.paths, error)
            raise

    def _equality_ids(self, metadata: TableMetadata) -> tuple[int, ...]:
        if self._table.mode != "upsert":
            return ()
        schema = metadata.schema()
        return tuple(schema.find_field(p).field_id for p in self._table.key_fields())


# ---------------------------------------------------------------------------
# Spark helpers (each one small aggregate or plan fragment)
# ---------------------------------------------------------------------------


def aggregate_stats(frame: Any) -> BatchStats:
    """One aggregate over the frame: per topic, partition and error class."""
    from pyspark.sql import functions as F

    grouped = frame.groupBy(
        F.col(TOPIC_COLUMN).alias("topic"),
        F.col(PARTITION_COLUMN).alias("partition"),
        F.col(ERROR_CLASS).alias("error_class"),
    ).agg(
        F.min(OFFSET_COLUMN).alias("first_offset"),
        F.max(OFFSET_COLUMN).alias("last_offset"),
        F.count(F.lit(1)).alias("records"),
        F.max(F.unix_micros(F.col(KAFKA_TIMESTAMP_COLUMN))).alias("max_ts"),
    )
    return batch_stats(row.asDict() for row in grouped.collect())


def first_bad_record(letters: Any, table: str, count: int) -> BadRecordError:
    """The first dead letter in Kafka order, as the ``fail`` policy's error."""
    from pyspark.sql import functions as F

    first = letters.orderBy(TOPIC_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN).select(
        TOPIC_COLUMN, PARTITION_COLUMN, OFFSET_COLUMN,
        F.col(ERROR_CLASS).alias("error_class"),
        F.col(ERROR_MESSAGE).alias("error_message"),
        F.col(ERROR_FIELD).alias("error_field"),
    ).limit(1).collect()[0]
    return BadRecordError(table, first[TOPIC_COLUMN], first[PARTITION_COLUMN], first[OFFSET_COLUMN],
                          first["error_class"], first["error_message"], first["error_field"], count)


def direct_path(metadata: TableMetadata, mode: str) -> bool:
    """Append into a table that wants its rows neither clustered nor sorted (see :mod:`ingest.direct`)."""
    spec, props = metadata.spec(), metadata.properties
    distribution = props.get(DISTRIBUTION_MODE, "hash" if spec.fields else "none")
    return mode == "append" and metadata.sort_order().is_unsorted and distribution == "none"


def _check_sent(sent: Optional[int], stats: BatchStats) -> None:
    if (sent or 0) != stats.bad_records:
        raise RuntimeError(f"{sent or 0} dead letters acknowledged by Kafka, {stats.bad_records} expected")


def with_original_headers(letters: Any, kafka: Any) -> Any:
    """Dead letters with their records' Kafka headers as ``original``, joined by position.

    Only batches with bad records pay this second read of the batch's Kafka range.
    """
    from pyspark.sql import functions as F

    positions = kafka.select(
        F.col("topic").alias("_k_topic"), F.col("partition").alias("_k_partition"),
        F.col("offset").alias("_k_offset"), F.col("headers").alias("original"),
    )
    condition = [
        F.col(TOPIC_COLUMN) == F.col("_k_topic"),
        F.col(PARTITION_COLUMN) == F.col("_k_partition"),
        F.col(OFFSET_COLUMN) == F.col("_k_offset"),
    ]
    return letters.join(positions, condition, "left").drop("_k_topic", "_k_partition", "_k_offset")


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


def _unpersist(frame: Any, error: Optional[BaseException] = None) -> None:
    """Drop the batch's cached frame; a failure to do so is noted on ``error`` or raised."""
    try:
        frame.unpersist()
    except Exception as cleanup:
        if error is None:
            raise
        error.add_note(f"and unpersisting the batch's frame failed: {cleanup!r}")


def _delete_files(metadata: TableMetadata, paths: list[str], error: Optional[BaseException] = None) -> None:
    """Delete a batch's uncommitted files; a failure to do so is noted on ``error`` or raised."""
    if not paths:
        return
    try:
        FileIO.for_location(metadata.location).delete_many(paths)
    except Exception as cleanup:
        if error is None:
            raise
        error.add_note(f"and deleting the batch's {len(paths)} uncommitted files failed: {cleanup!r}")

