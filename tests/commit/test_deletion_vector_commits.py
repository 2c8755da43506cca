"""Deletion vectors committed to a v3 table (spec "Deletion Vectors"): written as Puffin blobs by
:class:`DeletionVectorWriter`, committed with :class:`RowDelta`, read back by Floe's reader and by
pyiceberg 0.12. A second DV for a data file merges the first and replaces it in the same commit;
a commit that would leave two live DVs for one data file is refused."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Sequence

import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyIcebergCatalog

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.format_upgrade import upgrade_format_version
from commit.metadata_committer import PendingCommit
from commit.operations.errors import DuplicateDeletionVectors
from commit.operations.row_delta import RowDelta
from table.deletes.index import referenced_data_file
from table.deletes.writers import DeletionVectorWriter, PositionDeleteWriter
from table.errors import ValidationError
from table.manifest import DataFile, ManifestEntryStatus, read_manifest_entries
from tests.commit.producer_support import CommitTable
from tests.commit.test_catalog_oracles import id_data, use_jdbc_catalog

V3 = {"format-version": "3"}


def dv_writer(table: CommitTable) -> DeletionVectorWriter:
    return DeletionVectorWriter(table.io, f"{table.location}/data")


def deletion_vectors(table: CommitTable, *deletes: tuple[DataFile, Sequence[int]], replace: bool = True) -> RowDelta:
    """A RowDelta adding a DV per data file, merged with the file's live DV when ``replace``."""
    writer = dv_writer(table)
    for data_file, positions in deletes:
        if replace:
            writer.merge_existing(data_file.file_path, live_deletes_of(table, data_file), data_file.spec_id,
                                  data_file.partition)
        writer.delete(data_file.file_path, list(positions), data_file.spec_id, data_file.partition)
    return RowDelta([], writer.close(), removed_delete_files=writer.replaced)


def live_deletes(table: CommitTable) -> list[DataFile]:
    return [
        e.data_file
        for m in table.manifests()
        for e in read_manifest_entries(table.io, m)
        if e.status != ManifestEntryStatus.DELETED and e.data_file.content != 0
    ]


def live_deletes_of(table: CommitTable, data_file: DataFile) -> list[DataFile]:
    return [d for d in live_deletes(table) if d.referenced_data_file == data_file.file_path
            or (not d.is_deletion_vector and d.content == 1)]


@pytest.fixture()
def table(sqlite_catalog: Catalog) -> CommitTable:
    return CommitTable.create(sqlite_catalog, partitioned=True, properties=V3)


def test_a_deletion_vector_deletes_its_positions(table: CommitTable) -> None:
    data_file, _ = table.append([1, 2, 3, 4, 5, 6])
    snapshot = table.commit(deletion_vectors(table, (data_file, [0, 2])))
    assert snapshot.operation == "delete"
    assert table.ids() == [2, 4, 5, 6]
    [dv] = live_deletes(table)
    assert dv.is_deletion_vector and dv.file_path.endswith(".puffin") and dv.record_count == 2
    assert dv.referenced_data_file == data_file.file_path and dv.partition == data_file.partition


def test_a_second_vector_merges_and_replaces_the_first(table: CommitTable) -> None:
    data_file, _ = table.append([1, 2, 3, 4, 5, 6])
    table.commit(deletion_vectors(table, (data_file, [0, 2])))
    table.commit(deletion_vectors(table, (data_file, [4])))
    assert table.ids() == [2, 4, 6]
    [dv] = live_deletes(table)  # never two for one data file
    assert dv.record_count == 3


def test_vectors_sharing_a_puffin_file_are_replaced_one_by_one(table: CommitTable) -> None:
    first, _ = table.append([1, 2, 3])
    second, _ = table.append([4, 5, 6])
    table.commit(deletion_vectors(table, (first, [0]), (second, [0])))
    assert len({d.file_path for d in live_deletes(table)}) == 1  # one Puffin file, two blobs
    table.commit(deletion_vectors(table, (second, [1])))
    assert table.ids() == [2, 3, 6]
    assert sorted(d.record_count for d in live_deletes(table)) == [1, 2]


