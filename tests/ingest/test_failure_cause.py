"""The ``cause`` label of floe_ingest_table_failures_total: which dependency a failed batch blames."""

from __future__ import annotations

import pytest

from commit.catalog.rest.client import RestCatalogError
from commit.errors import CatalogDatabaseError, CommitStateUnknown, NoSuchTable
from ingest.driver.failure_cause import CAUSES, failure_cause
from ingest.driver.lag import KafkaUnreachable
from table.io import FileIOError


def _caused(outer: Exception, inner: Exception) -> Exception:
    outer.__cause__ = inner
    return outer


@pytest.mark.parametrize(("error", "cause"), [
    (CatalogDatabaseError("load table db.t", "connection refused"), "catalog"),
    (CommitStateUnknown("db.t", "/a", "/b", "AdminShutdown"), "catalog"),
    (RestCatalogError("load table db.t", 503, "ServiceUnavailable", "no healthy upstream"), "catalog"),
    (NoSuchTable("db.t"), "catalog"),
    (FileIOError("s3://b/k", "open", "AWS Error NETWORK_CONNECTION"), "storage"),
    (OSError("When completing multiple part upload for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION"),
     "storage"),
    (_caused(RuntimeError("batch failed"), FileIOError("s3://b/k", "open", "refused")), "storage"),
    (KafkaUnreachable("127.0.0.1:9092", RuntimeError("all brokers down")), "kafka"),
    # a cause that crossed Spark's JVM as text: its class name is in the message
    (RuntimeError("An error occurred while calling o54.run.\n: org.apache.spark.api.python.PythonException: "
                  "Traceback (most recent call last):\ntable.io.FileIOError: cannot open for writing s3://b/k: x"),
     "storage"),
    (ValueError("a column cannot take the records"), "other"),
])
def test_a_failure_is_blamed_on_its_dependency(error, cause):
    assert failure_cause(error) == cause
    assert cause in CAUSES
