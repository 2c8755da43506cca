"""``floe check``: is the configuration valid, and are Kafka, the catalog and
the warehouse reachable from here? Does each existing table fit its
configuration, or will the first start create or evolve it?

Each probe returns a :class:`CheckResult`; none prints a secret (the catalog
is shown by its redacted URI, Kafka by its bootstrap servers only).
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from commit.catalog.base import Catalog
from commit.errors import NoSuchCatalog
from commit.identifiers import to_table_identifier
from ingest.driver.table_diff import kept_columns
from ingest.driver.table_setup import TableMismatchError, TablePropertyError, check_table, needs_unpartitioned_spec
from ingest.kafka_source.outage import in_words, is_refusal, kafka_error, principal_of, refusal_in_words
from ingest.kafka_source.watermarks import TopicsNotFound
from runtime.logging import redact_text, summarize_error
from runtime.spark_session import local_cores
from service.config import FloeConfig, TableConfig
from service.config.spark import SparkConfig
from service.failures import CommandError
from service.jobs import catalog_spec, table_spec
from table.io import FileIO
from table.object_store import S3Settings


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        """One line for the terminal, secrets masked (a probe's error may quote its configuration)."""
        return redact_text(f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}")


def _guarded(name: str, probe: Callable[[], str]) -> CheckResult:
    """Runs one probe; its failure is the result, reported with its type and message."""
    try:
        return CheckResult(name, True, probe())
    except Exception as exc:  # noqa: BLE001 - a failed probe is what `check` reports
        return CheckResult(name, False, summarize_error(exc))


class KafkaNotAnswering(RuntimeError):
    """No broker answered the metadata request; the message is the cause in words."""


class KafkaRefused(RuntimeError):
    """A broker answered and refused Floe's client (its credentials or its TLS); the message names who."""


class TopicsNotAuthorized(PermissionError):
    """Kafka has the topics, and Floe's principal may not describe them (an ACL)."""


def check_kafka(config: FloeConfig, timeout_s: float = 10.0, *, topics: bool = True) -> CheckResult:
    """Reach the brokers (and, with ``topics``, find every configured topic). Its words are those of
    ``floe ingest`` refusing to start (:func:`require_kafka`)."""
    try:
        return CheckResult(_kafka_name(config), True, _kafka_probe(config, timeout_s, topics)[0])
    except Exception as exc:  # noqa: BLE001 - a failed probe is what `check` reports
        return CheckResult(_kafka_name(config), False, _kafka_failure(exc))


def _kafka_name(config: FloeConfig) -> str:
    return f"kafka {','.join(config.kafka.bootstrap_servers)}"


def _kafka_failure(error: Exception) -> str:
    """A failed Kafka probe in words: Floe's own (no broker answered, topics not found), else the error's."""
    words = (KafkaNotAnswering, KafkaRefused, TopicsNotFound, TopicsNotAuthorized)
    return str(error) if isinstance(error, words) else summarize_error(error)


def _kafka_probe(config: FloeConfig, timeout_s: float, topics: bool) -> tuple[str, list[str]]:
    """What the brokers said, in words; and every topic they have."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    refusals: list[Any] = []  # librdkafka reports a refusal here, then fails the request as "all brokers down"
    settings: dict[str, Any] = {
        "bootstrap.servers": ",".join(config.kafka.bootstrap_servers),
        "log_level": 0,
        "error_cb": lambda error: refusals.append(error) if is_refusal(error) else None,
    }
    settings.update(config.kafka.security.librdkafka_properties())
    admin = AdminClient(settings)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = kafka_error(exc)
        if error is None:
            raise
        admin.poll(0)  # serve the error callback
        if refusals:
            who = principal_of(settings)
            raise KafkaRefused(f"connecting as {who} failed: {refusal_in_words(refusals[-1])}") from exc
        raise KafkaNotAnswering(f"no broker answered: {in_words(error)}") from exc
    wanted = sorted({t for table in config.tables for t in table.source_topics})
    missing = [t for t in wanted if t not in metadata.topics]
    if missing and topics:
        denied = _denied(admin, missing, timeout_s)
        if denied:
            raise TopicsNotAuthorized(
                f"{principal_of(settings)} is not authorized to describe topics: {', '.join(denied)}"
            )
        raise TopicsNotFound(f"topics not found: {', '.join(missing)} ({len(metadata.brokers)} broker(s) answered)")
    found = f"{len(metadata.brokers)} broker(s); topics found: {', '.join(wanted) or 'none (pattern)'}"
    return found, sorted(metadata.topics)


def _denied(admin: Any, topics: list[str], timeout_s: float) -> list[str]:
    """Which of ``topics`` Kafka refuses to describe to this client: listed, an ACL hides a topic as if it
    did not exist; described by name (which never creates it), Kafka says which it is."""
    from confluent_kafka import KafkaException, TopicCollection

    denied = []
    for topic, future in admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as exc:
            error = kafka_error(exc)
            if error is not None and error.name() == "TOPIC_AUTHORIZATION_FAILED":
                denied.append(topic)
    return denied


def kafka_topics(config: FloeConfig, timeout_s: float = 10.0) -> list[str]:
    """Every topic the brokers have (what template tables expand over); raises when no broker answers."""
    return _kafka_probe(config, timeout_s, topics=False)[1]


def require_kafka(config: FloeConfig, timeout_s: float = 10.0) -> list[str]:
    """Fail fast, with ``floe check``'s own words, when no broker answers or a configured topic does not
    exist: before anything is created, on either source (Spark's refuses a missing topic; Floe's would
    read nothing from it). Every topic the brokers have."""
    failure: Exception
    try:
        return _kafka_probe(config, timeout_s, topics=True)[1]
    except TopicsNotFound as missing:
        failure, advice = missing, "create them, or correct tables[].topics"
    except TopicsNotAuthorized as denied:
        failure, advice = denied, "grant the principal READ and DESCRIBE on them (docs/security.md)"
    except KafkaRefused as refused:
        failure, advice = refused, "check kafka.security: the credentials, the CA and the client certificate"
    except Exception as error:  # noqa: BLE001 - every failure of the probe refuses the start, in one line
        failure, advice = error, "check kafka.bootstrap_servers and that the brokers are up"
    raise CommandError(
        f"{_kafka_name(config)}: {_kafka_failure(failure)}; {advice} ('floe check' runs the same probe)"
    ) from failure


def check_catalog(config: FloeConfig) -> CheckResult:
    def probe() -> str:
        try:
            catalog = catalog_spec(config).open(create=False)
        except NoSuchCatalog as missing:
            return f"not created yet ({missing}); the first 'floe ingest' creates it"
        with catalog:
            return f"reachable; {len(catalog.list_namespaces())} top-level namespace(s)"

    return _guarded(f"catalog {config.catalog.display_uri}", probe)


def check_warehouse(config: FloeConfig) -> CheckResult:
    def probe() -> str:
        if config.catalog.type == "rest" and config.catalog.access_delegation is not None:
            # The keys come with each table; this process may hold none for the warehouse itself.
            return (
                f"not probed: the REST catalog vends storage credentials ({config.catalog.access_delegation})"
                + _store_detail(config.catalog.warehouse)
            )
        io = FileIO.for_location(config.catalog.warehouse)
        path = f"{config.catalog.warehouse.rstrip('/')}/.floe-check-{uuid.uuid4().hex}"
        io.write_bytes(path, b"floe check")
        try:
            if io.read_bytes(path) != b"floe check":
                raise OSError(f"read back different bytes from {path}")
        finally:
            io.delete(path)
        return "writable and readable" + _store_detail(config.catalog.warehouse)

    return _guarded(f"warehouse {config.catalog.warehouse}", probe)


def _store_detail(location: str) -> str:
    """Which S3 endpoint a warehouse on S3 was reached through (the settings come from the environment)."""
    if not location.lower().startswith(("s3://", "s3a://")):
        return ""
    settings = S3Settings.from_environment(os.environ)
    style = ", path-style" if settings.path_style_access else ""
    https = (settings.endpoint or "https").startswith("https")
    trust = f", trusting the CAs in {settings.ca_file}" if settings.ca_file and https else ""
    return f" (S3 at {settings.endpoint or 'AWS'}{style}, region {settings.region or 'from the SDK'}{trust})"


def check_spark(spark: SparkConfig, name: str, timeout_s: float = 5.0) -> CheckResult:
    """Local mode needs nothing; a cluster's master (or Kubernetes API server) must accept a connection."""

    def probe() -> str:
        if spark.local:
            return f"local mode, {local_cores(spark.master)} task slot(s) in the driver's process"
        if spark.master == "yarn":
            return "yarn: the master comes from HADOOP_CONF_DIR; not probed"
        host, port = _master_address(spark.master)
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
        return f"master reachable at {host}:{port}"

    return _guarded(f"{name} {spark.master}", probe)


def _compactor_spark(config: FloeConfig) -> list[CheckResult]:
    """The compactor's own Spark session, when it has one that differs from the ingest's."""
    if config.compaction.executor != "spark" or config.compactor_spark == config.spark:
        return []
    return [check_spark(config.compactor_spark, "compaction.spark")]


def _master_address(master: str) -> tuple[str, int]:
    """The first master's host and port: ``spark://h:7077[,h2:7077]`` or ``k8s://https://h[:443]``."""
    if master.startswith("k8s://"):
        parts = urlsplit(master[len("k8s://") :])
        return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    first = master[len("spark://") :].split(",")[0]
    host, _, port = first.rpartition(":")
    return (host, int(port)) if host else (first, 7077)


WILL_BE_CREATED = "will be created on the first start"


def check_tables(config: FloeConfig) -> list[CheckResult]:
    """One result per configured table: what the first ``floe ingest`` would do to it.

    Reads only: the catalog is opened with ``create=False``, and a missing
    catalog means every table will be created.
    """
    names = [f"table {t.identifier}" for t in config.tables]
    try:
        catalog = catalog_spec(config).open(create=False)
    except NoSuchCatalog:
        return [CheckResult(name, True, WILL_BE_CREATED) for name in names]
    except Exception as exc:  # noqa: BLE001 - reported on every table it keeps from being checked
        return [CheckResult(name, False, f"not checked: {summarize_error(exc)}") for name in names]
    with catalog:
        return [result for table in config.tables for result in _checked(catalog, config, table)]


def _checked(catalog: Catalog, config: FloeConfig, table: TableConfig) -> list[CheckResult]:
    """The table's result; a template's, one per topic its pattern matches now (Kafka says which)."""
    if not table.is_template:
        return [check_table_fits(catalog, table)]
    name = f"table {table.identifier}"
    try:
        topics = [t for t in kafka_topics(config) if table.reads_topic(t)]
    except Exception as exc:  # noqa: BLE001 - a failed probe is what `check` reports
        return [CheckResult(name, False, f"not checked: the topics come from Kafka: {summarize_error(exc)}")]
    if not topics:
        return [
            CheckResult(name, True, f"no topic matches {table.topic_pattern!r} now; each one that does gets a table")
        ]
    return [_from_template(check_table_fits(catalog, table.for_topic(t)), t) for t in sorted(topics)]


def _from_template(result: CheckResult, topic: str) -> CheckResult:
    return CheckResult(f"{result.name} (topic {topic})", result.ok, result.detail)


def check_table_fits(catalog: Catalog, table: TableConfig) -> CheckResult:
    """``ok`` when the first start creates, keeps or evolves the table; ``FAIL`` with how to fix what it refuses."""
    name = f"table {table.identifier}"
    try:
        return CheckResult(name, True, _table_plan(catalog, table))
    except (TableMismatchError, TablePropertyError) as refused:
        return CheckResult(name, False, refused.detail)
    except Exception as exc:  # noqa: BLE001 - a failed probe is what `check` reports
        return CheckResult(name, False, summarize_error(exc))


def _table_plan(catalog: Catalog, table: TableConfig) -> str:
    """What the first start does to the table; :class:`TableMismatchError` when it would refuse it."""
    spec = table_spec(table)
    ident = to_table_identifier(spec.identifier)
    if not catalog.table_exists(ident):
        return WILL_BE_CREATED
    metadata = catalog.load_table(ident).metadata
    evolutions = check_table(metadata, spec)
    plan = "will evolve: " + ", ".join(d.summary() for d in evolutions) if evolutions else "exists and matches"
    plan += "".join(f"; {kept.note()}" for kept in kept_columns(metadata, spec))
    if needs_unpartitioned_spec(metadata, spec):
        plan += "; will add an unpartitioned spec for global equality deletes"
    return plan


def run_checks(config: FloeConfig) -> list[CheckResult]:
    return [
        check_kafka(config),
        check_spark(config.spark, "spark"),
        *_compactor_spark(config),
        check_catalog(config),
        check_warehouse(config),
        *check_tables(config),
    ]
