"""New topics for template tables while ``floe ingest`` runs.

A template entry (``identifier: raw.{topic}`` with ``topic_pattern``) is expanded over the topics Kafka has
when ingest starts. :class:`TopicWatch` asks Kafka again every ``ingest.topic_refresh`` and names the topics
that match a template and have no table yet. A topic whose table cannot be built yet (its registry subject has
no schema: the topic was created before its first producer registered one) waits, with one line, and is
asked about again on the next round.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ingest.job import JobSpecError
from service.config import ConfigError, FloeConfig, TableConfig
from service.jobs import build_jobs

log = logging.getLogger("floe.ingest")


class TopicWatch:
    """Which topics matching a template table are new since the last look."""

    def __init__(
        self,
        config: FloeConfig,
        known: Iterable[str],
        list_topics: Callable[[], list[str]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._known = set(known)
        self._waiting: set[str] = set()
        self._list = list_topics
        self._clock = clock
        self._every = config.ingest.topic_refresh.total_seconds()
        self._next = clock() + self._every

    @staticmethod
    def of(config: FloeConfig, known: Iterable[str], list_topics: Callable[[], list[str]]) -> TopicWatch | None:
        """The watch of a configuration with template tables, else None."""
        return TopicWatch(config, known, list_topics) if any(t.is_template for t in config.tables) else None

    def new_topics(self) -> list[str]:
        """The topics to add now (at most once per refresh interval): matching, new, and with a buildable table."""
        if self._clock() < self._next:
            return []
        self._next = self._clock() + self._every
        try:
            topics = self._list()
        except Exception as error:  # noqa: BLE001 - Kafka away: the running queries say so; look again later
            log.info("could not list topics for template tables (%s); trying again in %.0fs", error, self._every)
            return []
        candidates = sorted(t for t in topics if t not in self._known and self._matches(t))
        ready = [t for t in candidates if self._buildable(t)]
        self._known.update(ready)
        return ready

    @property
    def templates(self) -> list[TableConfig]:
        return [t for t in self._config.tables if t.is_template]

    def _matches(self, topic: str) -> bool:
        return any(table.is_template and table.reads_topic(topic) for table in self._config.tables)

    def _buildable(self, topic: str) -> bool:
        tables = [t.for_topic(topic) for t in self._config.tables if t.is_template and t.reads_topic(topic)]
        try:
            build_jobs(self._config.model_copy(update={"tables": tables}))
        except (ConfigError, JobSpecError) as error:
            if topic not in self._waiting:
                self._waiting.add(topic)
                log.warning("new topic %s matches a template table, which waits: %s", topic, error)
            return False
        self._waiting.discard(topic)
        return True
