"""The root of the model tree (:class:`FloeConfig`), its small sections, and the rules across sections.

Both containers of a deployment (``floe ingest`` and ``floe compact``) read
the same tree, so rules that span sections (tables sharing topics, readiness
against the trigger) are checked here once, before any work starts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, model_validator

from ingest.job import SHARED_CHECKPOINT
from runtime.logging import LOG_FORMATS, LOG_LEVELS
from service.config.catalog import CatalogConfig
from service.config.compactor import CompactionConfig
from service.config.fields import Duration, Location, Section, UpperCased, format_duration
from service.config.kafka import KafkaConfig
from service.config.problems import ConfigError, Problem, invalid, raise_all
from service.config.spark import SparkConfig
from service.config.storage import StorageConfig
from service.config.tables import TableConfig


class TriggerConfig(Section):
    """When micro-batches run."""

    processing_time: Duration = Field(timedelta(seconds=60), description="Interval between micro-batch starts.")
    available_now: bool = Field(
        False, description="Process what is in Kafka now, then stop (back-fills); excludes `processing_time`."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> TriggerConfig:
        if self.available_now and "processing_time" in self.model_fields_set:
            raise invalid(("available_now", "cannot be combined with processing_time; set one of them"))
        return self


class HttpConfig(Section):
    """The ops endpoint (`/metrics`, `/healthz`, `/readyz`) of each component."""

    host: str = Field("0.0.0.0", description="Address to listen on.")
    ingest_port: int = Field(9464, ge=0, le=65535, description="Port of `floe ingest` (0: any free port).")
    compact_port: int = Field(
        9465,
        ge=0,
        le=65535,
        description="Port of `floe compact`; differs from ingest_port because both share a pod's network.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> HttpConfig:
        if self.ingest_port == self.compact_port != 0:
            raise invalid(
                (
                    "compact_port",
                    f"must differ from ingest_port (both containers share the pod's network), got {self.compact_port}",
                )
            )
        return self

    def port_for(self, component: str) -> int:
        return self.ingest_port if component == "ingest" else self.compact_port


class IngestConfig(Section):
    """How `floe ingest` maps tables onto streaming queries."""

    query: Literal["per-table", "shared"] = Field(
        "per-table",
        description="`per-table`: one streaming query per table, each with its own checkpoint. `shared`: one query "
        "reads every table's topics through Floe's source (`kafka.reader: python`) and lands each micro-batch in "
        "every table it feeds, one commit per table; its checkpoint is `<checkpoint_location>/shared-query`.",
    )
    commit_threads: int = Field(
        8, ge=1, le=256, description="With `query: shared`: tables written and committed at once in a micro-batch."
    )
    topic_refresh: Duration = Field(
        timedelta(seconds=30),
        description="How often a template table (`{topic}` in its identifier) looks for new topics its pattern "
        "matches while ingest runs; each gets its table (`per-table`: a query of its own; `shared`: the shared "
        "query stops after its batch and starts again with it).",
    )


class ReadinessConfig(Section):
    """What `/readyz` of the ingest component requires."""

    max_commit_age: Duration = Field(
        timedelta(minutes=15), description="Not ready when the last commit is older than this."
    )


class FloeConfig(Section):
    """The whole configuration of one Floe deployment."""

    kafka: KafkaConfig = Field(description="Kafka connection and read settings.")
    catalog: CatalogConfig = Field(description="Iceberg catalog and warehouse.")
    tables: list[TableConfig] = Field(
        min_length=1, description="Tables to land (one streaming query each, or one for all: `ingest.query`)."
    )
    checkpoint_location: Location = Field(
        description="Spark checkpoint root; each table's query uses `<root>/<identifier>`, a shared query "
        "`<root>/shared-query`."
    )
    trigger: TriggerConfig = Field(default_factory=TriggerConfig, description="Micro-batch trigger.")
    spark: SparkConfig = Field(default_factory=SparkConfig, description="Where Spark runs, and its own settings.")
    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="Object-store settings of the warehouse and the checkpoints."
    )
    compaction: CompactionConfig = Field(default_factory=CompactionConfig, description="Compactor settings.")
    ingest: IngestConfig = Field(default_factory=IngestConfig, description="Streaming queries of `floe ingest`.")
    http: HttpConfig = Field(default_factory=HttpConfig, description="Ops HTTP endpoint.")
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig, description="Readiness rules.")
    log_level: Annotated[Literal[LOG_LEVELS], UpperCased] = Field(  # type: ignore[valid-type]  # a Literal built from a tuple of names
        "INFO", description="Log level. Tracebacks are logged at DEBUG only; otherwise a failure is one line."
    )
    log_format: Literal[LOG_FORMATS] = Field(  # type: ignore[valid-type]  # a Literal built from a tuple of names
        "auto",
        description="`text` (one readable line per record), `json` (one JSON object per line), "
        "or `auto`: text when stderr is a terminal, JSON otherwise.",
    )

    def table(self, identifier: str) -> TableConfig:
        """The table with this identifier; KeyError names the known ones."""
        for table in self.tables:
            if table.identifier == identifier:
                return table
        raise KeyError(
            f"no table {identifier!r} in the configuration (tables: {', '.join(t.identifier for t in self.tables)})"
        )

    def with_tables_per_topic(self, topics: list[str]) -> FloeConfig:
        """The configuration with each template table (``{topic}`` in its identifier) replaced by a table per
        topic of ``topics`` its pattern matches, in name order; :class:`ConfigError` when two tables come out
        with one name. Unchanged without templates."""
        if not any(table.is_template for table in self.tables):
            return self
        tables: list[TableConfig] = []
        for table in self.tables:
            if not table.is_template:
                tables.append(table)
                continue
            tables += [table.for_topic(t) for t in sorted(topics) if table.reads_topic(t)]
        clashes = [
            f"{message} (tables from templates count too: {', '.join(t.identifier for t in self.tables)})"
            for _, message in _duplicate_tables(tables)
        ]
        if clashes:
            raise ConfigError("tables", clashes)
        if not tables:
            raise ConfigError("tables", ["no topic matches the topic_pattern of any table: nothing to land"])
        return self.model_copy(update={"tables": tables})

    @property
    def compactor_spark(self) -> SparkConfig:
        """The compactor's Spark settings: its own, else the ingest's."""
        return self.compaction.spark or self.spark

    def checkpoint_for(self, table: TableConfig) -> str:
        """The checkpoint of the query that lands ``table``: its own, or the shared query's."""
        if self.ingest.query == "shared":
            return f"{self.checkpoint_location}/{SHARED_CHECKPOINT}"
        return f"{self.checkpoint_location}/{table.identifier}"

    @model_validator(mode="after")
    def _coherent(self) -> FloeConfig:
        raise_all(
            [
                *_duplicate_tables(self.tables),
                *_shared_topics(self.tables),
                *_route_field_clashes(self.tables),
                *_dead_letter_clashes(self.tables),
                *_readiness_problems(self.trigger, self.readiness),
                *_unread_starting_offsets(self.kafka, self.tables),
                *_shared_query_problems(self.ingest, self.kafka),
                *_commit_interval_problems(self.ingest, self.tables, self.readiness),
            ]
        )
        return self


