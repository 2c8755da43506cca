"""The commit retry policy: Iceberg's property names and defaults, exponential
backoff with jitter, and the count and time limits; then the policy at work in
a real commit that keeps losing the race."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from commit.catalog.base import Catalog
from commit.errors import CommitConflict, InvalidArgument
from commit.metadata_committer import PendingCommit
from commit.operations.fast_append import FastAppend
from commit.retry import RetryPolicy
from tests.commit.producer_support import CommitTable


def test_defaults_are_icebergs() -> None:
    assert RetryPolicy.for_commits({}) == RetryPolicy(4, 100, 60_000, 1_800_000)
    assert RetryPolicy.for_status_checks({}) == RetryPolicy(3, 1_000, 60_000, 1_800_000)


def test_table_properties_override_the_defaults() -> None:
    props = {
        "commit.retry.num-retries": "7",
        "commit.retry.min-wait-ms": "5",
        "commit.retry.max-wait-ms": "50",
        "commit.retry.total-timeout-ms": "1000",
        "commit.status-check.num-retries": "1",
    }
    assert RetryPolicy.for_commits(props) == RetryPolicy(7, 5, 50, 1000)
    assert RetryPolicy.for_status_checks(props).num_retries == 1


@pytest.mark.parametrize(
    "props, message",
    [
        ({"commit.retry.num-retries": "many"}, "commit.retry.num-retries"),
        ({"commit.retry.min-wait-ms": "-1"}, "table property commit.retry.min-wait-ms=-1: must not be negative"),
        ({"commit.retry.min-wait-ms": "500", "commit.retry.max-wait-ms": "100"},
         "table property commit.retry.max-wait-ms=100: below commit.retry.min-wait-ms=500"),
    ],
)
def test_bad_properties_are_named(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        RetryPolicy.for_commits(props)


def test_bad_status_check_properties_are_named() -> None:
    with pytest.raises(InvalidArgument, match=re.escape("commit.status-check.max-wait-ms=1000: below "
                                                        "commit.status-check.min-wait-ms=120000")):
        RetryPolicy.for_status_checks({"commit.status-check.min-wait-ms": "120000",
                                       "commit.status-check.max-wait-ms": "1000"})


def test_delay_doubles_up_to_the_max() -> None:
    policy = RetryPolicy(num_retries=6, min_wait_ms=100, max_wait_ms=500, total_timeout_ms=10_000)
    assert [policy.base_delay_ms(n) for n in range(1, 6)] == [100, 200, 400, 500, 500]


def test_jitter_adds_up_to_ten_percent() -> None:
    policy = RetryPolicy()
    assert policy.delay_ms(2, 0.0) == 200
    assert 219 < policy.delay_ms(2, 0.9999) < 220


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_allows_num_retries_then_stops() -> None:
    backoff = RetryPolicy(num_retries=3, min_wait_ms=10, max_wait_ms=1000).backoff(FakeClock(), lambda: 0.0)
    delays = [backoff.next_delay_ms() for _ in range(4)]
    assert delays == [10, 20, 40, None]


def test_total_timeout_stops_retries_but_never_the_first() -> None:
    clock = FakeClock()
    backoff = RetryPolicy(num_retries=10, min_wait_ms=10, total_timeout_ms=1_000).backoff(clock, lambda: 0.0)
    clock.now = 5.0  # the first attempt alone took longer than the whole budget
    assert backoff.next_delay_ms() == 10
    assert backoff.next_delay_ms() is None


def test_zero_retries_means_one_attempt() -> None:
    assert RetryPolicy(num_retries=0).backoff(FakeClock()).next_delay_ms() is None


def test_a_commit_that_keeps_losing_waits_per_policy_then_gives_up(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(
        sqlite_catalog,
        properties={"commit.retry.num-retries": "2", "commit.retry.min-wait-ms": "100", "commit.retry.max-wait-ms": "150"},
    )

    def lose_every_race(pending: PendingCommit) -> None:
        table.commit(FastAppend([table.write_data([100 + pending.attempt])]))  # a real commit by another writer

    slept: list[float] = []
    data_file = table.write_data([1])
    producer = table.producer(FastAppend([data_file]), before_commit=lose_every_race, sleep=slept.append)
    with pytest.raises(CommitConflict, match="gave up after 3 attempt"):
        producer.commit()

    assert len(slept) == 2
    assert 0.100 <= slept[0] < 0.110 and 0.150 <= slept[1] < 0.165
    assert producer.written_files() == []  # everything this commit wrote is gone
    assert Path(data_file.file_path).exists()  # but not the caller's data file
    assert len(table.metadata().snapshots) == 3  # only the other writer's commits
