"""Interop 1: pyiceberg reads tables that table/ writes, with exactly the expected rows.

Append-only and position-delete tables, partitioned with every transform,
and a table after schema and spec evolution. (pyiceberg cannot read
equality deletes; Iceberg Java covers those in test_interop_java.py.)
"""

from __future__ import annotations

import pytest
from pyiceberg.table import StaticTable

from table.scan import TableScan
from tests.support.interop_tables import SCENARIOS
from tests.support.rows import normalize

WITHOUT_EQUALITY_DELETES = [name for name in SCENARIOS if not name.startswith("eq_")]


@pytest.mark.parametrize("name", WITHOUT_EQUALITY_DELETES)
def test_floe_reader_returns_the_expected_rows(interop_corpus, name):
    scenario = interop_corpus(name)
    schema = scenario.table.metadata.schema()
    floe = TableScan(scenario.table.io, scenario.table.metadata).to_arrow().to_pylist()
    assert normalize(floe, schema) == normalize(scenario.expected, schema)


@pytest.mark.parametrize("name", WITHOUT_EQUALITY_DELETES)
def test_pyiceberg_reads_the_expected_rows(interop_corpus, name):
    scenario = interop_corpus(name)
    schema = scenario.table.metadata.schema()
    table = StaticTable.from_metadata(scenario.table.metadata_location)
    assert table.metadata.current_snapshot_id == scenario.table.metadata.current_snapshot_id
    rows = table.scan().to_arrow().to_pylist()
    assert normalize(rows, schema) == normalize(scenario.expected, schema)


def test_pyiceberg_prunes_by_hidden_partition(interop_corpus):
    """A filter on the source column prunes files through the day transform."""
    scenario = interop_corpus("day_hour")
    table = StaticTable.from_metadata(scenario.table.metadata_location)
    everything = list(table.scan().plan_files())
    one_day = list(table.scan(row_filter="event_ts >= '2026-01-01T00:00:00+00:00' AND event_ts < '2026-01-02T00:00:00+00:00'").plan_files())
    assert 0 < len(one_day) < len(everything)
