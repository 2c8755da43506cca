"""librdkafka's own log lines, told as Floe's: in Floe's format, and each kind at most once a minute.

librdkafka logs a failed connection at every reconnect, every 0.1 to 10 s per
broker, and a consumer kept idle in a worker's pool queues its lines until its
next poll. So one broker outage reached the log as hundreds of identical lines
per task, printed raw by Python's last-resort handler in a Spark Python worker,
where no logging was configured. Outages themselves are reported by Floe, in
words (:mod:`.outage`); what librdkafka adds is kept, once per kind a minute,
with the count of the lines held back.

Every librdkafka client Floe makes (the source's tasks and planner, the lag
probe, the dead-letter producer) is given a :class:`LibrdkafkaLog` as its
``logger`` setting.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from runtime.logging import configure_logging, floe_handlers

# What differs between repeats of one kind of line: timings, counts, ports, ids.
_VOLATILE = re.compile(r"\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)|\d+")
_MAX_KINDS = 1000  # kinds remembered; beyond this the oldest are forgotten (a line may then repeat early)


def worker_logging() -> None:
    """Floe's log format in a Spark Python worker (the source's planner, a task), where the driver's
    configuration does not reach: configured once, at WARNING, before the worker's first line."""
    if not floe_handlers():
        configure_logging("WARNING")


class LibrdkafkaLog:
    """What confluent-kafka's ``logger`` setting is given: it calls :meth:`log` once per librdkafka line.

    A line whose kind (the line without its numbers) was logged less than ``every_s`` ago is held
    back and counted; the next line of that kind says how many were.
    """

    def __init__(
        self,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger | None = None,
        configure: Callable[[], None] = worker_logging,
    ) -> None:
        self._every_s = every_s
        self._clock = clock
        self._logger = logger or logging.getLogger("floe.librdkafka")
        self._configure = configure
        self._due: dict[tuple[int, str], float] = {}
        self._held: dict[tuple[int, str], int] = {}

    def log(self, level: int, msg: str, *args: object) -> None:
        text = msg % args if args else msg
        kind = (level, _VOLATILE.sub("#", text))
        now = self._clock()
        if now < self._due.get(kind, float("-inf")):
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        if kind not in self._due and len(self._due) >= _MAX_KINDS:
            oldest = next(iter(self._due))
            self._due.pop(oldest)
            self._held.pop(oldest, None)
        self._due[kind] = now + self._every_s
        held = self._held.pop(kind, 0)
        if held:
            text += f" ({held} more like it in the last {self._every_s:.0f}s)"
        self._configure()
        self._logger.log(level, "%s", text)
