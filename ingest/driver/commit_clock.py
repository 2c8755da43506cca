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

import bisect
import threading
from collections.abc import Iterable, Mapping


class CommitClock:
    """Per table: its commit interval (seconds; none: every batch), when it last committed, and the
    last batch it waited through. Thread-safe: batches and the due timer both ask.

    Tables land together, so that many tables cost one Spark job per interval rather than one each:
    every table a batch lands gets one landing time, so tables that landed together are due together;
    and a table due within ``grace`` seconds before another waits for it (it lands at most ``grace``
    late, never early), which merges groups that are due close together (those the first batches made).
    """

    def __init__(
        self, intervals: Mapping[str, float | None], last_commits: Mapping[str, float], grace: float = 0.0
    ) -> None:
        self._intervals = {t: i for t, i in intervals.items() if i is not None}
        self._last = dict(last_commits)
        self._grace = grace
        self._waiting: dict[str, int] = {}  # table -> the last batch id it waited through
        self._lock = threading.Lock()

    def waits(self, table: str, now: float) -> bool:
        """Whether ``table`` sits this batch out: it has an interval, and it is not ready yet."""
        return table in self.sitting_out([table], now)

    def sitting_out(self, tables: Iterable[str], now: float) -> set[str]:
        """Those of ``tables`` that sit a batch at ``now`` out."""
        with self._lock:
            ready = self._ready_at()
        return {t for t in tables if now < ready.get(t, float("-inf"))}

    def waited(self, table: str, batch_id: int) -> None:
        """``table`` sat batch ``batch_id`` out: records wait for it."""
        with self._lock:
            self._waiting[table] = batch_id

    def landed(self, tables: Iterable[str], at: float) -> None:
        """``tables`` committed (or had nothing left to land) by ``at``: nothing waits for them."""
        with self._lock:
            for table in tables:
                self._last[table] = at
                self._waiting.pop(table, None)

    def next_due(self) -> tuple[float, int, list[str]] | None:
        """When the earliest waiting table is ready, the batch id its records were planned in, and every
        table waiting then; None when none waits."""
        with self._lock:
            if not self._waiting:
                return None
            ready = self._ready_at()
            first = min(ready[t] for t in self._waiting)
            tables = sorted(t for t in self._waiting if ready[t] <= first)
            return first, max(self._waiting[t] for t in tables), tables

    def waiting(self, table: str) -> bool:
        with self._lock:
            return table in self._waiting

    def _ready_at(self) -> dict[str, float]:
        """Each table with an interval: when it may land, the latest due time within ``grace`` of its own."""
        due = {t: self._last.get(t, float("-inf")) + i for t, i in self._intervals.items()}
        times = sorted(due.values())
        return {t: times[bisect.bisect_right(times, at + self._grace) - 1] for t, at in due.items()}
