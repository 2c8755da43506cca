"""Pure per-batch planning: offsets and timestamps from small aggregates, lag, start offsets.

Nothing here touches Spark, Kafka or files, so every rule is testable on
plain values. The driver feeds it the decode tasks' small aggregates (rows per
topic, partition and error class: :data:`STATS_COLUMNS`, several tasks may
report the same partition) and gets back what the commit records and what
the metrics report.

Offsets are recorded per partition as the range of offsets the batch
covered: from the first offset seen (dead letters included) to the batch's
end in Spark's offset log (:func:`through_planned_ends`), else to the last
offset seen + 1. The end matters for transactional topics: a transaction's
commit marker, and an aborted transaction, take offsets but hold no record
to see, so a table that stopped after the last record would lag its topic
forever. A replayed batch reads the same offset log entry and the same
records, and yields the same ranges, which is what the exactly-once check
compares. Beside them the summary keeps each partition's newest Kafka
timestamp (``floe.kafka.max-timestamps``), from which the freshness gauge is
derived.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from commit.exactly_once import OffsetRange, branch_history, writer_of
from ingest.skips import SKIPPED
from table.metadata import MAIN_BRANCH, TableMetadata

MAX_TIMESTAMPS = "floe.kafka.max-timestamps"
STATS_COLUMNS = ("topic", "partition", "error_class", "first_offset", "last_offset", "records", "max_ts")
"""The per-batch aggregate: one row per (topic, partition, error class or None), and one per skipped record."""

log = logging.getLogger("floe.ingest")

Offsets = dict[str, dict[int, OffsetRange]]
PerPartition = dict[str, dict[int, int]]

PINNED_START = "floe/starting-offsets.json"
"""Where in the checkpoint Floe's source keeps its resolved ``startingOffsets`` (batch 0's start)."""


@dataclass(frozen=True)
class BatchStats:
    """What one micro-batch read: offsets, newest timestamps, records, dead letters by class."""

    offsets: Offsets = field(default_factory=dict)
    max_timestamps: PerPartition = field(default_factory=dict)  # microseconds since the epoch
    records: int = 0
    rows: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    skipped: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset), sorted: read, not landed

    @property
    def empty(self) -> bool:
        return self.records == 0

    @property
    def covers_offsets(self) -> bool:
        """Whether any partition's range holds an offset: a record, or a transaction marker or aborted record."""
        return any(end > start for ranges in self.offsets.values() for start, end in ranges.values())

    @property
    def bad_records(self) -> int:
        return sum(self.dead_letters.values())


def batch_stats(rows: Iterable[Mapping[str, Any]]) -> BatchStats:
    """Fold the aggregate rows (:data:`STATS_COLUMNS`) into :class:`BatchStats`."""
    first: dict[tuple[str, int], int] = {}
    last: dict[tuple[str, int], int] = {}
    newest: PerPartition = {}
    records = good = 0
    dead: dict[str, int] = {}
    skipped: list[tuple[str, int, int]] = []
    for row in rows:
        tp = (row["topic"], int(row["partition"]))
        first[tp] = min(first.get(tp, row["first_offset"]), row["first_offset"])
        last[tp] = max(last.get(tp, row["last_offset"]), row["last_offset"])
        records += row["records"]
        if row["error_class"] is None:
            good += row["records"]
        elif row["error_class"] == SKIPPED:
            skipped.append((tp[0], tp[1], int(row["first_offset"])))
        else:
            dead[row["error_class"]] = dead.get(row["error_class"], 0) + row["records"]
        if row["max_ts"] is not None:
            current = newest.setdefault(tp[0], {}).get(tp[1])
            newest[tp[0]][tp[1]] = row["max_ts"] if current is None else max(current, row["max_ts"])
    offsets: Offsets = {}
    for (topic, partition), start in sorted(first.items()):
        offsets.setdefault(topic, {})[partition] = (start, last[(topic, partition)] + 1)
    return BatchStats(offsets, newest, records, good, dead, tuple(sorted(skipped)))


