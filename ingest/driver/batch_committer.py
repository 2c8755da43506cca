"""A written micro-batch committed exactly once, and accounted for in metrics and its outcome.

:meth:`BatchCommitter.commit` hands the batch's files, offsets and key-index
change to :func:`commit.batch_commit.commit_batch`, which records writer id,
batch id and offsets (exactly once; a lost race retries). A batch that a
replica committed first, or whose commit failed, deletes its files; one whose
outcome is unknown keeps them (they may be in the table). A commit that lost
to a concurrent change of the key index, or of the files its deletes point at,
raises :class:`IndexRaced`: the batch is written again on the new snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from commit.batch_commit import BatchCommitResult, commit_batch
from commit.catalog.base import Catalog
from commit.errors import CommitStateUnknown
from commit.key_index.manifest import KeyIndexConflict, KeyIndexStale
from commit.operations.errors import DuplicateDeletionVectors, MissingFiles, MissingReferencedDataFiles
from ingest.driver.batch_write import BatchOutcome, BatchWrite
from ingest.driver.key_index_steps import index_update
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import MAX_TIMESTAMPS, BatchStats, encode_timestamps
from ingest.job import TableSpec
from ingest.skips import SKIPPED_RECORDS, format_refs
from ingest.tasks.output import file_counts

log = logging.getLogger("floe.ingest")

INDEX_RACES = (MissingReferencedDataFiles, KeyIndexConflict, KeyIndexStale, DuplicateDeletionVectors, MissingFiles)
"""Commit failures after which a position-strategy batch is written again on the new snapshot: a
compaction rewrote a file its deletes point at, or the key index moved in a way it cannot rebase on;
in v3, a deletion vector was added to, or removed from, a data file this batch's DV replaces."""


class IndexRaced(Exception):
    """The batch's commit lost to a concurrent change of the key index or of the files it points at."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class BatchCommitter:
    """Commits ``table``'s written batches through ``catalog``; ``on_commit`` runs after each commit."""

    def __init__(
        self, table: TableSpec, catalog: Catalog, metrics: IngestMetrics, on_commit: Callable[[], None]
    ) -> None:
        self.table = table
        self._catalog = catalog
        self._metrics = metrics
        self._on_commit = on_commit
        self.pending_summary: dict[str, str] = {}
        """Snapshot summary entries for the next commit only (what changed the schema before it)."""

    def commit(self, writer_id: str, batch_id: int, written: BatchWrite, started: float) -> BatchOutcome:
        """Commit the batch's files and account for it."""
        ident, stats = self.table.identifier, written.stats
        commit_started = time.monotonic()
        result = self._commit(writer_id, batch_id, written)
        self.pending_summary = {}
        commit_s = time.monotonic() - commit_started
        duration = time.monotonic() - started
        if not result.committed:
            written.discard()  # a concurrent replica landed it first
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
        self._account(batch_id, written, result, duration, commit_s)
        files = written.files
        return BatchOutcome(
            batch_id,
            "committed",
            stats.records,
            stats.rows,
            files.records_committed(),
            stats.bad_records,
            len(files.data_files),
            len(files.delete_files),
            result.attempts,
            result.snapshot.snapshot_id,
            duration,
            written.path,
            format_refs(stats.skipped),
        )

    def _commit(self, writer_id: str, batch_id: int, written: BatchWrite) -> BatchCommitResult:
        ident, index, files = self.table.identifier, written.index, written.files
        try:
            return commit_batch(
                self._catalog,
                ident,
                writer_id,
                batch_id,
                written.stats.offsets,
                files.data_files,
                files.delete_files,
                fast_append=self.table.mode == "append",
                snapshot_properties={**_summary(written.stats), **self.pending_summary},
                index_update=None if index is None else index_update(index.start, index.changes, ident),
                referenced_data_files=() if index is None else index.referenced,
                removed_delete_files=files.replaced_deletes,
                io=written.io,
            )
        except CommitStateUnknown:
            raise  # the files may be in the table now: keep them
        except BaseException as error:
            written.discard(error)
            if index is not None and isinstance(error, INDEX_RACES):
                raise IndexRaced(error) from error
            raise

    def _account(
        self, batch_id: int, written: BatchWrite, result: BatchCommitResult, duration: float, commit_s: float
    ) -> None:
        """The committed batch's metrics, the commit hook, and a warning for the records it skipped."""
        ident, stats, index = self.table.identifier, written.stats, written.index
        self._metrics.dead_lettered(ident, stats.dead_letters)
        if index is not None and result.index is not None:
            self._metrics.index_committed(
                ident,
                entries=result.index.entries,
                size_bytes=result.index.size_bytes,
                lookups=written.files.records_committed(),
                update_s=index.update_s,
                rebuilt=index.start.rebuilt,
            )
        self._metrics.batch_committed(
            ident,
            records=stats.records,
            committed_rows=written.files.records_committed(),
            attempts=result.attempts,
            files=file_counts(written.files),
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


def _summary(stats: BatchStats) -> dict[str, str]:
    """Floe's snapshot summary entries of a batch: its partitions' newest timestamps, and the records it
    skipped (only when it skipped some, so that ``floe table history`` shows each skip once)."""
    summary = {MAX_TIMESTAMPS: encode_timestamps(stats.max_timestamps)}
    if stats.skipped:
        summary[SKIPPED_RECORDS] = format_refs(stats.skipped)
    return summary