def test_a_concurrent_vector_for_the_same_file_is_refused(table: CommitTable) -> None:
    data_file, _ = table.append([1, 2, 3, 4])
    ours = deletion_vectors(table, (data_file, [1]))

    def theirs(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            table.commit(deletion_vectors(table, (data_file, [3])))

    with pytest.raises(DuplicateDeletionVectors, match=data_file.file_path):
        table.commit(ours, before_commit=theirs)
    assert table.ids() == [1, 2, 3]
    assert len(live_deletes(table)) == 1


def test_an_upgraded_table_folds_position_deletes_into_the_vector(sqlite_catalog: Catalog) -> None:
    table = CommitTable.create(sqlite_catalog, partitioned=True)
    data_file, _ = table.append([1, 2, 3, 4])
    table.commit(RowDelta([], [table.write_position_deletes(data_file, [0])]))
    upgrade_format_version(sqlite_catalog, table.identifier, 3)
    assert table.ids() == [2, 3, 4]  # the v2 position delete still applies
    table.commit(deletion_vectors(table, (data_file, [3])))
    assert table.ids() == [2, 3]
    [dv] = live_deletes(table)  # the position delete file named one data file: replaced
    assert dv.is_deletion_vector and dv.record_count == 2


def test_pyiceberg_reads_deletion_vectors(catalog: Catalog, pyiceberg_uri: str, warehouse: Path) -> None:
    table = CommitTable.create(catalog, "db.events", partitioned=True, properties=V3)
    first, _ = table.append([1, 2, 3, 4])
    second, _ = table.append([5, 6], category="b")
    table.commit(deletion_vectors(table, (first, [0, 3]), (second, [1])))
    table.commit(deletion_vectors(table, (first, [1])))
    floe_rows = id_data(table.rows())
    assert floe_rows == [(3, "v3"), (5, "v5")]
    oracle = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    try:
        assert id_data(oracle.load_table("db.events").scan().to_arrow().to_pylist()) == floe_rows
    finally:
        oracle.close()


def test_a_dangling_vector_is_removed_and_its_puffin_neighbour_kept(table: CommitTable) -> None:
    from commit.operations.delete_files import DeleteFiles
    from compaction.maintenance.dangling_deletes import remove_dangling_deletes

    first, _ = table.append([1, 2, 3])
    second, _ = table.append([4, 5, 6])
    table.commit(deletion_vectors(table, (first, [0]), (second, [0])))
    table.commit(DeleteFiles([first]))  # the first DV now applies to no live data file
    result = remove_dangling_deletes(table.catalog, table.identifier)
    assert result.snapshot_id is not None
    [kept] = live_deletes(table)
    assert kept.referenced_data_file == second.file_path
    assert table.ids() == [5, 6]


def test_expiry_and_orphan_removal_keep_live_puffin_files_and_drop_replaced_ones(table: CommitTable) -> None:
    from compaction.maintenance.expire_snapshots import ExpiryPolicy, expire_snapshots
    from compaction.maintenance.orphan_files import remove_orphan_files

    data_file, _ = table.append([1, 2, 3, 4])
    table.commit(deletion_vectors(table, (data_file, [0])))
    [replaced] = live_deletes(table)
    table.commit(deletion_vectors(table, (data_file, [1])))  # merges and replaces the first DV
    [live] = live_deletes(table)
    expire_snapshots(table.catalog, table.identifier, ExpiryPolicy(older_than_ms=0, retain_last=1))
    assert not Path(replaced.file_path).exists(), "the replaced DV's Puffin file goes with the expired snapshots"
    day = 24 * 3600 * 1000
    remove_orphan_files(table.catalog, table.identifier, day, clock_ms=lambda: 10**15)
    assert Path(live.file_path).exists()
    assert table.ids() == [3, 4]


@pytest.mark.oracle
def test_an_upgraded_table_reads_identically_in_all_three_readers(
    sqlite_uri: str, warehouse: Path, iceberg_oracle: Any
) -> None:
    name = f"floe_{uuid.uuid4().hex[:8]}"
    # no table cache: each Java read sees the latest commit
    use_jdbc_catalog(iceberg_oracle, name, sqlite_uri, warehouse, **{"cache-enabled": "false"})
    pyiceberg_uri = sqlite_uri
    with SqlCatalog(sqlite_uri, str(warehouse), name=name) as catalog:
        table = CommitTable.create(catalog, "db.events", partitioned=True)
        first, _ = table.append([1, 2, 3, 4])
        second, _ = table.append([5, 6, 7], category="b")
        table.commit(RowDelta([], [table.write_position_deletes(first, [0]), table.write_position_deletes(second, [2])]))

        def all_three_agree(expected: list[int]) -> None:
            assert table.ids() == expected
            java = iceberg_oracle.sql(f"SELECT id FROM {name}.db.events").column("id").to_pylist()
            assert sorted(java) == expected
            oracle = PyIcebergCatalog(name, uri=pyiceberg_uri, warehouse=warehouse.as_uri())
            try:
                assert sorted(oracle.load_table("db.events").scan().to_arrow().column("id").to_pylist()) == expected
            finally:
                oracle.close()

        all_three_agree([2, 3, 4, 5, 6])
        upgrade_format_version(catalog, table.identifier, 3)
        all_three_agree([2, 3, 4, 5, 6])  # v2 position deletes stay valid
        table.append([8])
        all_three_agree([2, 3, 4, 5, 6, 8])
        table.commit(deletion_vectors(table, (first, [3])))  # folds the position delete of `first` in
        all_three_agree([2, 3, 5, 6, 8])
        kinds = sorted((d.is_deletion_vector, referenced_data_file(d)) for d in live_deletes(table))
        assert kinds == [(False, second.file_path), (True, first.file_path)]


def test_rewriting_position_deletes_folds_them_into_vectors(catalog: Catalog, pyiceberg_uri: str,
                                                            warehouse: Path) -> None:
    from compaction.maintenance.position_deletes_to_vectors import rewrite_position_deletes

    table = CommitTable.create(catalog, partitioned=True)
    first, _ = table.append([1, 2, 3, 4])
    second, _ = table.append([5, 6, 7])
    third, _ = table.append([8, 9])
    md = table.metadata()
    both = PositionDeleteWriter(table.io, f"{md.location}/data", md.schema(), md.spec(), first.partition)
    both.delete(first.file_path, 0)
    both.delete(second.file_path, 1)
    [shared] = both.close()  # one v2 file naming two data files
    table.commit(RowDelta([], [shared, table.write_position_deletes(third, [0])]))
    upgrade_format_version(catalog, table.identifier, 3)
    table.commit(deletion_vectors(table, (second, [2])))  # merges `shared` for the second file only
    before = table.ids()
    assert before == [2, 3, 4, 5, 9]

    result = rewrite_position_deletes(catalog, table.identifier)
    assert (result.vectors, result.removed_position_deletes, result.kept_position_deletes) == (2, 2, 0)
    assert table.current().operation == "replace"
    assert table.ids() == before
    deletes = live_deletes(table)
    assert all(d.is_deletion_vector for d in deletes) and len(deletes) == 3  # one per data file
    assert rewrite_position_deletes(catalog, table.identifier).snapshot_id is None  # nothing left
    oracle = PyIcebergCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
    try:
        assert sorted(oracle.load_table(table.identifier).scan().to_arrow().column("id").to_pylist()) == before
    finally:
        oracle.close()


def test_rewriting_position_deletes_needs_a_v3_table(sqlite_catalog: Catalog) -> None:
    from compaction.maintenance.position_deletes_to_vectors import rewrite_position_deletes

    table = CommitTable.create(sqlite_catalog)
    with pytest.raises(ValidationError, match="floe table upgrade db.t --format-version 3"):
        rewrite_position_deletes(sqlite_catalog, table.identifier)
