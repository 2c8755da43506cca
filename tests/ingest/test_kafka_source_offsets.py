"""The pure planning of Floe's Kafka source: start offsets, admission control, task ranges."""

from __future__ import annotations

import random

import pytest

from ingest.kafka_source.offsets import (
    EARLIEST,
    Limits,
    OffsetRange,
    OffsetsError,
    admit,
    parse_offsets,
    plan_ranges,
    resolve_start,
    tasks_of,
)
from ingest.kafka_source.reader import duration_s, source_limits

EARLY = {"t": {"0": 5, "1": 0}}
LATE = {"t": {"0": 100, "1": 300}}


def test_starting_offsets_resolve_like_sparks_source():
    assert resolve_start("earliest", EARLY, LATE) == EARLY
    assert resolve_start("latest", EARLY, LATE) == LATE
    # given offsets, -2 and -1 resolved; a partition not given starts at its earliest; unknown ones ignored
    assert resolve_start({"t": {"0": -1, "7": 3}}, EARLY, LATE) == {"t": {"0": 100, "1": 0}}
    assert resolve_start({"t": {"0": 42, "1": -2}}, EARLY, LATE) == {"t": {"0": 42, "1": 0}}


def test_offset_documents_are_checked_with_one_line_naming_the_option():
    assert parse_offsets('{"t": {"0": 3}}', "startingOffsets") == {"t": {"0": 3}}
    for bad in ("soon", '{"t": 3}', '{"t": {"x": 3}}', '{"t": {"0": -3}}'):
        with pytest.raises(OffsetsError, match="^startingOffsets: "):
            parse_offsets(bad, "startingOffsets")


def test_max_offsets_per_trigger_is_shared_in_proportion_to_what_waits():
    start = {"t": {"0": 0, "1": 0}}
    end = admit(start, LATE, Limits(max_offsets=100), 0.0)
    assert end == {"t": {"0": 25, "1": 75}}
    assert admit(start, LATE, Limits(max_offsets=1_000), 0.0) == LATE
    # a partition with a sliver waiting still moves (at least one record), none passes its latest offset
    tiny = admit({"t": {"0": 99, "1": 0}}, LATE, Limits(max_offsets=10), 0.0)
    assert tiny == {"t": {"0": 100, "1": 9}}


def test_a_backlog_drains_in_whole_batches_of_max_offsets_per_trigger():
    """The shares add up to the limit (flooring each would leave up to one offset per partition behind, and
    draining a backlog would take one more, tiny batch); none passes its partition's latest offset."""
    rng = random.Random(7)
    for _ in range(50):
        limit, batches_wanted, partitions = rng.randrange(1_000, 250_000), rng.randrange(1, 6), rng.randrange(2, 9)
        total = limit * batches_wanted  # the case that took one more batch: a backlog of whole batches
        cuts = sorted(rng.sample(range(1, total), partitions - 1))
        latest = {"t": {str(p): b - a for p, (a, b) in enumerate(zip([0, *cuts], [*cuts, total]))}}
        start, batches = {"t": {p: 0 for p in latest["t"]}}, 0
        while start != latest:
            end = admit(start, latest, Limits(max_offsets=limit), 0.0)
            taken = sum(end["t"][p] - start["t"][p] for p in end["t"])
            assert taken <= limit and all(end["t"][p] <= latest["t"][p] for p in end["t"])
            start, batches = end, batches + 1
        assert batches == -(-total // limit)


def test_a_new_partition_is_read_whole_from_its_earliest_offset():
    latest = {"t": {"0": 100, "1": 300}, "u": {"0": 50}}
    end = admit({"t": {"0": 0, "1": 0}}, latest, Limits(max_offsets=100), 0.0)
    assert end == {"t": {"0": 25, "1": 75}, "u": {"0": 50}}
    assert plan_ranges({"t": {"0": 0, "1": 0}}, end)[-1] == OffsetRange("u", 0, EARLIEST, 50)


def test_min_offsets_per_trigger_waits_until_enough_or_the_delay_passed():
    start = {"t": {"0": 90, "1": 295}}
    limits = Limits(min_offsets=50, max_delay_s=60.0)
    assert admit(start, LATE, limits, 10.0) == start  # 15 waiting: no batch yet
    assert admit(start, LATE, limits, 61.0) == LATE  # the delay passed
    assert admit({"t": {"0": 0, "1": 295}}, LATE, limits, 0.0) == LATE  # enough waits


def test_offsets_never_go_backwards():
    assert admit({"t": {"0": 120, "1": 0}}, LATE, Limits(), 0.0) == {"t": {"0": 120, "1": 300}}
    with pytest.raises(OffsetsError, match="t/0: the batch ends at 10, before its start 20"):
        plan_ranges({"t": {"0": 20}}, {"t": {"0": 10}})


def test_large_ranges_are_split_into_even_tasks():
    ranges = plan_ranges({"t": {"0": 0, "1": 0}}, {"t": {"0": 10, "1": 1000}}, max_records_per_task=300)
    assert ranges == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 250), OffsetRange("t", 1, 250, 500),
                      OffsetRange("t", 1, 500, 750), OffsetRange("t", 1, 750, 1000)]
    split = plan_ranges({"t": {"0": 0}}, {"t": {"0": 9}}, min_tasks=3)
    assert [(r.start, r.until) for r in split] == [(0, 3), (3, 6), (6, 9)]
    assert plan_ranges({"t": {"0": 5}}, {"t": {"0": 5}}) == []


def test_ranges_are_packed_into_at_most_max_tasks_largest_first_onto_the_lightest():
    ranges = [OffsetRange("t", p, 0, size) for p, size in enumerate([100, 40, 60, 30, 70])]
    assert tasks_of(ranges) == [(r,) for r in ranges]
    assert tasks_of(ranges, 5) == tasks_of(ranges, 9) == [(r,) for r in ranges]
    # 100 -> first; 70 -> second; 60 -> second (70 < 100); 40 -> first (100 < 130); 30 -> second (130 < 140)
    assert tasks_of(ranges, 2) == [(ranges[0], ranges[1]), (ranges[2], ranges[3], ranges[4])]


def test_every_range_is_read_by_exactly_one_task_and_the_tasks_are_even():
    rng = random.Random(7)
    for _ in range(300):
        ranges = [OffsetRange(f"t{rng.randint(0, 2)}", p, 0, rng.randint(1, 1000)) for p in range(rng.randint(0, 30))]
        max_tasks = rng.randint(1, 8)
        tasks = tasks_of(ranges, max_tasks)
        assert sorted((r for task in tasks for r in task), key=ranges.index) == ranges
        assert len(tasks) == min(len(ranges), max_tasks) and all(tasks)
        assert all(list(task) == sorted(task, key=ranges.index) for task in tasks)  # planned order within a task
        loads = [sum(r.size for r in task) for task in tasks]
        if loads:  # largest first onto the lightest: no task passes the mean by more than one range
            assert max(loads) <= sum(loads) / len(loads) + max(r.size for r in ranges)


def test_limits_from_the_options():
    limits = source_limits({"maxoffsetspertrigger": "500", "minoffsetspertrigger": "10", "maxtriggerdelay": "900000ms"})
    assert limits == Limits(500, 10, 900.0)
    assert duration_s("15m") == 900.0 and duration_s("1.5 h") == 5400.0
    with pytest.raises(ValueError, match="^maxoffsetspertrigger: expected a positive integer, got '0'"):
        source_limits({"maxoffsetspertrigger": "0"})

