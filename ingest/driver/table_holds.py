"""Which tables of a shared query are held after failing, and when each is tried again. Pure.

One failing table must not stop the others (its catalog refuses it, it was
dropped by hand, its schema cannot take the records). A shared query holds
such a table: the batches go on without it, its records wait in Kafka, and it
is tried again after a jittered backoff that doubles from :data:`FIRST_RETRY_S` to
:data:`MAX_RETRY_S`. Nothing of it is lost: its committed offsets, its floors,
are where it goes on from when it lands again (:mod:`ingest.driver.catch_up`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

FIRST_RETRY_S = 5.0
MAX_RETRY_S = 300.0


@dataclass
class Hold:
    """A held table: why, how many failures in a row, and when it is tried again (monotonic seconds)."""

    reason: str
    failures: int
    retry_at: float
    cause: str = "other"  # the dependency that failed (ingest.driver.failure_cause)


class TableHolds:
    """The held tables; thread-safe (batches, the due timer and the metrics ask)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, draw: Callable[[], float] = random.random) -> None:
        self._clock = clock
        self._draw = draw
        self._holds: dict[str, Hold] = {}
        self._lock = threading.Lock()

    def hold(self, table: str, reason: str, cause: str = "other") -> Hold:
        """``table`` failed again: held, its next try after the doubled backoff, jittered by a quarter either
        way (tables held by one outage, and replicas, then do not all try again at once)."""
        with self._lock:
            failures = self._holds[table].failures + 1 if table in self._holds else 1
            step = min(FIRST_RETRY_S * 2 ** (failures - 1), MAX_RETRY_S)
            delay = min(step * (0.75 + 0.5 * self._draw()), MAX_RETRY_S)
            hold = self._holds[table] = Hold(reason, failures, self._clock() + delay, cause)
            return hold

    def release(self, table: str) -> Hold | None:
        """``table`` landed: no longer held. Its hold, if it was held.

        A held table that lands shows its dependency answers again: the tables held for the same cause (the
        catalog, storage, Kafka or the registry) are due at once, rather than after the rest of their
        backoff, which may be minutes after a long outage."""
        with self._lock:
            hold = self._holds.pop(table, None)
            if hold is not None and hold.cause != "other":
                now = self._clock()
                for other in self._holds.values():
                    if other.cause == hold.cause:
                        other.retry_at = min(other.retry_at, now)
            return hold

    def waits(self, table: str) -> bool:
        """Held, and not yet due for its next try."""
        with self._lock:
            hold = self._holds.get(table)
            return hold is not None and self._clock() < hold.retry_at

    def due(self) -> list[str]:
        """Held tables whose next try has come."""
        with self._lock:
            now = self._clock()
            return sorted(t for t, hold in self._holds.items() if now >= hold.retry_at)

    def next_retry_in(self) -> float | None:
        """Seconds until the earliest held table's next try (0 when one is due); None when none is held."""
        with self._lock:
            if not self._holds:
                return None
            return max(min(h.retry_at for h in self._holds.values()) - self._clock(), 0.0)

    def held(self) -> dict[str, Hold]:
        with self._lock:
            return dict(self._holds)