def _readiness_problems(trigger: TriggerConfig, readiness: ReadinessConfig) -> list[Problem]:
    """A streaming query commits once per trigger, so a shorter age would flap between batches."""
    interval = trigger.processing_time
    if trigger.available_now or readiness.max_commit_age > interval:
        return []
    return [
        (
            "readiness.max_commit_age",
            f"must be longer than trigger.processing_time ({format_duration(interval)}), "
            f"got {format_duration(readiness.max_commit_age)!r}",
        )
    ]


def _shared_query_problems(ingest: IngestConfig, kafka: KafkaConfig) -> list[Problem]:
    if ingest.query == "shared" and kafka.reader != "python":
        return [
            ("ingest.query", f"'shared' reads through Floe's source; set kafka.reader: python (got {kafka.reader})")
        ]
    return []


def _commit_interval_problems(
    ingest: IngestConfig, tables: list[TableConfig], readiness: ReadinessConfig
) -> list[Problem]:
    """A commit interval needs the shared query, and must be shorter than the age `/readyz` calls late."""
    problems: list[Problem] = []
    for i, table in enumerate(tables):
        interval = table.commit_interval
        if interval is None:
            continue
        if ingest.query != "shared":
            problems.append(
                (f"tables[{i}].commit_interval", "only a shared query commits by interval; set ingest.query: shared")
            )
        elif interval >= readiness.max_commit_age:
            problems.append(
                (
                    f"tables[{i}].commit_interval",
                    f"must be shorter than readiness.max_commit_age ({format_duration(readiness.max_commit_age)}), "
                    f"got {format_duration(interval)!r}",
                )
            )
    return problems


