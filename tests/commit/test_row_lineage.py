"""Format v3 row lineage (spec "Row Lineage", "First Row ID Inheritance", "First Row ID
Assignment"): every commit to a v3 table starts at the table's ``next-row-id``, gives new data
manifests consecutive ranges, and moves the counter past them; data files inherit their
``first_row_id`` on read. Iceberg Java's ``_row_id`` and ``_last_updated_sequence_number``
must read back as the spec defines them, and pyiceberg 0.12 must read the rows."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergCatalog

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.format_upgrade import upgrade_format_version
from commit.metadata_committer import PendingCommit
from commit.operations.fast_append import FastAppend
from commit.operations.merge_append import MergeAppend
from commit.operations.row_delta import RowDelta
from table.manifest import DataFile, ManifestEntryStatus, read_manifest_entries
from table.metadata import Snapshot
from tests.commit.producer_support import CommitTable
from tests.commit.test_catalog_oracles import id_data, use_jdbc_catalog

V3 = {"format-version": "3"}


def live_data_files(table: CommitTable, snapshot: Snapshot) -> list[tuple[DataFile, int]]:
    """(data file with its inherited first_row_id, data sequence number) of a snapshot."""
    return [
        (e.data_file, e.sequence_number)
        for m in table.manifests(snapshot)
        for e in read_manifest_entries(table.io, m)
        if e.status != ManifestEntryStatus.DELETED and e.data_file.content == 0
    ]


def check_lineage(table: CommitTable) -> None:
    """Row ids of live data files neither overlap nor leave gaps, and the table's counter is the
    last snapshot's first-row-id plus added-rows."""
    md = table.metadata()
    snapshot = table.current()
    assert md.next_row_id == snapshot.first_row_id + snapshot.added_rows
    ranges = sorted((f.first_row_id, f.first_row_id + f.record_count) for f, _ in live_data_files(table, snapshot))
    assert all(start is not None for start, _ in ranges)
    assert all(end == start for (_, end), (start, _) in zip(ranges, ranges[1:])), ranges
    assert ranges[-1][1] <= md.next_row_id


def test_a_v3_table_starts_at_row_id_zero(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties=V3)
    md = table.metadata()
    assert (md.format_version, md.next_row_id) == (3, 0)
    assert "format-version" not in md.properties


def test_appends_assign_consecutive_row_ids(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties=V3)
    first = table.append([1, 2, 3])[1]
    assert (first.first_row_id, first.added_rows) == (0, 3)
    second = table.commit(FastAppend([table.write_data([4, 5]), table.write_data([6, 7, 8, 9])]))
    assert (second.first_row_id, second.added_rows) == (3, 6)
    assert table.metadata().next_row_id == 9
    check_lineage(table)
    manifests = table.manifests()
    assert sorted(m.first_row_id for m in manifests) == [0, 3]  # existing manifests keep theirs


def test_merged_manifests_keep_the_row_ids_files_have(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties={**V3, "commit.manifest.min-count-to-merge": "2"})
    for ids in ([1, 2], [3], [4, 5, 6]):
        table.commit(MergeAppend([table.write_data(ids)]))
    assert len(table.manifests()) == 1  # merged: carried files have explicit ids, only new ones take the range
    snapshot = table.current()
    assert (snapshot.first_row_id, snapshot.added_rows) == (3, 3)
    check_lineage(table)


def test_deletes_assign_no_row_ids(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties=V3)
    data_file, _ = table.append([1, 2, 3])
    with pytest.raises(Exception, match="no new position delete files"):
        table.commit(RowDelta([], [table.write_position_deletes(data_file, [0])]))
    assert table.metadata().next_row_id == 3 and table.ids() == [1, 2, 3]


