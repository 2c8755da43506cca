"""Interop 2: Iceberg's Java runtime reads table/'s tables with the same rows as Floe.

The corpus includes equality deletes (global and partitioned, with the
same-sequence-number upsert case and null keys). Iceberg's Spark integration
refuses to load any table with a ``time`` column, so the Java oracle reads an
all-types table without one; pyiceberg covers ``time``.
"""

from __future__ import annotations

import pytest

from table.scan import TableScan
from tests.support.interop_tables import SCENARIOS
from tests.support.rows import normalize

pytestmark = [pytest.mark.oracle]


JAVA_READABLE = [name for name in SCENARIOS if name != "append_only"]


@pytest.mark.parametrize("name", JAVA_READABLE)
def test_java_reads_the_same_rows_as_floe(interop_corpus, iceberg_oracle, name):
    scenario = interop_corpus(name)
    schema = scenario.table.metadata.schema()
    columns = [f.name for f in schema.fields]
    java = iceberg_oracle.call(
        "tests.support.oracle_ops:read_by_metadata_location",
        metadata_location=scenario.table.metadata_location,
        columns=columns,
    ).to_pylist()
    floe = TableScan(scenario.table.io, scenario.table.metadata).to_arrow().to_pylist()
    expected = normalize(scenario.expected, schema, columns)
    assert normalize(floe, schema, columns) == expected
    assert normalize(java, schema, columns) == expected
