"""The configuration as ingest jobs: each ``tables[]`` entry, with the ``kafka``,
``catalog``, ``trigger`` and ``checkpoint_location`` sections, becomes an
:class:`ingest.job.IngestJob`.

``floe ingest`` runs these jobs, and ``floe check`` compares the table each
one asks for with the table in the catalog, so both map the configuration here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ingest.driver.writer_schemas.fold import WriterSchemaRefused
from ingest.driver.writer_schemas.subject import key_columns, reader_schema_columns, start_fold, with_versions
from ingest.driver.writer_schemas.unmappable import UnmappableSchema
from ingest.job import (
    CatalogSpec,
    IngestJob,
    JobSpecError,
    SharedIngestJob,
    SortTerm,
    SourceSpec,
    TableSpec,
    TriggerSpec,
)
from ingest.skips import RecordRef, RecordRefError, parse_record_ref, record_refs
from ingest.tasks.changes import OpField
from ingest.tasks.decode_records import DecodeSpec
from ingest.tasks.decoding import AvroFormat, ConfluentFormat, Format, JsonFormat, RegistryUnavailableError
from ingest.tasks.routing import RouteSpec, TopicRoute
from service.config import ConfigError, FloeConfig, TableConfig
from service.config.kafka import KafkaConfig
from service.config.tables import FormatConfig
from table.schema import Schema

log = logging.getLogger(__name__)

GRACE_SECONDS = 90.0
"""How long a stop waits for the running batch: under Kubernetes' 120 s termination grace period."""


class SkipOptionError(ValueError):
    """A ``floe ingest --skip`` value that is not ``topic/partition@offset``, or names a topic no table reads."""


def command_line_skips(config: FloeConfig, texts: Sequence[str]) -> tuple[RecordRef, ...]:
    """``--skip`` values as records; each must name a topic some table reads (it applies to all that do)."""
    refs = []
    for text in texts:
        try:
            ref = parse_record_ref(text)
        except RecordRefError as exc:
            raise SkipOptionError(f"--skip: {exc}") from None
        if not any(table.reads_topic(ref.topic) for table in config.tables):
            read = ", ".join(
                f"{t.identifier} reads {', '.join(t.source_topics) or repr(t.topic_pattern)}" for t in config.tables
            )
            raise SkipOptionError(f"--skip {text!r}: no table reads topic {ref.topic!r} ({read})")
        refs.append(ref)
    return record_refs(refs)


def build_jobs(config: FloeConfig, skip: Sequence[RecordRef] = ()) -> list[IngestJob]:
    """One job per table; :class:`ConfigError` names ``tables[i]...`` for anything the job spec refuses.
    ``skip``: records to skip besides each table's ``skip_records`` (``--skip``), in every table that
    reads their topic."""
    jobs, problems = [], []
    routes = route_specs(config.tables)
    for i, table in enumerate(config.tables):
        if table.is_template and table.columns is None:
            continue  # its columns come from each topic's subject: checked per topic, once Kafka names them
        try:
            skipped = tuple(ref for ref in skip if table.reads_topic(ref.topic))
            jobs.append(table_job(config, table, skipped, routes.get(i)))
        except (JobSpecError, ValueError, OSError) as exc:
            problems.append(f"tables[{i}]{_job_field_path(exc)}: {_reason(exc)}")
    if problems:
        raise ConfigError("tables", problems)
    return jobs


def build_shared_job(config: FloeConfig, skip: Sequence[RecordRef] = ()) -> SharedIngestJob:
    """Every table's job (:func:`build_jobs`) in one shared query (``ingest.query: shared``)."""
    return SharedIngestJob(tuple(build_jobs(config, skip)), config.ingest.commit_threads)


def catalog_spec(config: FloeConfig) -> CatalogSpec:
    """The configured catalog: SQL (its connection URI) or REST (URI, prefix, and headers with the token)."""
    catalog = config.catalog
    if catalog.type == "rest":
        return CatalogSpec(
            catalog.uri,
            catalog.warehouse,
            catalog.name,
            headers=tuple(catalog.rest_headers().items()),
            prefix=catalog.prefix,
            credential=catalog.rest_credential(),
            oauth2_server_uri=catalog.oauth2_server_uri,
            scope=catalog.scope,
            ca_file=None if catalog.ca_file is None else str(catalog.ca_file),
            access_delegation=catalog.access_delegation,
            request_timeout_seconds=catalog.request_timeout.total_seconds(),
        )
    return CatalogSpec(catalog.connection_uri(), catalog.warehouse, catalog.name)


