"""What a micro-batch wrote before its commit, and what became of the batch.

A :class:`BatchWrite` is the result of a write plan's Spark job
(:mod:`ingest.driver.write_plans`): the files, the decode tasks' aggregate,
and under the position strategy the key-index change. Until the commit takes
them the batch owns those files, and :meth:`BatchWrite.discard` deletes them
when the batch does not commit. :class:`BatchOutcome` is what the batch did,
also the fields of its log line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commit.key_index.bucket_change import BucketChange
from ingest.driver.key_index_steps import IndexStart
from ingest.driver.offset_accounting import BatchStats
from ingest.tasks.output import BatchFiles
from table.io import FileIO


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


@dataclass(frozen=True)
class BatchWrite:
    """One batch's written, uncommitted files, its aggregate and how it was written (``path``)."""

    files: BatchFiles
    stats: BatchStats
    path: str  # direct, direct-upsert, exchange: BatchOutcome.write
    io: FileIO  # the table's
    index: BatchIndex | None = None
    keys_spanned_tasks: bool = False  # a direct upsert found a key in two tasks, and the exchange wrote it

    @property
    def paths(self) -> list[str]:
        """Every file the batch wrote: data, deletes, key-index segments (and a rebuilt index)."""
        return self.files.paths + ([] if self.index is None else self.index.paths)

    def with_stats(self, stats: BatchStats) -> BatchWrite:
        return replace(self, stats=stats)

    def discard(self, error: BaseException | None = None) -> None:
        """Delete the batch's files: it did not commit (a failure, a replica's commit, nothing to commit)."""
        delete_uncommitted(self.io, self.paths, error)


def delete_uncommitted(io: FileIO, paths: list[str], error: BaseException | None = None) -> None:
    """Delete uncommitted files; a failure to do so is noted on ``error`` or, without one, raised."""
    if not paths:
        return
    try:
        io.delete_many(paths)
    except Exception as cleanup:
        if error is None:
            raise
        error.add_note(f"and deleting the batch's {len(paths)} uncommitted files failed: {cleanup!r}")


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
