"""The ingest job spec: everything one streaming query needs, as frozen dataclasses.

One job lands one source (topics or a pattern) in one Iceberg table. The spec
is plain data (strings, numbers, tuples), so it hashes, pickles small, and
round-trips through JSON (:func:`job_to_json`, :func:`job_from_json`): that
is how ``python -m ingest --job job.json`` receives it, and what the service
maps its pydantic configuration onto. Invalid combinations raise
:class:`JobSpecError` here, on the driver, before Spark starts.

Kafka client settings come in two dialects because two clients run: the Java
client inside Spark's source (``kafka_properties``, passed as ``kafka.*``
options: SASL/SSL included) and librdkafka in the dead-letter producer and the
lag probe (``client_properties``). Both may hold secrets: never log them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

from ingest.kafka_source.consume import ConsumeSettings
from ingest.tasks.changes import OpField
from ingest.tasks.decode_records import DecodeSpec
from ingest.tasks.decoding import AvroFormat, ConfluentFormat, Format, JsonFormat
from ingest.tasks.routing import RouteSpec, TopicRoute
from table.errors import TableError
from table.partitioning import PartitionSpec, build_partition_spec
from table.schema import Schema
from table.sort_order import UNSORTED_SORT_ORDER, NullOrder, SortDirection, SortField, SortOrder
from table.transforms import parse_transform

if TYPE_CHECKING:  # imported where a catalog is opened: tasks that load this module need none
    from commit.catalog.base import Catalog

BadRecordPolicy = Literal["dead-letter", "fail"]
Pairs = tuple[tuple[str, str], ...]
StartingOffsets: TypeAlias = str | tuple[tuple[str, tuple[tuple[int, int], ...]], ...]

_DURATION = re.compile(r"^\d+(\.\d+)?\s*(ms|s|m|min|h|d)$")
SPARK_KAFKA_API_TIMEOUT_MS = "300000"
"""``default.api.timeout.ms`` of Spark's source's consumers: a task reading when Kafka went away waits
five minutes for it (the Java client's default, one minute, failed the task, and with it the query, when
a broker was stopped or frozen for a minute mid-batch: local mode does not retry a task)."""
SOURCE_READERS = ("spark", "python")
"""``spark``: Spark's Kafka source; ``python``: Floe's (:mod:`ingest.kafka_source`), records never enter the JVM."""
_RESERVED_KAFKA = frozenset(
    {
        "bootstrap.servers",
        "group.id",
        "auto.offset.reset",
        "enable.auto.commit",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
    }
)


class JobSpecError(ValueError):
    """The job spec is inconsistent; the message names the field."""

    def __init__(self, field_name: str, reason: str) -> None:
        self.field = field_name
        self.reason = reason
        super().__init__(f"{field_name}: {reason}")


def as_dict(pairs: Mapping[str, str] | Pairs) -> dict[str, str]:
    """A spec's settings (stored as sorted pairs) as a dict."""
    return dict(pairs.items()) if isinstance(pairs, Mapping) else dict(pairs)


def _pairs(value: Mapping[str, Any] | Pairs | None) -> Pairs:
    """A mapping as sorted (key, str(value)) pairs: hashable and stable."""
    items = (value or {}).items() if isinstance(value, Mapping) or value is None else value
    return tuple(sorted((str(k), str(v)) for k, v in items))