def _unread_starting_offsets(kafka: KafkaConfig, tables: list[TableConfig]) -> list[Problem]:
    if not isinstance(kafka.starting_offsets, dict):
        return []
    listed = {t for table in tables for t in table.source_topics}
    return [
        (f"kafka.starting_offsets.{topic}", f"topic {topic!r} is not listed in any table's topics")
        for topic in kafka.starting_offsets
        if topic not in listed
    ]


def _duplicate_tables(tables: list[TableConfig]) -> Iterator[Problem]:
    first: dict[str, int] = {}
    for i, table in enumerate(tables):
        if table.identifier in first:
            yield (
                f"tables[{i}].identifier",
                f"{table.identifier!r} is already used by tables[{first[table.identifier]}]",
            )
        first.setdefault(table.identifier, i)


def _readers(tables: list[TableConfig], topic: str) -> list[int]:
    """Indexes of the tables that read ``topic`` (listed, or matched by their pattern)."""
    return [
        i
        for i, t in enumerate(tables)
        if topic in t.source_topics or (t.topic_pattern is not None and re.fullmatch(t.topic_pattern, topic))
    ]


def _shared_topics(tables: list[TableConfig]) -> Iterator[Problem]:
    for i, table in enumerate(tables):
        for j, topic in enumerate(table.source_topics):
            others = [k for k in _readers(tables, topic) if k != i]
            if others and not all(tables[k].share_topics or tables[k].route for k in [i, *others]):
                names = ", ".join(f"tables[{k}] ({tables[k].identifier})" for k in others)
                yield (
                    f"tables[{i}].topics[{j}]",
                    f"topic {topic!r} is also read by {names}; set share_topics: true or a route on each of them "
                    "to allow it",
                )


def _route_field_clashes(tables: list[TableConfig]) -> Iterator[Problem]:
    """A topic's routed tables all route by one field: else one record could be taken by none, or by two owners."""
    first: dict[str, int] = {}
    for i, table in enumerate(tables):
        if table.route is None:
            continue
        for topic in table.source_topics:
            k = first.setdefault(topic, i)
            route = tables[k].route
            assert route is not None
            if route.field != table.route.field:
                yield (
                    f"tables[{i}].route.field",
                    f"topic {topic!r} is routed by {route.field!r} in tables[{k}] ({tables[k].identifier}); "
                    f"a topic's tables route by one field, got {table.route.field!r}",
                )


def _dead_letter_clashes(tables: list[TableConfig]) -> Iterator[Problem]:
    for i, table in enumerate(tables):
        topic = table.dead_letter_topic
        if topic is not None and (readers := _readers(tables, topic)):
            yield (
                f"tables[{i}].dead_letter_topic",
                f"topic {topic!r} is a source of tables[{readers[0]}]; dead letters would be read back",
            )