def route_specs(tables: Sequence[TableConfig]) -> dict[int, RouteSpec]:
    """Each routed table's route, by index: the values its siblings on each topic take, and whether it owns
    (dead-letters) the records no route takes, as the first routed table of the topic does."""
    specs = {}
    for i, table in enumerate(tables):
        if table.route is None:
            continue
        topics = []
        for topic in table.source_topics:
            routed = [k for k, other in enumerate(tables) if other.route and topic in other.source_topics]
            elsewhere = frozenset(v for k in routed if k != i for v in tables[k].route.values)  # type: ignore[union-attr]  # routed tables have a route
            topics.append(TopicRoute(topic, elsewhere, owns_unrouted=routed[0] == i))
        specs[i] = RouteSpec(table.route.field, frozenset(table.route.values), tuple(topics))
    return specs


def table_job(
    config: FloeConfig, table: TableConfig, skip: Sequence[RecordRef] = (), route: RouteSpec | None = None
) -> IngestJob:
    """The job spec of ``table``: every key that changes how it is read, decoded or written; ``skip``:
    records to skip besides the table's ``skip_records``; ``route``: its share of routed topics."""
    trigger = config.trigger
    return IngestJob(
        source=source_spec(config.kafka, table),
        table=table_spec(table, skip, route),
        catalog=catalog_spec(config),
        checkpoint_location=config.checkpoint_for(table),
        trigger=TriggerSpec(trigger.processing_time.total_seconds(), trigger.available_now),
        lag_interval_seconds=min(30.0, max(1.0, trigger.processing_time.total_seconds())),
        grace_seconds=GRACE_SECONDS,
        commit_interval_seconds=None if table.commit_interval is None else table.commit_interval.total_seconds(),
    )


def source_spec(kafka: KafkaConfig, table: TableConfig) -> SourceSpec:
    """The Kafka side: both client dialects carry the security settings."""
    java = {k: v for k, v in kafka.java_client_properties().items() if k != "bootstrap.servers"}
    delay = kafka.max_trigger_delay
    return SourceSpec(
        bootstrap_servers=",".join(kafka.bootstrap_servers),
        topics=tuple(table.source_topics),
        topic_pattern=table.topic_pattern,
        starting_offsets=_starting_offsets(kafka, table),
        max_offsets_per_trigger=kafka.max_offsets_per_trigger,
        min_offsets_per_trigger=kafka.min_offsets_per_trigger,
        max_trigger_delay=None if delay is None else f"{int(delay.total_seconds() * 1000)}ms",
        fail_on_data_loss=kafka.fail_on_data_loss,
        max_tasks_per_batch=kafka.max_tasks_per_batch,
        kafka_properties=java,
        client_properties=kafka.security.librdkafka_properties(),
        reader=kafka.reader,
    )


def _starting_offsets(kafka: KafkaConfig, table: TableConfig) -> Any:
    """The table's share of ``kafka.starting_offsets``: Spark refuses offsets of topics it does not read."""
    offsets = kafka.starting_offsets
    if isinstance(offsets, str):
        return offsets
    mine = {
        topic: parts
        for topic, parts in offsets.items()
        if topic in table.source_topics or (table.topic_pattern and re.fullmatch(table.topic_pattern, topic))
    }
    return mine or "earliest"


def table_spec(table: TableConfig, skip: Sequence[RecordRef] = (), route: RouteSpec | None = None) -> TableSpec:
    return TableSpec(
        identifier=table.identifier,
        decode=decode_spec(table, skip, route),
        partition=tuple((t.transform, t.column) for t in table.partition_terms()),
        sort_order=tuple(
            SortTerm(t.column, t.transform, t.direction, t.null_order)  # type: ignore[arg-type]  # validated configuration: the strings are the Literal values
            for t in table.sort_terms()
        ),
        properties=table.properties,
        format_version=table.format_version,
        bad_records=table.bad_records,
        dead_letter_topic=table.dead_letter_topic,
    )


def decode_spec(table: TableConfig, skip: Sequence[RecordRef] = (), route: RouteSpec | None = None) -> DecodeSpec:
    fmt = value_format(table.format)
    schema, key = table.iceberg_schema(), tuple(table.key)
    if schema is None:
        schema, fmt, key = _schema_from_avro(table, fmt)
    op = table.op
    return DecodeSpec(
        schema=schema,
        format=fmt,
        metadata_columns=table.metadata_columns,
        mode=table.mode,
        op_field=None
        if op is None
        else OpField(op.field, tuple(op.insert), tuple(op.update), tuple(op.delete), envelope=op.envelope),
        key_fields=key,
        key_format="confluent" if table.keys_from_registry else "json",
        skip_records=table.skip_refs() + tuple(skip),
        route=route,
    )