# ---------------------------------------------------------------------------
# Source
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSpec:
    """Where records come from and how they are read: by Spark's Kafka source, or by Floe's
    (``reader: python``, :mod:`ingest.kafka_source`), with the same options.

    ``starting_offsets`` is ``earliest``, ``latest`` or topic -> partition ->
    offset (-2 earliest, -1 latest); it applies only when the checkpoint is
    new (see :func:`ingest.driver.offset_accounting.starting_offsets`). ``max_trigger_delay``
    is a Spark duration such as ``"15m"``. ``max_tasks_per_batch`` caps the
    tasks of a batch of Floe's source (None: see :func:`ingest.driver.stream.python_source_options`).
    """

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    starting_offsets: str | Mapping[str, Mapping[int, int]] | StartingOffsets = "earliest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay: str | None = None
    fail_on_data_loss: bool = True
    max_tasks_per_batch: int | None = None
    kafka_properties: Mapping[str, str] | Pairs = ()
    client_properties: Mapping[str, str] | Pairs = ()
    reader: str = "spark"

    def __post_init__(self) -> None:
        object.__setattr__(self, "topics", tuple(self.topics))
        object.__setattr__(self, "kafka_properties", _pairs(self.kafka_properties))
        object.__setattr__(self, "client_properties", _pairs(self.client_properties))
        object.__setattr__(self, "starting_offsets", _normalize_starting(self.starting_offsets))
        self._check()

    def _check(self) -> None:
        if not self.bootstrap_servers:
            raise JobSpecError("source.bootstrap_servers", "must not be empty")
        if bool(self.topics) == (self.topic_pattern is not None):
            raise JobSpecError("source.topics", "set exactly one of topics and topic_pattern")
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise JobSpecError("source.topic_pattern", f"not a regular expression: {exc}") from None
        for name in ("max_offsets_per_trigger", "min_offsets_per_trigger", "max_tasks_per_batch"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise JobSpecError(f"source.{name}", f"must be a positive integer, got {value!r}")
        low, high = self.min_offsets_per_trigger, self.max_offsets_per_trigger
        if low is not None and high is not None and low > high:
            raise JobSpecError("source.min_offsets_per_trigger", f"exceeds max_offsets_per_trigger ({high})")
        if self.max_trigger_delay is not None and not _DURATION.match(self.max_trigger_delay):
            raise JobSpecError(
                "source.max_trigger_delay", f"expected a duration like '15m', got {self.max_trigger_delay!r}"
            )
        if self.reader not in SOURCE_READERS:
            raise JobSpecError("source.reader", f"expected one of {', '.join(SOURCE_READERS)}, got {self.reader!r}")
        if self.max_tasks_per_batch is not None and self.reader != "python":
            raise JobSpecError("source.max_tasks_per_batch", f"only used with reader 'python', got {self.reader!r}")
        reserved = sorted(_RESERVED_KAFKA & set(as_dict(self.kafka_properties)))
        if reserved:
            raise JobSpecError("source.kafka_properties", f"{reserved} are set by Floe or refused by Spark")

    def reads_topic(self, topic: str) -> bool:
        """Whether the query reads ``topic``: listed, or matched whole by the pattern."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source (``kafka.*`` included). Contains secrets.

        The consumer reads committed records only (``isolation.level=read_committed``) unless the
        properties say otherwise: Kafka's Java consumer defaults to ``read_uncommitted``, which would
        land the records of aborted transactions, where Floe's own source (librdkafka) skips them.
        The Java consumer's calls wait up to :data:`SPARK_KAFKA_API_TIMEOUT_MS` for Kafka, unless the
        properties say otherwise, and so does a task's fetch (``kafkaConsumer.pollTimeoutMs``, else Spark's
        ``spark.network.timeout``, 2 minutes, which failed the task, and the query, under a broker frozen
        for 2 minutes): one setting says how long a task waits out Kafka.
        """
        options = {
            "kafka.isolation.level": "read_committed",
            "kafka.default.api.timeout.ms": SPARK_KAFKA_API_TIMEOUT_MS,
        }
        options.update({f"kafka.{k}": v for k, v in as_dict(self.kafka_properties).items()})
        options["kafka.bootstrap.servers"] = self.bootstrap_servers
        options["kafkaConsumer.pollTimeoutMs"] = options["kafka.default.api.timeout.ms"]
        if self.topic_pattern is not None:
            options["subscribePattern"] = self.topic_pattern
        else:
            options["subscribe"] = ",".join(self.topics)
        options["includeHeaders"] = "true"
        options["failOnDataLoss"] = str(self.fail_on_data_loss).lower()
        for key, value in (
            ("maxOffsetsPerTrigger", self.max_offsets_per_trigger),
            ("minOffsetsPerTrigger", self.min_offsets_per_trigger),
            ("maxTriggerDelay", self.max_trigger_delay),
        ):
            if value is not None:
                options[key] = str(value)
        return options

    def python_source_options(self) -> dict[str, str]:
        """Options of Floe's own source (:mod:`ingest.kafka_source.reader`), as Spark's source names them;
        ``kafka.*`` are librdkafka settings here. Contains secrets."""
        options = {f"kafka.{k}": v for k, v in self.librdkafka_config().items()}
        spark = self.spark_options()
        for key in ("subscribe", "subscribePattern", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if key in spark:
                options[key] = spark[key]
        if self.max_tasks_per_batch is not None:
            options["maxPartitions"] = str(self.max_tasks_per_batch)
        return options

    def consume_settings(self) -> ConsumeSettings:
        """How the tasks of Floe's source read their ranges."""
        return ConsumeSettings(tuple(self.librdkafka_config().items()), self.fail_on_data_loss)

    def librdkafka_config(self) -> dict[str, str]:
        """confluent-kafka settings for Floe's own clients. Contains secrets."""
        return {**as_dict(self.client_properties), "bootstrap.servers": self.bootstrap_servers}

    def starting_offsets_option(self) -> str:
        """The configured ``startingOffsets`` as Spark's option text."""
        value = self.starting_offsets_json()
        return value if isinstance(value, str) else json.dumps(value)

    def starting_offsets_json(self) -> str | dict[str, dict[str, int]]:
        """``earliest``, ``latest`` or topic -> partition (text) -> offset."""
        if isinstance(self.starting_offsets, str):
            return self.starting_offsets
        pairs = cast(tuple[tuple[str, tuple[tuple[int, int], ...]], ...], self.starting_offsets)
        return {t: {str(p): o for p, o in parts} for t, parts in pairs}


def _normalize_starting(value: Any) -> StartingOffsets:
    if isinstance(value, str):
        if value not in ("earliest", "latest"):
            raise JobSpecError("source.starting_offsets", f"expected earliest, latest or a mapping, got {value!r}")
        return value
    items = value.items() if isinstance(value, Mapping) else value
    result = []
    for topic, parts in items:
        part_items = parts.items() if isinstance(parts, Mapping) else parts
        offsets = tuple(sorted((int(p), int(o)) for p, o in part_items))
        if any(p < 0 or o < -2 for p, o in offsets):
            raise JobSpecError("source.starting_offsets", f"topic {topic!r}: partitions >= 0, offsets >= -2")
        result.append((str(topic), offsets))
    return tuple(sorted(result))


# ---------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SortTerm:
    """One sort field: ``transform(column) direction nulls``; nulls default as in Iceberg."""

    column: str
    transform: str = "identity"
    direction: Literal["asc", "desc"] = "asc"
    null_order: Literal["nulls-first", "nulls-last"] | None = None


@dataclass(frozen=True)
class TableSpec:
    """The table, and how records land in it.

    ``decode`` holds the table schema (its identifier fields are the key),
    the value format and the mode. ``partition`` is ``(transform, column)``
    pairs with Iceberg transform names (``day``, ``bucket[16]``,
    ``truncate[4]``, ``identity``...). ``properties`` are set when Floe creates
    the table; ``write.target-file-size-bytes`` and the Parquet settings are
    read from the table itself on every batch.
    """

    identifier: str
    decode: DecodeSpec
    partition: tuple[tuple[str, str], ...] = ()
    sort_order: tuple[SortTerm, ...] = ()
    properties: Mapping[str, str] | Pairs = ()
    location: str | None = None
    bad_records: BadRecordPolicy = "fail"
    dead_letter_topic: str | None = None
    format_version: int = 2  # of a table Floe creates; an existing table must be at least this

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition", tuple((str(t), str(c)) for t, c in self.partition))
        object.__setattr__(self, "sort_order", tuple(self.sort_order))
        object.__setattr__(self, "properties", _pairs(self.properties))
        if "." not in self.identifier:
            raise JobSpecError("table.identifier", f"expected namespace.table, got {self.identifier!r}")
        if self.bad_records not in ("dead-letter", "fail"):
            raise JobSpecError("table.bad_records", f"expected 'dead-letter' or 'fail', got {self.bad_records!r}")
        if self.format_version not in (2, 3):
            raise JobSpecError("table.format_version", f"expected 2 or 3, got {self.format_version!r}")
        if (self.bad_records == "dead-letter") != (self.dead_letter_topic is not None):
            raise JobSpecError("table.dead_letter_topic", "set it exactly when bad_records is 'dead-letter'")
        version = dict(self.properties).get("format-version")
        if version is not None and version != str(self.format_version):
            raise JobSpecError(
                "table.properties['format-version']", f"{version!r} conflicts with format_version {self.format_version}"
            )
        try:
            self.partition_spec()
            self.iceberg_sort_order()
        except TableError as exc:
            raise JobSpecError("table.partition", str(exc)) from None

    @property
    def mode(self) -> str:
        return self.decode.mode

    def schema(self) -> Schema:
        return self.decode.table_schema()

    def partition_spec(self, schema: Schema | None = None) -> PartitionSpec:
        return build_partition_spec(schema or self.schema(), list(self.partition))

    def iceberg_sort_order(self, schema: Schema | None = None) -> SortOrder:
        schema = schema or self.schema()
        if not self.sort_order:
            return UNSORTED_SORT_ORDER
        fields = tuple(
            SortField(
                schema.find_field(t.column).field_id,
                parse_transform(t.transform),
                SortDirection(t.direction),
                NullOrder(t.null_order) if t.null_order else None,
            )
            for t in self.sort_order
        )
        order = SortOrder(1, fields)
        order.check_compatible(schema)
        return order

    def key_fields(self) -> tuple[str, ...]:
        """The key columns (dotted paths): the decode spec's, else the schema's identifier fields."""
        if self.decode.key_fields:
            return self.decode.key_fields
        schema = self.schema()
        return tuple(schema.find_column_name(i) for i in schema.identifier_field_ids)


# ---------------------------------------------------------------------------
# Trigger, catalog, job
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TriggerSpec:
    """A micro-batch every ``processing_time_seconds``, or everything available now and stop."""

    processing_time_seconds: float = 60.0
    available_now: bool = False

    def __post_init__(self) -> None:
        if self.processing_time_seconds <= 0:
            raise JobSpecError("trigger.processing_time_seconds", "must be positive")


@dataclass(frozen=True)
class CatalogSpec:
    """The catalog: Floe's SQL catalog (``sqlite://``, ``postgresql://``) or a REST catalog (``http(s)://``,
    with its ``headers``, e.g. a bearer token, ``prefix``, OAuth2 client ``credential`` and
    ``access_delegation``: :class:`commit.catalog.rest.options.RestOptions`). The uri, headers and credential may
    hold secrets: never log them."""

    uri: str
    warehouse: str
    name: str = "floe"
    headers: Pairs = field(default=(), repr=False)
    prefix: str | None = None
    credential: str | None = field(default=None, repr=False)
    oauth2_server_uri: str | None = None
    scope: str = "catalog"
    access_delegation: str | None = None
    request_timeout_seconds: float = 60.0
    ca_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", _pairs(self.headers))

    def open(self, create: bool = True) -> Catalog:
        """The catalog this names, opened."""
        from commit.catalog import RestOptions, open_catalog

        rest = RestOptions(
            dict(self.headers),
            self.prefix,
            self.credential,
            self.oauth2_server_uri,
            self.scope,
            self.access_delegation,
            self.request_timeout_seconds,
            self.ca_file,
        )
        return open_catalog(self.uri, self.warehouse, self.name, create=create, rest=rest)


@dataclass(frozen=True)
class IngestJob:
    """One streaming query: source -> table, with its checkpoint.

    ``spark_conf`` applies when ``python -m ingest`` builds the session.
    ``lag_interval_seconds`` is how often the lag and freshness gauges are
    refreshed between batches. ``grace_seconds`` bounds how long a graceful
    stop waits for the running batch before cancelling it.
    ``commit_interval_seconds``: in a shared query, the table commits at most
    once per this many seconds (see ``ingest.driver.commit_clock``); None:
    every batch.
    """

    source: SourceSpec
    table: TableSpec
    catalog: CatalogSpec
    checkpoint_location: str
    trigger: TriggerSpec = field(default_factory=TriggerSpec)
    query_name: str | None = None
    spark_conf: Mapping[str, str] | Pairs = ()
    lag_interval_seconds: float = 30.0
    grace_seconds: float = 300.0
    commit_interval_seconds: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "spark_conf", _pairs(self.spark_conf))
        if self.commit_interval_seconds is not None and self.commit_interval_seconds <= 0:
            raise JobSpecError("commit_interval_seconds", f"must be positive, got {self.commit_interval_seconds}")
        if not self.checkpoint_location:
            raise JobSpecError("checkpoint_location", "must not be empty")
        dlq = self.table.dead_letter_topic
        if dlq is not None and dlq in self.source.topics:
            raise JobSpecError("table.dead_letter_topic", f"{dlq!r} is also a source topic")
        for ref in self.table.decode.skip_records:
            if not self.source.reads_topic(ref.topic):
                raise JobSpecError(
                    "table.decode.skip_records",
                    f"{str(ref)!r} names topic {ref.topic!r}, which the source does not read",
                )

    @property
    def name(self) -> str:
        return self.query_name or f"floe-ingest-{self.table.identifier}"

    @property
    def table_ids(self) -> tuple[str, ...]:
        return (self.table.identifier,)


# ---------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------


def job_to_json(job: IngestJob) -> dict[str, Any]:
    """The job as a JSON object (secrets included: protect the file)."""
    source, table = job.source, job.table
    return {
        "source": {
            "bootstrap_servers": source.bootstrap_servers,
            "topics": list(source.topics),
            "topic_pattern": source.topic_pattern,
            "starting_offsets": source.starting_offsets_json(),
            "max_offsets_per_trigger": source.max_offsets_per_trigger,
            "min_offsets_per_trigger": source.min_offsets_per_trigger,
            "max_trigger_delay": source.max_trigger_delay,
            "fail_on_data_loss": source.fail_on_data_loss,
            "max_tasks_per_batch": source.max_tasks_per_batch,
            "kafka_properties": as_dict(source.kafka_properties),
            "client_properties": as_dict(source.client_properties),
            "reader": source.reader,
        },
        "table": {
            "identifier": table.identifier,
            "decode": decode_spec_to_json(table.decode),
            "partition": [list(p) for p in table.partition],
            "sort_order": [vars(t) for t in table.sort_order],
            "properties": as_dict(table.properties),
            "location": table.location,
            "bad_records": table.bad_records,
            "dead_letter_topic": table.dead_letter_topic,
            "format_version": table.format_version,
        },
        "catalog": vars(job.catalog),
        "checkpoint_location": job.checkpoint_location,
        "trigger": vars(job.trigger),
        "query_name": job.query_name,
        "spark_conf": as_dict(job.spark_conf),
        "lag_interval_seconds": job.lag_interval_seconds,
        "grace_seconds": job.grace_seconds,
        "commit_interval_seconds": job.commit_interval_seconds,
    }


def job_from_json(obj: Mapping[str, Any]) -> IngestJob:
    """The job of :func:`job_to_json`; raises :class:`JobSpecError` naming the bad field."""
    try:
        table = dict(obj["table"])
        decode = decode_spec_from_json(table.pop("decode"))
        sort_order = tuple(SortTerm(**t) for t in table.pop("sort_order", ()))
        partition = tuple(tuple(p) for p in table.pop("partition", ()))
        return IngestJob(
            source=SourceSpec(**obj["source"]),
            table=TableSpec(decode=decode, sort_order=sort_order, partition=partition, **table),
            catalog=CatalogSpec(**obj["catalog"]),
            checkpoint_location=obj["checkpoint_location"],
            trigger=TriggerSpec(**obj.get("trigger", {})),
            query_name=obj.get("query_name"),
            spark_conf=obj.get("spark_conf", {}),
            lag_interval_seconds=obj.get("lag_interval_seconds", 30.0),
            grace_seconds=obj.get("grace_seconds", 300.0),
            commit_interval_seconds=obj.get("commit_interval_seconds"),
        )
    except KeyError as exc:
        raise JobSpecError(str(exc.args[0]), "missing") from None
    except TypeError as exc:
        raise JobSpecError("job", str(exc)) from None


def decode_spec_to_json(spec: DecodeSpec) -> dict[str, Any]:
    op = spec.op_field
    return {
        "schema": json.loads(spec.schema),  # type: ignore[arg-type]  # __post_init__ stores the schema as JSON text
        "format": _format_to_json(spec.format),
        "metadata_columns": as_dict(spec.metadata_columns),
        "mode": spec.mode,
        "op_field": None
        if op is None
        else {
            "name": op.name,
            "inserts": list(op.inserts),
            "updates": list(op.updates),
            "deletes": list(op.deletes),
            "envelope": op.envelope,
        },
        "key_fields": list(spec.key_fields),
        "key_format": spec.key_format,
        "epoch_unit": spec.epoch_unit,
        "skip_records": [str(ref) for ref in spec.skip_records],
        "route": None if spec.route is None else _route_to_json(spec.route),
    }


def _route_to_json(route: RouteSpec) -> dict[str, Any]:
    return {
        "field": route.field,
        "values": sorted(route.values),
        "topics": [
            {"topic": t.topic, "elsewhere": sorted(t.elsewhere), "owns_unrouted": t.owns_unrouted} for t in route.topics
        ],
    }


def _route_from_json(obj: Mapping[str, Any]) -> RouteSpec:
    topics = tuple(TopicRoute(t["topic"], frozenset(t["elsewhere"]), t["owns_unrouted"]) for t in obj["topics"])
    return RouteSpec(obj["field"], frozenset(obj["values"]), topics)


def decode_spec_from_json(obj: Mapping[str, Any]) -> DecodeSpec:
    from table.schema import schema_from_json

    values = dict(obj)
    values["schema"] = schema_from_json(values["schema"])
    values["format"] = _format_from_json(values.get("format") or {"type": "json"})
    op = values.get("op_field")
    values["op_field"] = None if op is None else OpField(**op)
    values["key_fields"] = tuple(values.get("key_fields", ()))
    values["skip_records"] = tuple(values.get("skip_records", ()))
    route = values.get("route")
    values["route"] = None if route is None else _route_from_json(route)
    return DecodeSpec(**values)


def _format_to_json(fmt: Format) -> dict[str, Any]:
    if isinstance(fmt, JsonFormat):
        return {"type": "json"}
    if isinstance(fmt, AvroFormat):
        return {"type": "avro", "reader_schema": fmt.reader_schema, "writer_schema": fmt.writer_schema}
    return {"type": "confluent-avro", **vars(fmt)}


def _format_from_json(obj: Mapping[str, Any]) -> Format:
    values = dict(obj)
    kind = values.pop("type")
    if kind == "json":
        return JsonFormat()
    if kind == "avro":
        return AvroFormat(**values)
    if kind == "confluent-avro":
        return ConfluentFormat(**values)
    raise JobSpecError("table.decode.format.type", f"expected json, avro or confluent-avro, got {kind!r}")


def with_decode_schema(table: TableSpec, schema: Schema) -> TableSpec:
    """``table`` decoding into ``schema`` (the table's own, with its field ids)."""
    return replace(table, decode=replace(table.decode, schema=schema))


# ---------------------------------------------------------------------------
# One query, many tables
# ---------------------------------------------------------------------------


SHARED_CHECKPOINT = "shared-query"
"""The directory of the shared query's checkpoint under the checkpoint root."""


@dataclass(frozen=True)
class SharedIngestJob:
    """One streaming query that lands many tables: each table's own job, all read by Floe's source
    through one checkpoint, one trigger and one catalog (:mod:`ingest.driver.shared_batch`).

    Each job keeps its source's topics (the table's share of every batch), its table and its
    starting offsets; the query reads the union of their topics. ``commit_threads`` bounds the
    tables written and committed at once.
    """

    jobs: tuple[IngestJob, ...]
    commit_threads: int = 8
    query_name: str = "floe-ingest"

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        if not self.jobs:
            raise JobSpecError("jobs", "a shared query needs at least one table")
        if self.commit_threads < 1:
            raise JobSpecError("commit_threads", f"must be at least 1, got {self.commit_threads}")
        first = self.jobs[0]
        for job in self.jobs:
            if job.source.reader != "python":
                raise JobSpecError("source.reader", "a shared query reads through Floe's source ('python')")
            for name in ("checkpoint_location", "trigger", "catalog"):
                if getattr(job, name) != getattr(first, name):
                    raise JobSpecError(name, f"{job.table.identifier} differs from {first.table.identifier}")
            if job.source.bootstrap_servers != first.source.bootstrap_servers:
                raise JobSpecError("source.bootstrap_servers", "the tables of a shared query read one Kafka cluster")

    @property
    def name(self) -> str:
        return self.query_name

    @property
    def table_ids(self) -> tuple[str, ...]:
        return tuple(job.table.identifier for job in self.jobs)

    @property
    def checkpoint_location(self) -> str:
        return self.jobs[0].checkpoint_location

    @property
    def trigger(self) -> TriggerSpec:
        return self.jobs[0].trigger

    @property
    def catalog(self) -> CatalogSpec:
        return self.jobs[0].catalog

    @property
    def grace_seconds(self) -> float:
        return self.jobs[0].grace_seconds

    @property
    def lag_interval_seconds(self) -> float:
        return self.jobs[0].lag_interval_seconds

    @property
    def source(self) -> SourceSpec:
        """What the query reads: every table's topics (a pattern when some table has one), with the first
        table's client settings; where each table starts is its own (see ``ingest.driver.shared_query``)."""
        listed = sorted({t for job in self.jobs for t in job.source.topics})
        patterns = sorted({job.source.topic_pattern for job in self.jobs if job.source.topic_pattern is not None})
        if not patterns:
            return replace(self.jobs[0].source, topics=tuple(listed), topic_pattern=None, starting_offsets="earliest")
        union = "|".join([*(f"(?:{p})" for p in patterns), *(re.escape(t) for t in listed)])
        return replace(self.jobs[0].source, topics=(), topic_pattern=union, starting_offsets="earliest")
