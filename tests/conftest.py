"""Shared fixtures: a real Kafka broker, a local SparkSession, the Iceberg oracle.

The Kafka bootstrap is chosen in this order:
  1. the ``FLOE_TEST_KAFKA`` environment variable;
  2. a testcontainers Kafka container, when a Docker engine answers;
  3. a local KRaft broker started from the Maven-fetched Kafka jars.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import settings

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
# The suite starts a Spark driver JVM about a hundred times (each `floe ingest` run, each restart after a
# kill, the oracle), and most of each one's CPU goes to compiling Spark's start-up code with C2, which it
# runs only briefly. C1 alone halves that CPU; what the JVM computes is the same. Floe itself runs with the
# JVM's defaults. SPARK_SUBMIT_OPTS is what Spark's launcher adds to the driver's java command.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

# CI runs the property tests on a fixed seed, so that a red CI can be reproduced and a
# green one is not luck; runs on a developer's machine keep exploring new examples.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

log = logging.getLogger("floe.tests")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest test files first, so that no worker runs a long file alone at the end
    (tests/support/file_order.py; ``make test`` turns xdist's own reordering off)."""
    from tests.support.file_order import longest_files_first, measured_seconds

    items[:] = longest_files_first(items, measured_seconds())


def _docker_answers() -> bool:
    """True when a Docker engine answers a ping within a second."""
    try:
        import docker

        client = docker.from_env(timeout=1)
        client.ping()
        return True
    except Exception as exc:  # noqa: BLE001 - no engine is the normal case here
        log.info("no docker engine (%s); using the local broker", type(exc).__name__)
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bootstrap address of a real Kafka broker for the whole session."""
    if os.environ.get("FLOE_TEST_KAFKA"):
        yield os.environ["FLOE_TEST_KAFKA"]
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from service.local_kafka import LocalKafka

    with LocalKafka(tmp_path_factory.mktemp("kafka")) as kafka:
        assert kafka.bootstrap is not None
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Creates a uniquely named topic on the session's broker and returns its name."""
    from tests.ingest.e2e_support import create_topic

    return lambda prefix="t", partitions=1: create_topic(kafka_bootstrap, prefix, partitions)


@pytest.fixture
def paced_producer() -> Iterator[Callable[..., Any]]:
    """Starts a :class:`~tests.ingest.e2e_support.PacedProducer` once it has produced its first chunk;
    every producer started is told to finish when the test ends, passed or failed."""
    from tests.ingest.e2e_support import PacedProducer

    started: list[PacedProducer] = []

    def start(*args: Any, **kwargs: Any) -> PacedProducer:
        producer = PacedProducer(*args, **kwargs)
        started.append(producer)
        producer.start()
        assert producer.started.wait(60) and producer.error is None, producer.error
        return producer

    yield start
    for producer in started:
        producer.finish.set()


@pytest.fixture(scope="session")
def s3proxy(tmp_path_factory: pytest.TempPathFactory):  # -> tests.support.s3proxy.S3Proxy
    """A real S3 server (S3Proxy) for the whole session, its settings in this process's environment.

    The environment is how Floe's processes find the store (table.object_store), so
    every process the tests start, Spark's Python workers included, reaches it too.
    """
    from tests.support.s3proxy import S3Proxy

    with S3Proxy(tmp_path_factory.mktemp("s3proxy")) as server:
        saved = {name: os.environ.get(name) for name in server.environment()}
        os.environ.update(server.environment())
        yield server
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session")
def spark(s3proxy):  # -> pyspark.sql.SparkSession
    """A local[2] SparkSession with Spark's Kafka source on the classpath, set up as
    ``floe ingest`` sets up its own: executors and S3A reach the test's S3 server."""
    from runtime.spark_session import build_spark_session
    from service.spark_setup import object_store_settings

    settings = {**object_store_settings(os.environ), "spark.sql.shuffle.partitions": "2"}
    session = build_spark_session("floe-tests", settings)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def iceberg_oracle(tmp_path_factory: pytest.TempPathFactory):  # -> IcebergOracle
    """Iceberg's Java runtime in a separate Spark process (test oracle only)."""
    from tests.support.iceberg_oracle import IcebergOracle

    oracle = IcebergOracle(tmp_path_factory.mktemp("oracle")).start()
    yield oracle
    oracle.stop()


@pytest.fixture(scope="session")
def rest_catalog_server(tmp_path_factory: pytest.TempPathFactory):  # -> tests.support.rest_catalog.RestCatalogServer
    """Iceberg's own REST catalog server (a JDBC catalog in a SQLite file) for the whole session."""
    from tests.support.rest_catalog import RestCatalogServer

    work = tmp_path_factory.mktemp("rest-catalog")
    with RestCatalogServer(work, str(work / "warehouse")) as server:
        yield server


@pytest.fixture()
def warehouse(tmp_path: Path) -> Path:
    """An empty warehouse directory on local disk."""
    path = tmp_path / "warehouse"
    path.mkdir()
    return path


@pytest.fixture(autouse=True)
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level restored after each test.

    ``floe`` commands run in-process configure logging onto the stream of the
    moment (a test's captured stderr); a handler left behind would write to
    that closed stream in later tests.
    """
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    yield root
    for handler in list(root.handlers):
        if handler not in saved_handlers:
            root.removeHandler(handler)
    for handler in saved_handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(saved_level)