def _schema_from_avro(table: TableConfig, fmt: Format) -> tuple[Schema, Format, tuple[str, ...]]:
    """The columns of a table that lists none, and its key: from its Avro reader schema, or its registry
    subject's versions (the key, when it names none, from the Kafka key's subject)."""
    key = tuple(table.key)
    where = f"schema_file {table.format.schema_file}" if table.format.schema_file else "the schema registry"
    try:
        if isinstance(fmt, AvroFormat) or (isinstance(fmt, ConfluentFormat) and fmt.reader_schema is not None):
            reader = fmt.reader_schema
            assert reader is not None
            return reader_schema_columns(reader, key), fmt, key
        if isinstance(fmt, ConfluentFormat) and fmt.registry_url is not None:
            return _schema_from_subject(table, fmt, key)
    except (UnmappableSchema, WriterSchemaRefused) as exc:
        raise JobSpecError("schema", f"{where}: {exc}") from None
    raise JobSpecError("schema", "list the columns: they come from Avro only with schema_file or registry_url")


def _schema_from_subject(
    table: TableConfig, fmt: ConfluentFormat, key: tuple[str, ...]
) -> tuple[Schema, Format, tuple[str, ...]]:
    topics = table.source_topics
    if table.format.subject is None and len(topics) != 1:
        raise JobSpecError(
            "schema",
            f"columns from the registry need one topic or format.subject; the table reads {topics or 'a pattern'}",
        )
    fmt = replace(fmt, subject=table.format.subject or f"{topics[0]}-value")
    try:
        if table.keys_from_registry:
            key = _key_from_subject(fmt, f"{topics[0]}-key" if len(topics) == 1 else "")
        fold = start_fold(fmt, key)
    except RegistryUnavailableError as exc:
        raise JobSpecError("schema", f"the table's columns come from the registry, which failed: {exc}") from None
    for version in fold.versions:
        if version.refused:
            log.warning("table %s: %s", table.identifier, version.note(), extra={"table": table.identifier})
    if fold.folded is None:
        raise JobSpecError(
            "schema", f"subject {fmt.subject} has no schema the table can take yet; register one, or list the columns"
        )
    return fold.folded.schema, with_versions(fmt, fold), key


def _key_from_subject(fmt: ConfluentFormat, subject: str) -> tuple[str, ...]:
    """The key columns the Kafka key's subject names; one clear line when there are none."""
    key = key_columns(fmt, subject) if subject else ()
    if not key:
        raise JobSpecError(
            "key",
            f"an upsert table needs its key columns: name them in key, or register the Kafka key's schema "
            f"(a record) under {subject or '<topic>-key'}",
        )
    return key


def value_format(fmt: FormatConfig) -> Format:
    """The decoder format; schema files are read here, on the driver, so executors need no files."""
    if fmt.type == "json":
        return JsonFormat()
    reader = Path(fmt.schema_file).read_text(encoding="utf-8") if fmt.schema_file is not None else None
    if fmt.type == "avro":
        assert reader is not None  # the config requires schema_file for avro
        return AvroFormat(reader)
    return ConfluentFormat(
        reader_schema=reader,
        registry_url=None if fmt.registry_url is None else _registry_url(fmt),
        schema_dir=None if fmt.schema_dir is None else str(fmt.schema_dir),
    )


def _registry_url(fmt: FormatConfig) -> str:
    """The registry URL with basic-auth credentials inside: how the registry client takes them. A secret."""
    assert fmt.registry_url is not None
    if fmt.registry_username is None or fmt.registry_password is None:
        return fmt.registry_url
    parts = urlsplit(fmt.registry_url)
    user = quote(fmt.registry_username, safe="")
    secret = quote(fmt.registry_password.get_secret_value(), safe="")
    return urlunsplit((parts.scheme, f"{user}:{secret}@{parts.netloc}", parts.path, parts.query, parts.fragment))


_JOB_FIELDS = {
    "table.partition": ".partition_spec",
    "table.dead_letter_topic": ".dead_letter_topic",
    "table.bad_records": ".bad_records",
    "table.identifier": ".identifier",
    "table.decode.skip_records": ".skip_records",
    "source.topics": ".topics",
    "source.topic_pattern": ".topic_pattern",
    "schema": ".schema",
    "key": ".key",
}


def _job_field_path(exc: Exception) -> str:
    if isinstance(exc, JobSpecError):
        return _JOB_FIELDS.get(exc.field, "")
    return ".format" if isinstance(exc, OSError) else ""


def _reason(exc: Exception) -> str:
    return exc.reason if isinstance(exc, JobSpecError) else str(exc)
