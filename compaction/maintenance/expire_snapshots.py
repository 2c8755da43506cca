"""Expire old snapshots, never the ones exactly-once ingest still reads.

An ingest writer finds its last committed batch, and a restarted job the
offsets to resume from, by walking main's history newest first
(:mod:`commit.exactly_once`). A walk stops at the first expired parent, so
protecting those snapshots means keeping the whole chain from the head down
to the oldest one still needed: the newest snapshot of every writer, and the
newest snapshot that covered each Kafka partition. Everything else follows
the age and count retention of
:class:`~commit.operations.expire_snapshots.ExpireSnapshots`, which also
deletes the files only expired snapshots referenced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from commit.catalog.base import Catalog
from commit.exactly_once import branch_history, committed_batch
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.operations.expire_snapshots import ExpireResult, ExpireSnapshots
from table.metadata import TableMetadata, now_ms

log = logging.getLogger(__name__)


def ingest_checkpoint_snapshots(metadata: TableMetadata) -> set[int]:
    """Ids of main's snapshots from the head down to the oldest that exactly-once needs."""
    history = list(branch_history(metadata))
    writers: set[str] = set()
    partitions: set[tuple[str, int]] = set()
    oldest_needed = -1
    for index, snapshot in enumerate(history):
        batch = committed_batch(snapshot)
        if batch is None:
            continue
        covered = {(topic, p) for topic, ranges in batch.offsets.items() for p in ranges}
        if batch.writer_id not in writers or not covered <= partitions:
            oldest_needed = index
        writers.add(batch.writer_id)
        partitions |= covered
    return {s.snapshot_id for s in history[: oldest_needed + 1]}


@dataclass(frozen=True)
class ExpiryPolicy:
    """Retention: snapshots older than ``older_than_ms`` expire, keeping at least ``retain_last``."""

    older_than_ms: int
    retain_last: int

    def __post_init__(self) -> None:
        if self.older_than_ms < 0 or self.retain_last < 1:
            raise ValueError(f"expiry needs older_than_ms >= 0 and retain_last >= 1, got {self}")


def expire_snapshots(
    catalog: Catalog,
    identifier: TableIdentifierLike,
    policy: ExpiryPolicy,
    *,
    clock_ms: Callable[[], int] = now_ms,
) -> ExpireResult:
    """Expire by ``policy``, pinning :func:`ingest_checkpoint_snapshots`.

    The pins are computed from the table as loaded here; snapshots committed
    after that are kept by age: the cut-off is never later than the loaded
    metadata's last update, and every later commit is stamped after it.
    """
    ident = to_table_identifier(identifier)
    metadata = catalog.load_table(ident).metadata
    pinned = ingest_checkpoint_snapshots(metadata)
    cutoff = min(clock_ms() - policy.older_than_ms, metadata.last_updated_ms)
    result = ExpireSnapshots(
        catalog, ident, older_than_ms=cutoff, retain_last=policy.retain_last, pinned=pinned, clock_ms=clock_ms
    ).commit()
    log.info(
        "expired snapshots",
        extra={
            "table": str(ident),
            "expired": len(result.expired_snapshot_ids),
            "pinned_for_ingest": len(pinned),
            "files_deleted": len(result.deleted.all()) - len(result.failed_deletes),
            "files_not_deleted": len(result.failed_deletes),
        },
    )
    return result