def test_a_retried_commit_takes_row_ids_after_the_winner(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, properties=V3)
    table.append([1])

    def race(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.append([10, 11, 12])

    ours = table.commit(FastAppend([table.write_data([2, 3])]), before_commit=race)
    assert (ours.first_row_id, ours.added_rows) == (4, 2)  # 1 row, then the winner's 3
    check_lineage(table)


def test_a_v2_table_upgraded_to_v3_gives_old_files_row_ids_on_the_next_commit(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog)
    table.append([1, 2])
    table.append([3])
    upgraded = upgrade_format_version(sqlite_catalog, table.identifier, 3)
    assert (upgraded.format_version, upgraded.next_row_id) == (3, 0)
    assert upgraded.current_snapshot().first_row_id is None  # existing snapshots stay as they were
    assert table.ids() == [1, 2, 3]
    snapshot = table.append([4, 5])[1]
    assert (snapshot.first_row_id, snapshot.added_rows) == (0, 5)  # the two old manifests too
    check_lineage(table)


def test_pyiceberg_reads_a_v3_table(catalog: Catalog, pyiceberg_uri: str, warehouse: Path) -> None:
    table = CommitTable.create(catalog, "db.events", properties=V3)
    table.append([1, 2, 3])
    table.append([4])
    oracle = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    try:
        loaded = oracle.load_table("db.events")
        assert loaded.metadata.format_version == 3
        assert loaded.metadata.next_row_id == 4
        assert id_data(loaded.scan().to_arrow().to_pylist()) == id_data(table.rows())
    finally:
        oracle.close()


@pytest.mark.oracle
def test_iceberg_java_reads_row_lineage_as_the_spec_defines_it(
    sqlite_uri: str, warehouse: Path, iceberg_oracle: Any
) -> None:
    name = f"floe_{uuid.uuid4().hex[:8]}"
    with SqlCatalog(sqlite_uri, str(warehouse), name=name) as catalog:
        table = CommitTable.create(catalog, "db.events", properties=V3)
        table.append([1, 2, 3])
        table.commit(FastAppend([table.write_data([4, 5]), table.write_data([6])]))
        expected = {}
        for data_file, sequence_number in live_data_files(table, table.current()):
            for pos, row in enumerate(pq.read_table(data_file.file_path).to_pylist()):
                expected[row["id"]] = (data_file.first_row_id + pos, sequence_number)
    use_jdbc_catalog(iceberg_oracle, name, sqlite_uri, warehouse)
    java = iceberg_oracle.sql(f"SELECT id, _row_id, _last_updated_sequence_number FROM {name}.db.events").to_pylist()
    assert {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in java} == expected
    assert sorted(v[0] for v in expected.values()) == list(range(6))


@pytest.mark.oracle
def test_compaction_keeps_row_ids_and_deletion_vectors_apply(
    sqlite_uri: str, warehouse: Path, iceberg_oracle: Any
) -> None:
    """Rows a compaction moves keep ``_row_id`` and ``_last_updated_sequence_number`` (spec: "the
    row's existing non-null _row_id must be copied"), and the rows a DV deleted stay deleted."""
    from prometheus_client import CollectorRegistry

    from compaction.maintenance import MaintenanceOptions
    from compaction.metrics import CompactionMetrics
    from compaction.runner import CompactionOptions, CompactionRunner, RunResult
    from table.deletes.writers import DeletionVectorWriter
    from tests.compaction.conftest import small_target

    name = f"floe_{uuid.uuid4().hex[:8]}"
    use_jdbc_catalog(iceberg_oracle, name, sqlite_uri, warehouse)
    query = f"SELECT id, _row_id, _last_updated_sequence_number FROM {name}.db.events"
    with SqlCatalog(sqlite_uri, str(warehouse), name=name) as catalog:
        table = CommitTable.create(catalog, "db.events", properties=V3)
        first, _ = table.append([1, 2, 3, 4])
        table.append([5, 6])
        table.append([7])
        writer = DeletionVectorWriter(table.io, f"{table.location}/data")
        writer.delete(first.file_path, [1], first.spec_id, first.partition)
        table.commit(RowDelta([], writer.close()))
        before = {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in iceberg_oracle.sql(query).to_pylist()}
        assert sorted(before) == [1, 3, 4, 5, 6, 7]

        options = CompactionOptions(rewrite=small_target(**{"min-input-files": "2"}), maintenance=MaintenanceOptions(
            remove_dangling_deletes=False, expire_snapshots=False, remove_orphans=False))
        report = CompactionRunner(catalog, "db.events", options, CompactionMetrics(CollectorRegistry())).run()
        assert report.result == RunResult.SUCCESS and report.groups
        assert len(live_data_files(table, table.current())) == 1
        check_lineage(table)
    after = {r["id"]: (r["_row_id"], r["_last_updated_sequence_number"]) for r in iceberg_oracle.sql(query).to_pylist()}
    assert after == before
