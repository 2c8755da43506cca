"""Pure offset planning of Floe's Kafka source: what each micro-batch reads.

Offsets travel as Spark's Kafka source writes them, topic -> partition (as
text) -> offset, so the checkpoint's offset log and ``startingOffsets`` read
the same. Nothing here touches Kafka or Spark: the reader
(:mod:`ingest.kafka_source.reader`) fetches watermarks and hands them in.

The rules follow Spark's Kafka source, where it has one:

* ``maxOffsetsPerTrigger`` is shared among partitions in proportion to what
  each has waiting (at least one record each, never past the latest offset);
* ``minOffsetsPerTrigger`` holds a batch back until that many records wait,
  or ``maxTriggerDelay`` has passed since the last batch;
* a partition that appears while running starts at its earliest offset
  (:data:`EARLIEST`, resolved by the task that reads it);
* ``minPartitions`` and ``maxRecordsPerPartition`` split a large range of one
  partition into several tasks.

Floe adds ``maxPartitions``: at most that many tasks per batch, each reading
one or more whole ranges (:func:`tasks_of`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]
"""topic -> partition (text) -> offset: the JSON of Spark's Kafka offsets."""


class OffsetsError(ValueError):
    """An offset document that cannot be used (one line, naming what is wrong)."""


@dataclass(frozen=True)
class OffsetRange:
    """The records ``[start, until)`` of one partition: one task's share of a batch."""

    topic: str
    partition: int
    start: int  # EARLIEST: the partition's low watermark when the task runs
    until: int

    @property
    def size(self) -> int:
        return self.until - max(self.start, 0)


@dataclass(frozen=True)
class Limits:
    """Admission control: Spark's ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay``."""

    max_offsets: int | None = None
    min_offsets: int | None = None
    max_delay_s: float = 15 * 60.0


def parse_offsets(text: str, field_name: str) -> str | Offsets:
    """``earliest``, ``latest`` or Spark's offset JSON, checked (``field_name`` names it in errors)."""
    if text in ("earliest", "latest"):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        raise OffsetsError(f"{field_name}: expected earliest, latest or offset JSON, got {text!r}") from None
    if not isinstance(value, dict) or not all(isinstance(p, dict) for p in value.values()):
        raise OffsetsError(f"{field_name}: expected topic -> partition -> offset, got {text!r}")
    offsets: Offsets = {}
    for topic, parts in value.items():
        for partition, offset in parts.items():
            if (
                not str(partition).isdigit()
                or isinstance(offset, bool)
                or not isinstance(offset, int)
                or offset < EARLIEST
            ):
                raise OffsetsError(f"{field_name}: {topic}/{partition} = {offset!r} is not an offset (>= -2)")
            offsets.setdefault(str(topic), {})[str(int(partition))] = offset
    return offsets


def resolve_start(wanted: str | Mapping[str, Mapping[str, int]], earliest: Offsets, latest: Offsets) -> Offsets:
    """The initial offsets of every partition now known: ``earliest``/``latest``, or given ones
    (-2 and -1 resolved; a partition not given starts at its earliest, as new partitions do)."""
    if wanted == "earliest":
        return _copy(earliest)
    if wanted == "latest":
        return _copy(latest)
    assert not isinstance(wanted, str)
    start = _copy(earliest)
    for topic, parts in wanted.items():
        for partition, offset in parts.items():
            if topic not in latest or partition not in latest[topic]:
                continue  # Spark would refuse: a partition that does not exist; a later batch finds it if it appears
            source = earliest if offset == EARLIEST else latest if offset == LATEST else None
            start[topic][partition] = source[topic][partition] if source is not None else offset
    return start


Marks = Mapping[str, Mapping[int, tuple[int, int]]]
"""topic -> partition -> (low, high) watermark, as :mod:`ingest.kafka_source.watermarks` reads them."""


def low_offsets(marks: Marks) -> Offsets:
    """Every partition's low watermark, as offsets."""
    return {t: {str(p): low for p, (low, _) in parts.items()} for t, parts in marks.items()}


def high_offsets(marks: Marks) -> Offsets:
    """Every partition's high watermark (the last stable offset under read_committed), as offsets."""
    return {t: {str(p): high for p, (_, high) in parts.items()} for t, parts in marks.items()}


def starting_offsets_now(option: str, marks: Marks) -> Offsets:
    """The ``startingOffsets`` option resolved against the watermarks of now."""
    return resolve_start(parse_offsets(option, "startingOffsets"), low_offsets(marks), high_offsets(marks))


def admit(start: Offsets, latest: Offsets, limits: Limits, waited_s: float) -> Offsets:
    """The end offsets of the next batch: ``start`` itself when none should run yet.

    A partition missing from ``start`` is new: it is read whole, from its
    earliest offset (its low watermark is not known here), and outside
    ``maxOffsetsPerTrigger``, as it would otherwise start below that mark.
    """
    new = {t: {p: o for p, o in parts.items() if p not in start.get(t, {})} for t, parts in latest.items()}
    new = {t: parts for t, parts in new.items() if parts}
    waiting = {
        (t, p): end - start[t][p]
        for t, parts in latest.items()
        for p, end in parts.items()
        if p in start.get(t, {}) and end > start[t][p]
    }
    available = sum(waiting.values())
    if available == 0 or limits.max_offsets is None or available <= limits.max_offsets:
        if (
            not new
            and limits.min_offsets is not None
            and available < limits.min_offsets
            and waited_s < limits.max_delay_s
        ):
            return _copy(start)
        return _merged(
            start,
            {t: {p: e for p, e in parts.items() if e > start.get(t, {}).get(p, e - 1)} for t, parts in latest.items()},
        )
    end: Offsets = {}
    for (topic, partition), taken in shares(waiting, limits.max_offsets).items():
        end.setdefault(topic, {})[partition] = start[topic][partition] + taken
    return _merged(_merged(start, end), new)


