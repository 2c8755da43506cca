"""When a table of a shared query commits: every batch, or at most once per its commit interval. Pure.

A table under a commit interval (``tables[].commit_interval``) is left out of
the batches that come before it is due: its records stay in Kafka, nothing is
written for them, and its committed offsets stay where they are. The first
batch after it is due lands them all at once, reading from the table's
committed offsets (:mod:`ingest.driver.catch_up`). Nothing written waits
uncommitted, so a crash loses nothing and repeats nothing: the table's
committed offsets are where it goes on from.

When no batch comes (a quiet stream), the waiting records would wait for the
next one; the due timer (:class:`ingest.driver.shared_batch.SharedBatch`) asks
:meth:`CommitClock.next_due` when to land them without one.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping


class CommitClock:
    """Per table: its commit interval (seconds; none: every batch), when it last committed, and the
    last batch it waited through. Thread-safe: batches and the due timer both ask."""

    def __init__(self, intervals: Mapping[str, float | None], last_commits: Mapping[str, float]) -> None:
        self._intervals = {t: i for t, i in intervals.items() if i is not None}
        self._last = dict(last_commits)
        self._waiting: dict[str, int] = {}  # table -> the last batch id it waited through
        self._lock = threading.Lock()

    def waits(self, table: str, now: float) -> bool:
        """Whether ``table`` sits this batch out: it has an interval, and its last commit is younger."""
        interval = self._intervals.get(table)
        if interval is None:
            return False
        with self._lock:
            return now - self._last.get(table, float("-inf")) < interval

    def waited(self, table: str, batch_id: int) -> None:
        """``table`` sat batch ``batch_id`` out: records wait for it."""
        with self._lock:
            self._waiting[table] = batch_id

    def landed(self, table: str, at: float) -> None:
        """``table`` committed (or had nothing left to land) at ``at``: nothing waits for it."""
        with self._lock:
            self._last[table] = at
            self._waiting.pop(table, None)

    def next_due(self) -> tuple[float, int, list[str]] | None:
        """When the earliest waiting table is due, the batch id its records were planned in, and every
        table waiting then; None when none waits."""
        with self._lock:
            if not self._waiting:
                return None
            due = {t: self._last.get(t, 0.0) + self._intervals[t] for t in self._waiting}
            first = min(due.values())
            tables = sorted(t for t, at in due.items() if at <= first)
            return first, max(self._waiting[t] for t in tables), tables

    def waiting(self, table: str) -> bool:
        with self._lock:
            return table in self._waiting