def parse_offset_log_entry(text: str, where: str) -> PerPartition:
    """topic -> partition -> end offset of a batch, from Spark's offset log entry (``offsets/<batch id>``).

    The entry is a version line (``v1``), a line of batch metadata, then one
    line per source of the query: Floe's query has one Kafka source, and both
    Spark's and Floe's write its offsets as ``{"topic": {"partition": offset}}``.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or lines[0].strip() != "v1":
        raise ValueError(f"{where}: offset log version {lines[0].strip() if lines else None!r}, expected 'v1'")
    if len(lines) != 3:
        raise ValueError(
            f"{where}: expected a version line, a metadata line and one source's offsets, found {len(lines)} lines"
        )
    return _kafka_offsets(lines[2], where)


def _kafka_offsets(text: str, where: str) -> PerPartition:
    """``{"topic": {"partition": offset}}`` (the JSON of Spark's Kafka offsets) with integer partitions."""
    try:
        obj = json.loads(text)
        return {str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in obj.items()}
    except (ValueError, AttributeError, TypeError) as error:
        raise ValueError(f"{where}: not Kafka offsets ({error})") from None


def through_planned_ends(
    stats: BatchStats, planned: Mapping[str, Mapping[int, int]], committed: Mapping[str, Mapping[int, int]]
) -> BatchStats:
    """``stats`` with each partition's range running to the batch's planned end. Pure.

    Spark read every offset up to the planned end; where no record follows
    the last one seen (a commit marker, an aborted transaction), the range
    still ends there. A partition without a record in this batch gets the
    range from the table's ``committed`` offset to its end: empty when the
    partition sat idle. So every commit stands in each partition the table
    has covered, and its newest snapshot holds all of its offsets: expiry
    keeps the newest snapshot that covered each partition, and the history
    back to it, so an idle partition left out would hold expiry back for as
    long as it stays idle. One the table never covered stays out: recorded
    once and never again, it would hold expiry back for good.
    """
    offsets: Offsets = {t: dict(ranges) for t, ranges in stats.offsets.items()}
    for topic, ends in planned.items():
        for partition, end in ends.items():
            if end < 0:  # not resolved (a new partition's "earliest" that nothing read yet)
                continue
            seen = offsets.get(topic, {}).get(partition)
            if seen is not None:
                offsets[topic][partition] = (seen[0], max(seen[1], end))
                continue
            done = committed.get(topic, {}).get(partition)
            if done is not None and end >= done:
                offsets.setdefault(topic, {})[partition] = (done, end)
    return dataclasses.replace(stats, offsets=offsets)


def covering_every_partition(
    stats: BatchStats, planned: Mapping[str, Mapping[int, int]], starts: Mapping[str, Mapping[int, int]]
) -> BatchStats:
    """``stats`` with a range, ``[planned start, planned end)``, for every planned partition it lacks. Pure.

    For a table that sits batches out (a commit interval): what it committed is where it goes on from,
    so it must stand somewhere in each of its partitions from its first commit on, records or not; a
    partition it never covered would otherwise lose the records of the batches it sat out.
    """
    offsets: Offsets = {t: dict(ranges) for t, ranges in stats.offsets.items()}
    for topic, ends in planned.items():
        for partition, end in ends.items():
            start = starts.get(topic, {}).get(partition)
            if partition in offsets.get(topic, {}) or start is None or not 0 <= start <= end:
                continue
            offsets.setdefault(topic, {})[partition] = (start, end)
    return dataclasses.replace(stats, offsets=offsets)


def batch_size(starts: Mapping[str, Mapping[int, int]], ends: Mapping[str, Mapping[int, int]]) -> int | None:
    """The offsets a batch holds, from where it starts and ends in the checkpoint; None: not known. Pure.

    Unknown when a partition of ``ends`` has no start (a partition found since the last batch, read
    whole: ``maxOffsetsPerTrigger`` does not bound it) or an unresolved one, or ends before it starts.
    """
    total = 0
    for topic, parts in ends.items():
        for partition, end in parts.items():
            start = starts.get(topic, {}).get(partition)
            if start is None or start < 0 or end < start:
                return None
            total += end - start
    return total if ends else None


def parse_pinned_offsets(text: str, where: str) -> PerPartition:
    """Starting offsets as Floe pins them in a checkpoint (the JSON of Spark's Kafka offsets) with integer
    partitions; ValueError naming ``where`` for anything else."""
    return _kafka_offsets(text, where)


def replayed_records(offsets: Mapping[str, Mapping[int, OffsetRange]]) -> int:
    """Offsets a committed batch covered, from its offset ranges (for a skipped replay): its
    records, and the transaction markers and aborted records among them."""
    return sum(end - start for ranges in offsets.values() for start, end in ranges.values())


# ---------------------------------------------------------------------------
# Newest Kafka timestamps in snapshot summaries
# ---------------------------------------------------------------------------


def encode_timestamps(timestamps: Mapping[str, Mapping[int, int]]) -> str:
    """``{"topic":{"0":micros}}``, sorted, compact."""
    obj = {t: {str(p): int(ts) for p, ts in sorted(parts.items())} for t, parts in sorted(timestamps.items())}
    return json.dumps(obj, separators=(",", ":"))


def decode_timestamps(text: str) -> PerPartition:
    obj = json.loads(text)
    return {t: {int(p): int(ts) for p, ts in parts.items()} for t, parts in obj.items()}


def committed_timestamps(metadata: TableMetadata, branch: str = MAIN_BRANCH, max_snapshots: int = 1000) -> PerPartition:
    """topic -> partition -> newest committed Kafka timestamp (micros), newest batch first.

    Walks at most ``max_snapshots`` snapshots: a partition idle for longer
    than that simply has no freshness figure.
    """
    found: PerPartition = {}
    for i, snapshot in enumerate(branch_history(metadata, branch)):
        if i >= max_snapshots:
            break
        text = snapshot.summary.get(MAX_TIMESTAMPS)
        if writer_of(snapshot) is None or text is None:
            continue
        for topic, parts in decode_timestamps(text).items():
            for partition, ts in parts.items():
                found.setdefault(topic, {}).setdefault(partition, ts)
    return found


# ---------------------------------------------------------------------------
# Lag and starting offsets
# ---------------------------------------------------------------------------


def consumer_lag(
    watermarks: Mapping[str, Mapping[int, tuple[int, int]]], committed: Mapping[str, Mapping[int, int]]
) -> PerPartition:
    """Records behind per partition: high watermark minus the table's next offset.

    A partition the table never covered counts from its low watermark (every
    retained record is still to be read); lag is never negative.
    """
    lag: PerPartition = {}
    for topic, parts in watermarks.items():
        for partition, (low, high) in parts.items():
            position = committed.get(topic, {}).get(partition, low)
            lag.setdefault(topic, {})[partition] = max(0, high - max(position, low))
    return lag


def starting_offsets(
    configured: str,
    committed: Mapping[str, Mapping[int, int]],
    partitions: Mapping[str, Iterable[int]],
    table: str | None = None,
) -> str | None:
    """Spark's ``startingOffsets`` JSON to resume from the table, or None to use ``configured``.

    Used when the checkpoint is new but the table already holds offsets (a
    lost or moved checkpoint; Spark ignores the option for an existing one):
    every partition the table covered resumes at its committed offset, the
    others where ``configured`` says (``earliest`` -2, ``latest`` -1, or the
    configured JSON's own offset), because Spark wants every partition named.

    A configured offset *ahead* of the committed one wins: that is how an
    operator skips a poison record (new checkpoint, ``starting_offsets`` one
    past it); one behind never does, so nothing is read twice. Records are
    then never read, so each such skip is logged as a warning (``table``
    names it when the caller knows it).
    """
    if not any(committed.get(t) for t in partitions):
        return None
    specific: dict[str, dict[str, int]] = {} if configured in ("earliest", "latest") else json.loads(configured)
    default = -1 if configured == "latest" else -2
    obj: dict[str, dict[str, int]] = {}
    for topic, parts in sorted(partitions.items()):
        resumed = obj.setdefault(topic, {})
        for p in sorted(parts):
            done = committed.get(topic, {}).get(p)
            start = resumed[str(p)] = _resume_at(done, specific.get(topic, {}).get(str(p)), default)
            if done is not None and start > done:
                _warn_skip(table, topic, p, done, start)
    return json.dumps(obj, separators=(",", ":"))


def _resume_at(committed: int | None, configured: int | None, default: int) -> int:
    if committed is None:
        return configured if configured is not None else default
    return committed if configured is None or configured < committed else configured


def _warn_skip(table: str | None, topic: str, partition: int, committed: int, configured: int) -> None:
    """The records between the table's offset and a configured one ahead of it are never ingested: say so."""
    where = f"table {table}: " if table else ""
    log.warning(
        "%sstarting_offsets skips records of %s/%d: committed offset %d, configured offset %d, %d records skipped",
        where,
        topic,
        partition,
        committed,
        configured,
        configured - committed,
        extra={"table": table} if table else None,
    )