def shares(waiting: Mapping[tuple[str, str], int], limit: int) -> dict[tuple[str, str], int]:
    """``limit`` offsets shared among partitions in proportion to what each has ``waiting`` (more than ``limit``
    in all), each share at most what waits.

    As Spark's source, a partition whose share is under one record still gets one, so a sliver is not starved.
    Unlike it, the fractions that flooring leaves are handed out (largest first) so that the shares add up to
    ``limit``: a batch holds ``maxOffsetsPerTrigger`` offsets, not up to one fewer per partition, and draining
    a backlog takes no extra batch for the remainders (a batch costs about a second of fixed work).
    """
    available = sum(waiting.values())
    exact = {tp: limit * count / available for tp, count in waiting.items()}
    taken = {tp: math.ceil(share) if share < 1 else math.floor(share) for tp, share in exact.items()}
    short = limit - sum(taken.values())
    by_fraction = sorted((tp for tp in exact if exact[tp] >= 1), key=lambda tp: (taken[tp] - exact[tp], tp))
    for tp in by_fraction[: max(short, 0)]:
        taken[tp] += 1
    return {tp: min(n, waiting[tp]) for tp, n in taken.items()}


def capped(latest: Offsets, ending: Offsets) -> Offsets:
    """``latest`` held to ``ending`` (an ``availableNow`` run's end): partitions not in it are not read."""
    return {
        t: {p: min(o, ending[t][p]) for p, o in parts.items() if p in ending.get(t, {})}
        for t, parts in latest.items()
        if t in ending
    }


def reached(end: Mapping[str, Mapping[str, int]], ending: Offsets) -> bool:
    """Whether a batch that ended at ``end`` read everything up to ``ending``."""
    return all(end.get(t, {}).get(p, -1) >= o for t, parts in ending.items() for p, o in parts.items())


def plan_ranges(
    start: Offsets, end: Offsets, max_records_per_task: int | None = None, min_tasks: int | None = None
) -> list[OffsetRange]:
    """The batch ``start`` -> ``end`` as ranges, one per task, a large partition split in even pieces.

    An end below its start means the offsets went backwards, which Floe never
    plans: it is refused rather than read again.
    """
    whole = []
    for topic, parts in sorted(end.items()):
        for partition, until in sorted(parts.items(), key=lambda item: int(item[0])):
            begin = start.get(topic, {}).get(partition, EARLIEST)
            if until < begin:
                raise OffsetsError(f"{topic}/{partition}: the batch ends at {until}, before its start {begin}")
            if until > begin:
                whole.append(OffsetRange(topic, int(partition), begin, until))
    total = sum(r.size for r in whole)
    ranges = []
    for r in whole:
        pieces = 1
        if max_records_per_task:
            pieces = max(pieces, math.ceil(r.size / max_records_per_task))
        if min_tasks and total and len(whole) < min_tasks:
            pieces = max(pieces, round(min_tasks * r.size / total))
        ranges.extend(_split(r, pieces))
    return ranges


def tasks_of(ranges: list[OffsetRange], max_tasks: int | None = None) -> list[tuple[OffsetRange, ...]]:
    """The ranges as the tasks that read them: one each, or with ``max_tasks``, packed into that many.

    A task has a fixed cost (a Python worker's input, a consumer assignment, its own data, delete and
    index files, their commit), so a batch of more ranges than task slots reads several per task. Each
    range goes to the task with the fewest records so far, largest range first (so sizes even out);
    a task reads its ranges in planned order. A range stays whole, so a Kafka partition's records in a
    batch stay in one task unless ``minPartitions``/``maxRecordsPerPartition`` split them.
    """
    if max_tasks is None or len(ranges) <= max_tasks:
        return [(r,) for r in ranges]
    loads = [0] * max_tasks
    members: list[list[int]] = [[] for _ in range(max_tasks)]
    for index in sorted(range(len(ranges)), key=lambda i: (-ranges[i].size, i)):
        lightest = min(range(max_tasks), key=lambda t: (loads[t], t))
        loads[lightest] += ranges[index].size
        members[lightest].append(index)
    return [tuple(ranges[i] for i in sorted(indices)) for indices in members if indices]


def _split(r: OffsetRange, pieces: int) -> list[OffsetRange]:
    """``r`` in ``pieces`` contiguous ranges of near-equal size (an EARLIEST start stays whole)."""
    if pieces <= 1 or r.start < 0 or r.size < pieces:
        return [r]
    bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds)]


def _merged(start: Offsets, newer: Offsets) -> Offsets:
    """``start`` with the partitions of ``newer`` replaced or added."""
    merged = _copy(start)
    for topic, parts in newer.items():
        merged.setdefault(topic, {}).update(parts)
    return merged


def _copy(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {t: dict(parts) for t, parts in offsets.items()}
