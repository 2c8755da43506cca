"""What Kafka holds now: the source's topics, their partitions and watermarks.

One room for the lag probe (:class:`ingest.driver.metrics.LagProbe`) and the Python
source's planner (:mod:`ingest.kafka_source.reader`). Topics are the listed
ones that exist, or every topic the pattern matches whole (as Java's
``Pattern.matches``, which Spark's ``subscribePattern`` uses). Watermarks
follow the client's ``isolation.level``: under ``read_committed``
(librdkafka's default) the high one is the last stable offset.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ingest.kafka_source.client_log import LibrdkafkaLog
from ingest.kafka_source.offsets import Marks
from ingest.kafka_source.outage import is_outage

log = logging.getLogger("floe.ingest")
T = TypeVar("T")
_EARLIEST, _LATEST = -2, -1  # ListOffsets' "timestamps" that ask for a partition's first and next offsets


class TopicsNotFound(LookupError):
    """Kafka answered, without some of the topics a source lists: nothing is set up for them."""


class TopicWatermarks:
    """A consumer used only for metadata and watermarks (it never joins a group or reads a record).

    After :attr:`REBUILD_AFTER` failed requests in a row the consumer is closed and the next request
    makes a new one: a client that lived through a broker restart or freeze can go on failing
    ("failed to get metadata") against a broker that answers every new client, and a new one asks
    from scratch.
    """

    REBUILD_AFTER = 3

    def __init__(
        self,
        client: Mapping[str, str],
        topics: tuple[str, ...],
        pattern: str | None,
        timeout_s: float = 10.0,
        name: str = "floe",
    ) -> None:
        self._settings = {
            **client,
            "group.id": f"{name}-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            # librdkafka's own reconnect chatter would repeat every second; callers
            # report an unreachable broker themselves, once per attempt.
            "log_level": 2,
            "logger": LibrdkafkaLog(),
        }
        self._topics = topics
        self._pattern = re.compile(pattern) if pattern is not None else None
        self._timeout = timeout_s
        self._consumer: Any = None
        self._failures = 0

    def topic_partitions(self) -> dict[str, list[int]]:
        """The source's topics (the listed ones, or those the pattern matches) and partitions."""
        return self._counted(self._topic_partitions)

    def _topic_partitions(self) -> dict[str, list[int]]:
        self._serve_events()
        metadata = self._client().list_topics(timeout=self._timeout)
        if self._pattern is not None:
            names = [t for t in metadata.topics if self._pattern.fullmatch(t)]
        else:
            names = [t for t in self._topics if t in metadata.topics]
        return {t: sorted(metadata.topics[t].partitions) for t in names}

    def require_topics(self, bootstrap: str) -> None:
        """:class:`TopicsNotFound` unless every listed topic exists (a pattern may match none yet)."""
        found = self.topic_partitions()
        missing = [t for t in self._topics if t not in found]
        if missing and self._pattern is None:
            raise TopicsNotFound(f"kafka {bootstrap}: topics not found: {', '.join(missing)}")

    def watermarks(self) -> Marks:
        """topic -> partition -> (low, high) watermark."""
        return self._counted(self._watermarks)

    def _watermarks(self) -> Marks:
        from confluent_kafka import TopicPartition

        partitions = [TopicPartition(t, p) for t, ps in self._topic_partitions().items() for p in ps]
        lows = self._list_offsets(partitions, _EARLIEST)
        highs = self._list_offsets(partitions, _LATEST)
        result: dict[str, dict[int, tuple[int, int]]] = {}
        for (topic, partition), low in lows.items():
            result.setdefault(topic, {})[partition] = (low, highs[(topic, partition)])
        return result

    def _list_offsets(self, partitions: list[Any], which: int) -> dict[tuple[str, int], int]:
        """Every partition's earliest or latest offset, in one ListOffsets request per leader, riding out
        retriable errors within the timeout.

        One request for all partitions, not one per partition, so that a probe of hundreds of topics costs
        what a probe of one does. ``offsets_for_times`` with Kafka's "timestamps" -2 and -1 asks what
        ``get_watermark_offsets`` asks, under the client's ``isolation.level``. A partition whose leader is
        moving (just after the topic was created, or while a broker restarts) answers "not leader" for a
        moment; that is a retry, not a failed batch or start.
        """
        from confluent_kafka import KafkaException, TopicPartition

        if not partitions:
            return {}
        deadline, pause = time.monotonic() + self._timeout, 0.05
        while True:
            asked = [TopicPartition(p.topic, p.partition, which) for p in partitions]
            try:
                answers = self._client().offsets_for_times(asked, timeout=self._timeout)
                failed = next((a for a in answers if a.error is not None), None)
                if failed is not None:
                    raise KafkaException(failed.error)
                return {(a.topic, a.partition): a.offset for a in answers}
            except KafkaException as exc:
                error = exc.args[0]
                if not is_outage(error) or time.monotonic() + pause > deadline:
                    raise
                log.debug("watermarks of %d partitions: %s; retrying", len(partitions), error.str())
                time.sleep(pause)
                pause = min(pause * 2, 1.0)

    def _serve_events(self) -> None:
        """Take the error events and log lines queued since the last request (a connection lost...):
        this consumer is never polled otherwise, and they would pile up for the life of the process.
        Its callers learn of an outage from their requests, so the events themselves are dropped."""
        while self._client().consume(num_messages=500, timeout=0):
            pass

    def _counted(self, request: Callable[[], T]) -> T:
        """``request()``, counting the failures in a row; the consumer is made anew after too many."""
        from confluent_kafka import KafkaException

        try:
            result = request()
        except KafkaException:
            self._failures += 1
            if self._failures >= self.REBUILD_AFTER:
                log.debug("kafka: %d failed requests in a row; making a new client", self._failures)
                self.close()
            raise
        self._failures = 0
        return result

    def _client(self) -> Any:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(self._settings)
        return self._consumer

    def close(self) -> None:
        consumer, self._consumer, self._failures = self._consumer, None, 0
        if consumer is not None:
            consumer.close()
