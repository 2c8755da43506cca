"""Exactly-once streaming batches: which batch each snapshot committed, kept in its summary.

A streaming writer (a Spark query: writer id = the query id) commits each
micro-batch as one snapshot whose summary records the writer id, the batch id
and the Kafka offsets the batch covered (Iceberg-style string properties, as
Flink's committer records its max committed checkpoint id)::

    floe.writer-id      = "6f1c…"
    floe.batch-id       = "42"
    floe.kafka.offsets  = {"orders":{"0":[100,250],"1":[80,80]}}   (start, end exclusive)

The table is then the only record of what was committed, so a writer that
restarts, or a replica that replays a batch after a crash, asks the table.
Walking the branch's ancestry newest first, the first snapshot of the same
writer holds its last committed batch ``L``:

* ``batch > L``: a new batch;
* ``batch <= L`` and that batch is in the writer's history with the same
  offsets: already committed, to be skipped (:attr:`BatchStatus.ALREADY_COMMITTED`);
* otherwise (different offsets, or an older batch not in the history) the
  writer is behind the table: :class:`StaleWriter`.

:class:`BatchGuard` runs this check inside every commit attempt, on the
freshly loaded base, so two replicas racing with the same batch cannot both
land it: the loser's retry sees the winner's snapshot. Everything here is
pure: no file is read, only snapshot summaries in the metadata.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from enum import Enum

from commit.errors import InvalidArgument
from commit.operations.errors import ValidationException
from commit.snapshot_producer import Attempt, Produced, SnapshotOperation, WrappingOperation
from table.metadata import MAIN_BRANCH, Snapshot, TableMetadata

WRITER_ID = "floe.writer-id"
BATCH_ID = "floe.batch-id"
KAFKA_OFFSETS = "floe.kafka.offsets"
BATCH_KEYS = frozenset({WRITER_ID, BATCH_ID, KAFKA_OFFSETS})

OffsetRange = tuple[int, int]  # (first offset, offset after the last): end exclusive
KafkaOffsets = Mapping[str, Mapping[int, OffsetRange]]  # topic -> partition -> range
NextOffsets = dict[str, dict[int, int]]  # topic -> partition -> next offset to read


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class ExactlyOnceError(ValidationException):
    """A batch cannot be committed as asked (final: retrying the same commit cannot help)."""


class StaleWriter(ExactlyOnceError):
    """The writer is behind the table: its batch id is at or below the last one it committed,
    and the table does not hold that very batch (different offsets, or never committed).

    Another replica of the same query has moved on; this one must stop, not commit.
    """

    def __init__(self, writer_id: str, batch_id: int, last_committed: int, reason: str) -> None:
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.last_committed_batch_id = last_committed
        super().__init__(
            f"writer {writer_id!r} is fenced: batch {batch_id} is not after its last committed batch "
            f"{last_committed}, and {reason}"
        )


class BatchAlreadyCommitted(ExactlyOnceError):
    """The same batch (same writer, batch id and offsets) is already in the branch's history.

    Raised by :class:`BatchGuard` to stop a commit attempt before it writes
    anything; :func:`commit.batch_commit.commit_batch` turns it into a
    ``skipped`` result.
    """

    def __init__(self, batch: CommittedBatch) -> None:
        self.batch = batch
        super().__init__(
            f"batch {batch.batch_id} of writer {batch.writer_id!r} was already committed "
            f"by snapshot {batch.snapshot.snapshot_id}"
        )


class MalformedBatchSummary(ExactlyOnceError):
    """A snapshot's ``floe.*`` summary entries cannot be read: the exactly-once state is unknown."""

    def __init__(self, snapshot_id: int, key: str, reason: str) -> None:
        self.snapshot_id = snapshot_id
        self.key = key
        super().__init__(f"snapshot {snapshot_id}: summary {key!r} is malformed: {reason}")


# --------------------------------------------------------------------------
# Offsets in a summary
# --------------------------------------------------------------------------


def normalize_offsets(offsets: KafkaOffsets) -> dict[str, dict[int, OffsetRange]]:
    """``offsets`` checked (non-empty topics, partitions >= 0, 0 <= start <= end) and sorted."""
    result: dict[str, dict[int, OffsetRange]] = {}
    for topic in sorted(offsets):
        if not isinstance(topic, str) or not topic:
            raise InvalidArgument(f"Kafka topic names must be non-empty strings, got {topic!r}")
        ranges: dict[int, OffsetRange] = {}
        for partition in sorted(offsets[topic]):
            ranges[_partition(topic, partition)] = _offset_range(topic, partition, offsets[topic][partition])
        result[topic] = ranges
    return result


def _partition(topic: str, partition: object) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidArgument(f"topic {topic!r}: partitions must be integers >= 0, got {partition!r}")
    return partition


