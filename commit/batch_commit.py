"""Committing one streaming batch exactly once: the entry point of ``ingest/``.

:func:`commit_batch` commits a micro-batch's data and delete files as one
snapshot that records the writer id, batch id and Kafka offsets
(:mod:`commit.exactly_once`), through the producer's retry loop. A replayed
batch (a restart, a replica, a commit whose outcome was lost) comes back as
``skipped`` with the snapshot that holds it; a writer behind the table gets
:class:`~commit.exactly_once.StaleWriter`. Calling it again with the same
arguments after any failure is always safe: that is what makes replays
exactly-once.

The caller's data and delete files are never deleted here, not even for a
skipped batch: a replay may have written the same paths the table already
holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from commit.catalog.base import Catalog
from commit.errors import InvalidArgument
from commit.exactly_once import (
    BATCH_KEYS,
    BatchAlreadyCommitted,
    BatchCheck,
    BatchGuard,
    KafkaOffsets,
    NextOffsets,
    branch_history,
    check_batch,
    committed_offsets,
)
from commit.identifiers import TableIdentifierLike
from commit.key_index.manifest import IndexManifest
from commit.key_index.operation import KeyIndexUpdate, WithKeyIndex
from commit.metadata_committer import BeforeCommit
from commit.operations.fast_append import FastAppend
from commit.operations.row_delta import RowDelta
from commit.snapshot_producer import SnapshotOperation, SnapshotProducer
from table.io import FileIO
from table.manifest import DataFile
from table.metadata import MAIN_BRANCH, Snapshot

log = logging.getLogger(__name__)


class BatchCommitStatus(str, Enum):
    COMMITTED = "committed"
    SKIPPED = "skipped"  # the same batch was already in the branch's history


@dataclass(frozen=True)
class BatchCommitResult:
    """What happened to a batch: its snapshot (new, or the one that committed it earlier)
    and how many commit attempts were made (retries after lost races included)."""

    status: BatchCommitStatus
    snapshot: Snapshot
    attempts: int
    index: IndexManifest | None = None
    """The key index the commit moved the table to (``index_update`` given and committed)."""

    @property
    def committed(self) -> bool:
        return self.status == BatchCommitStatus.COMMITTED


def commit_batch(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    writer_id: str,
    batch_id: int,
    offsets: KafkaOffsets,
    data_files: Sequence[DataFile] = (),
    delete_files: Sequence[DataFile] = (),
    *,
    branch: str = MAIN_BRANCH,
    fast_append: bool = False,
    snapshot_properties: Mapping[str, str] | None = None,
    io: FileIO | None = None,
    before_commit: BeforeCommit | None = None,
    sleep: Callable[[float], None] = time.sleep,
    index_update: KeyIndexUpdate | None = None,
    referenced_data_files: Iterable[str] = (),
    removed_delete_files: Sequence[DataFile] = (),
) -> BatchCommitResult:
    """Commit batch ``batch_id`` of ``writer_id`` unless the branch already holds it.

    ``offsets`` is topic -> partition -> ``(start, end_exclusive)``: every
    partition the batch read, empty ranges included. The change is a
    :class:`RowDelta` (data and deletes share one sequence number; manifests
    are merged per the table's settings), or a :class:`FastAppend` for a
    pure append when ``fast_append``. Raises what the commit raises:
    :class:`StaleWriter`, a validation error, :class:`CommitConflict` when
    retries ran out, :class:`CommitStateUnknown` when the outcome cannot be
    checked (then call again: the batch check settles it).

    ``index_update`` moves the table's key index in the same swap
    (:mod:`commit.key_index.operation`); the index files it no longer uses
    are deleted once the commit has landed. ``referenced_data_files``: the
    data files the position deletes point at, which must still be live
    (Java's ``validateDataFilesExist``; a delete file's bounds name only one).
    ``removed_delete_files``: deletion vectors (and position delete files) that the batch's new
    deletion vectors merged and replace (v3: one DV per data file).
    """
    extra = dict(snapshot_properties or {})
    clashing = sorted(BATCH_KEYS & extra.keys())
    if clashing:
        raise InvalidArgument(f"snapshot properties {clashing} are set by commit_batch itself")
    operation = _operation(data_files, delete_files, fast_append, referenced_data_files, removed_delete_files)
    indexed = None if index_update is None else WithKeyIndex(operation, index_update)
    guard = BatchGuard(indexed or operation, writer_id, batch_id, offsets)
    producer = SnapshotProducer(
        catalog,
        identifier,
        guard,
        branch=branch,
        io=io,
        before_commit=before_commit,
        snapshot_properties=extra,
        sleep=sleep,
    )
    try:
        snapshot = producer.commit()
    except BatchAlreadyCommitted as done:
        return BatchCommitResult(BatchCommitStatus.SKIPPED, done.batch.snapshot, guard.attempts)
    except BaseException as error:  # noted and re-raised: which files may now be orphans
        left = producer.written_files()
        if left:
            error.add_note(f"batch {batch_id} of writer {writer_id!r}: files written by this commit and kept: {left}")
        raise
    if indexed is not None:
        _delete_obsolete(producer.io, indexed.obsolete)
    return BatchCommitResult(
        BatchCommitStatus.COMMITTED, snapshot, guard.attempts, None if indexed is None else indexed.manifest
    )


def _delete_obsolete(io: FileIO, paths: Sequence[str]) -> None:
    """Index files the new index no longer names: nothing reads them once the commit has landed."""
    if not paths:
        return
    try:
        io.delete_many(list(paths))
    except Exception as error:  # noqa: BLE001 - the commit has landed: a leftover file is only garbage
        log.warning("could not delete %d replaced key index files: %s", len(paths), error)


def _operation(
    data_files: Sequence[DataFile],
    delete_files: Sequence[DataFile],
    fast_append: bool,
    referenced_data_files: Iterable[str] = (),
    removed_delete_files: Sequence[DataFile] = (),
) -> SnapshotOperation:
    if fast_append and not delete_files:
        return FastAppend(data_files)
    return RowDelta(
        data_files, delete_files, referenced_data_files=referenced_data_files, removed_delete_files=removed_delete_files
    )


def batch_status(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    writer_id: str,
    batch_id: int,
    offsets: KafkaOffsets | None = None,
    *,
    branch: str = MAIN_BRANCH,
) -> BatchCheck:
    """Whether a batch is new or already committed, before any file is written (a hint:
    :func:`commit_batch` checks again in every attempt). Raises :class:`StaleWriter`."""
    metadata = catalog.load_table(identifier).metadata
    return check_batch(branch_history(metadata, branch), writer_id, batch_id, offsets)


def table_offsets(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    writer_id: str | None = None,
    *,
    branch: str = MAIN_BRANCH,
) -> NextOffsets:
    """Topic -> partition -> next offset to read, from the table's current metadata."""
    metadata = catalog.load_table(identifier).metadata
    return committed_offsets(metadata, writer_id, branch=branch)
