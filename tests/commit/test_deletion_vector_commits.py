"""Deletion vectors committed to a v3 table (spec "Deletion Vectors"): written as Puffin blobs by
:class:`DeletionVectorWriter`, committed with :class:`RowDelta`, read back by Floe's reader and by
pyiceberg 0.12. A second DV for a data file merges the first and replaces it in the same commit;
a commit that would leave two live DVs for one data file is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from commit.catalog import Catalog
from commit.format_upgrade import upgrade_format_version
from commit.metadata_committer import PendingCommit
from commit.operations.errors import DuplicateDeletionVectors
from commit.operations.row_delta import RowDelta
from table.deletes.writers import DeletionVectorWriter
from table.manifest import DataFile, ManifestEntryStatus, read_manifest_entries
from tests.commit.producer_support import CommitTable
from tests.commit.test_catalog_oracles import id_data

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
    oracle = SqlCatalog("floe", uri=pyiceberg_uri, warehouse=warehouse.as_uri())
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