def _offset_range(topic: str, partition: object, value: object) -> OffsetRange:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        start, end = value
        if all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end)) and 0 <= start <= end:
            return (start, end)
    raise InvalidArgument(
        f"topic {topic!r} partition {partition}: expected an offset range [start, end_exclusive] "
        f"with 0 <= start <= end, got {value!r}"
    )


def encode_offsets(offsets: KafkaOffsets) -> str:
    """Compact JSON ``{"topic":{"0":[start,end_exclusive],…}}``, topics and partitions sorted."""
    normalized = normalize_offsets(offsets)
    obj = {topic: {str(p): list(r) for p, r in ranges.items()} for topic, ranges in normalized.items()}
    return json.dumps(obj, separators=(",", ":"))


def decode_offsets(text: str) -> dict[str, dict[int, OffsetRange]]:
    """The offsets of :func:`encode_offsets`; :class:`InvalidArgument` when they are not."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"not JSON: {e}") from None
    if not isinstance(obj, dict) or not all(isinstance(v, dict) for v in obj.values()):
        raise InvalidArgument("expected an object topic -> {partition: [start, end]}")
    parsed: dict[str, dict[int, object]] = {}
    for topic, ranges in obj.items():
        parsed[topic] = {}
        for key, value in ranges.items():
            if not (isinstance(key, str) and key.isdigit()):
                raise InvalidArgument(f"topic {topic!r}: partition {key!r} is not a number")
            parsed[topic][int(key)] = value
    return normalize_offsets(parsed)  # type: ignore[arg-type]  # JSON values checked by normalize_offsets itself


def batch_summary(writer_id: str, batch_id: int, offsets: KafkaOffsets) -> dict[str, str]:
    """The summary entries that record one batch."""
    check_batch_identity(writer_id, batch_id)
    return {WRITER_ID: writer_id, BATCH_ID: str(batch_id), KAFKA_OFFSETS: encode_offsets(offsets)}


def check_batch_identity(writer_id: str, batch_id: int) -> None:
    if not isinstance(writer_id, str) or not writer_id:
        raise InvalidArgument(f"the writer id must be a non-empty string, got {writer_id!r}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidArgument(f"batch ids must be integers >= 0, got {batch_id!r}")


# --------------------------------------------------------------------------
# Reading batches back from the history
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class CommittedBatch:
    """One batch as a snapshot recorded it."""

    snapshot: Snapshot
    writer_id: str
    batch_id: int
    offsets: Mapping[str, Mapping[int, OffsetRange]]


def writer_of(snapshot: Snapshot) -> str | None:
    """The writer id a snapshot records; None for snapshots not made by a streaming writer."""
    return snapshot.summary.get(WRITER_ID)


def committed_batch(snapshot: Snapshot) -> CommittedBatch | None:
    """The batch ``snapshot`` committed, or None when it records none."""
    writer_id = writer_of(snapshot)
    if writer_id is None:
        return None
    sid = snapshot.snapshot_id
    raw_batch, raw_offsets = snapshot.summary.get(BATCH_ID), snapshot.summary.get(KAFKA_OFFSETS)
    if raw_batch is None or not raw_batch.isdigit():
        raise MalformedBatchSummary(sid, BATCH_ID, f"expected a batch id >= 0, got {raw_batch!r}")
    if raw_offsets is None:
        raise MalformedBatchSummary(sid, KAFKA_OFFSETS, "missing next to a writer id")
    try:
        offsets = decode_offsets(raw_offsets)
    except InvalidArgument as e:
        raise MalformedBatchSummary(sid, KAFKA_OFFSETS, str(e)) from None
    return CommittedBatch(snapshot, writer_id, int(raw_batch), offsets)


def branch_history(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> Iterator[Snapshot]:
    """The branch's snapshots, newest first (nothing for a branch without one)."""
    head = metadata.snapshot_for_ref(branch)
    return iter(()) if head is None else metadata.ancestors_of(head.snapshot_id)


def last_batch_snapshot(metadata: TableMetadata, branch: str = MAIN_BRANCH) -> Snapshot | None:
    """The newest snapshot on ``branch`` that committed a batch, whichever writer made it."""
    return next((s for s in branch_history(metadata, branch) if writer_of(s) is not None), None)


def batches_of(history: Iterable[Snapshot], writer_id: str) -> Iterator[CommittedBatch]:
    """The batches ``writer_id`` committed in ``history``, in its order."""
    for snapshot in history:
        if writer_of(snapshot) == writer_id:
            batch = committed_batch(snapshot)
            assert batch is not None
            yield batch


def last_committed_batch(metadata: TableMetadata, writer_id: str, branch: str = MAIN_BRANCH) -> CommittedBatch | None:
    """The newest batch of ``writer_id`` on ``branch``; None if it never committed (or it expired)."""
    return next(batches_of(branch_history(metadata, branch), writer_id), None)


def committed_offsets(
    metadata: TableMetadata,
    writer_id: str | None = None,
    *,
    branch: str = MAIN_BRANCH,
    partitions: Mapping[str, Iterable[int]] | None = None,
) -> NextOffsets:
    """Where the table stands: topic -> partition -> the next offset to read.

    Each partition's answer comes from the newest batch on ``branch`` that
    covered it, whichever writer made it (only ``writer_id``'s when given):
    a job restarted under a new query id continues where the old one
    stopped. The walk ends when every partition in ``partitions`` is found,
    else at the end of the (unexpired) history; a partition that no retained
    snapshot covered is absent, never guessed. Writers should therefore record
    every partition they read, empty ranges included.
    """
    wanted = None if partitions is None else {(t, p) for t, ps in partitions.items() for p in ps}
    found: NextOffsets = {}
    for snapshot in branch_history(metadata, branch):
        if writer_of(snapshot) is None or (writer_id is not None and writer_of(snapshot) != writer_id):
            continue
        batch = committed_batch(snapshot)
        assert batch is not None
        for topic, ranges in batch.offsets.items():
            for partition, (_, end) in ranges.items():
                found.setdefault(topic, {}).setdefault(partition, end)
        if wanted is not None and all(p in found.get(t, {}) for t, p in wanted):
            break
    if wanted is not None:
        found = {t: {p: o for p, o in ps.items() if (t, p) in wanted} for t, ps in found.items()}
        found = {t: ps for t, ps in found.items() if ps}
    return found


# --------------------------------------------------------------------------
# Deciding what to do with a batch
# --------------------------------------------------------------------------


class BatchStatus(str, Enum):
    NEW = "new"
    ALREADY_COMMITTED = "already-committed"


@dataclass(frozen=True)
class BatchCheck:
    """The verdict on a batch: new, or already committed by ``committed`` (same batch)."""

    status: BatchStatus
    last: CommittedBatch | None  # the writer's newest batch in the history
    committed: CommittedBatch | None = None  # the snapshot that holds this very batch


def check_batch(history: Iterable[Snapshot], writer_id: str, batch_id: int, offsets: KafkaOffsets | None) -> BatchCheck:
    """Is batch ``batch_id`` of ``writer_id`` new, or already in ``history`` (newest first)?

    ``offsets`` None (not known yet) matches any offsets: a batch id found
    in the history counts as committed. Raises :class:`StaleWriter` when
    the writer is behind the table (see the module docstring).
    """
    check_batch_identity(writer_id, batch_id)
    wanted = None if offsets is None else normalize_offsets(offsets)
    last: CommittedBatch | None = None
    for batch in batches_of(history, writer_id):
        if last is None:
            last = batch
            if batch_id > batch.batch_id:
                return BatchCheck(BatchStatus.NEW, last)
        if batch.batch_id == batch_id:
            if wanted is None or batch.offsets == wanted:
                return BatchCheck(BatchStatus.ALREADY_COMMITTED, last, batch)
            reason = (
                f"snapshot {batch.snapshot.snapshot_id} committed batch {batch_id} with offsets "
                f"{encode_offsets(batch.offsets)}, not {encode_offsets(wanted)}"
            )
            raise StaleWriter(writer_id, batch_id, last.batch_id, reason)
        if batch.batch_id < batch_id:
            break  # the writer's batches only go down from here: this one was skipped over
    if last is None:
        return BatchCheck(BatchStatus.NEW, None)
    reason = f"batch {batch_id} is not in the branch's history (never committed, or expired)"
    raise StaleWriter(writer_id, batch_id, last.batch_id, reason)


# --------------------------------------------------------------------------
# The check inside each commit attempt
# --------------------------------------------------------------------------


class BatchGuard(WrappingOperation):
    """Wraps the operation that commits a batch: each attempt first checks the batch
    against the attempt's fresh base, before anything is written, and the
    snapshot's summary records the batch. ``attempts`` counts the attempts made.
    """

    def __init__(self, inner: SnapshotOperation, writer_id: str, batch_id: int, offsets: KafkaOffsets) -> None:
        check_batch_identity(writer_id, batch_id)
        super().__init__(inner)
        self.writer_id = writer_id
        self.batch_id = batch_id
        self.offsets = normalize_offsets(offsets)
        self.summary = batch_summary(writer_id, batch_id, offsets)
        self.attempts = 0

    def validate(self, attempt: Attempt) -> None:
        self.attempts = attempt.number
        history = () if attempt.parent is None else attempt.base.ancestors_of(attempt.parent.snapshot_id)
        verdict = check_batch(history, self.writer_id, self.batch_id, self.offsets)
        if verdict.status == BatchStatus.ALREADY_COMMITTED:
            assert verdict.committed is not None
            raise BatchAlreadyCommitted(verdict.committed)
        self.inner.validate(attempt)

    def produce(self, attempt: Attempt) -> Produced:
        produced = self.inner.produce(attempt)
        return replace(produced, summary={**produced.summary, **self.summary})
