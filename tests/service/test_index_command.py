"""``floe index check|rebuild`` on real tables in a SQLite catalog, through the CLI entry point."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from commit.catalog.sql.catalog import SqlCatalog
from commit.key_index.manifest import KEY_INDEX_PROPERTY, IndexManifest
from commit.key_index.segments import POS
from commit.key_index.store import (
    current_manifest,
    manifest_path,
    read_segment,
    segment_path,
    write_manifest,
    write_segment,
)
from commit.metadata_committer import commit_metadata_change
from commit.operations.row_delta import RowDelta
from service.cli import EXIT_FAILED, EXIT_OK, main
from table.io import FileIO
from table.scan import TableScan
from table.schema import Schema
from tests.commit.producer_support import SCHEMA, CommitTable


def _table(tmp_path: Path, *, key: bool = True,
           properties: Optional[dict[str, str]] = None) -> tuple[list[str], CommitTable]:
    """The CLI's catalog options, and db.t keyed by ``id`` (unless ``key`` is False):
    two data files and a position delete."""
    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", tmp_path / "wh"
    warehouse.mkdir()
    catalog = SqlCatalog(uri, str(warehouse))
    catalog.create_namespace("db")
    schema = Schema(*SCHEMA.fields, identifier_field_ids=(1,) if key else ())
    loaded = catalog.create_table("db.t", schema, properties=properties)
    table = CommitTable(catalog, "db.t", FileIO.for_location(loaded.metadata_location))
    table.append(range(0, 10))  # the first data file: ids 0..9 at positions 0..9
    second, _ = table.append(range(10, 20))
    table.commit(RowDelta(delete_files=[table.write_position_deletes(second, [0, 3])]))  # ids 10 and 13 go
    return ["--catalog-uri", uri, "--warehouse", str(warehouse)], table


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["index", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _index(table: CommitTable) -> IndexManifest:
    manifest = current_manifest(table.io, table.metadata())
    assert manifest is not None
    return manifest


def _files(manifest: IndexManifest) -> list[str]:
    return [s.path for s in manifest.segments] + [r.path for r in manifest.remaps]


def test_rebuild_then_check_is_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path)
    code, out, err = _run(capsys, "rebuild", "db.t", *options)
    assert code == EXIT_OK, err
    assert "rebuilt the key index of db.t at snapshot" in out and ": 18 keys in 16 buckets" in out
    assert "building the key index of db.t" in err and "Traceback" not in err  # progress, on stderr
    manifest = _index(table)
    assert manifest.snapshot_id == table.current().snapshot_id and manifest.key_ids == (1,)
    assert table.metadata().properties[KEY_INDEX_PROPERTY] in out

    code, out, err = _run(capsys, "check", "db.t", *options)
    assert code == EXIT_OK, out + err
    assert "problems:   none" in out.splitlines()
    assert "entries:    18 (18 live keys)" in out and "key fields: id (id 1)" in out
    assert f"snapshot:   {manifest.snapshot_id} (the head)" in out


def test_check_reports_an_index_the_table_moved_past(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path)
    assert _run(capsys, "rebuild", "db.t", *options)[0] == EXIT_OK
    old = _index(table)
    table.append(range(20, 25))  # a foreign writer: data files, the index left alone

    code, out, err = _run(capsys, "check", "db.t", *options)
    assert code == EXIT_FAILED and "Traceback" not in err
    problems = [line for line in out.splitlines() if line.startswith("problem:")]
    assert f"the index describes snapshot {old.snapshot_id}, not the head {table.current().snapshot_id}" in problems[0]
    assert sum("the index says no entry" in p for p in problems) == 5, problems

    assert _run(capsys, "rebuild", "db.t", *options)[0] == EXIT_OK  # the new index retires the old one's files
    new = _index(table)
    assert set(_files(old)) <= {path for path, _ in new.retired}, "kept for readers in flight, deleted later"
    assert all(os.path.exists(path) for path in _files(new))
    assert _run(capsys, "check", "db.t", *options)[0] == EXIT_OK


def test_check_reports_entries_of_deleted_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path)
    assert _run(capsys, "rebuild", "db.t", *options)[0] == EXIT_OK
    first = _data_file_holding(table, 0)
    table.commit(RowDelta(delete_files=[table.write_position_deletes(first, [0])]))  # delete-only: index still current

    code, out, _ = _run(capsys, "check", "db.t", *options)
    assert code == EXIT_FAILED
    assert "problem:    the index holds 18 live keys, the table 17 live rows: 1 stale entries" in out.splitlines()


def test_check_reports_a_wrong_position(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path, properties={"floe.key-index.buckets": "1"})
    assert _run(capsys, "rebuild", "db.t", *options)[0] == EXIT_OK
    good = _index(table)
    [base] = good.segments
    rows = read_segment(table.io, base)
    moved = pc.if_else(pc.equal(rows.column(0), 5), pc.add(rows.column(POS), 1), rows.column(POS))
    location = base.path.rsplit("/", 2)[0]
    wrong = rows.set_column(rows.schema.get_field_index(POS), POS, moved)
    ref = write_segment(table.io, segment_path(location, 0), 0, wrong, base=True)
    _point_at(table, replace(good, segments=(ref,)), location)

    code, out, _ = _run(capsys, "check", "db.t", *options)
    assert code == EXIT_FAILED
    [problem] = [line for line in out.splitlines() if line.startswith("problem:")]
    assert "key id=5: its live row is " in problem and " at 5, the index says " in problem and problem.endswith(" at 6")


def test_check_reports_a_missing_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path)
    assert _run(capsys, "rebuild", "db.t", *options)[0] == EXIT_OK
    gone = _index(table).segments[0].path
    os.remove(gone)
    code, out, err = _run(capsys, "check", "db.t", *options)
    assert code == EXIT_FAILED and "Traceback" not in err
    assert f"problem:    index file {gone} is missing" in out.splitlines()


def test_rebuild_replaces_an_index_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path)
    broken = f"{table.location}.floe-key-index/manifests/0-broken.json"
    table.io.write_bytes(broken, b"{not json")
    commit_metadata_change(table.catalog, table.identifier,
                           lambda loaded, _: loaded.metadata.set_properties({KEY_INDEX_PROPERTY: broken}),
                           lambda md: md.properties.get(KEY_INDEX_PROPERTY) == broken, what="test index")
    assert _run(capsys, "check", "db.t", *options)[0] == EXIT_FAILED

    code, _, err = _run(capsys, "rebuild", "db.t", *options)
    assert code == EXIT_OK and "cannot be read" in err and "Traceback" not in err
    assert _run(capsys, "check", "db.t", *options)[0] == EXIT_OK


def test_a_table_without_an_index_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, _ = _table(tmp_path)
    code, out, err = _run(capsys, "check", "db.t", *options)
    assert (code, out) == (EXIT_FAILED, "")
    assert err.strip().splitlines() == [
        f"floe index check: table db.t has no key index ({KEY_INDEX_PROPERTY} is not set); "
        "build one with 'floe index rebuild db.t'"
    ]


def test_rebuild_refuses_a_table_without_a_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options, table = _table(tmp_path, key=False)
    code, out, err = _run(capsys, "rebuild", "db.t", *options)
    assert (code, out) == (EXIT_FAILED, "")
    assert err.strip().splitlines() == [
        "floe index rebuild: table db.t has neither a key index nor identifier fields, so nothing says which "
        "columns are its key; a Floe upsert job builds the index, with its key, at its first batch"
    ]
    assert KEY_INDEX_PROPERTY not in table.metadata().properties


def test_rebuild_refuses_when_data_changed_meanwhile_and_deletes_its_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import service.index_command as command

    options, table = _table(tmp_path)
    built: list[Any] = []
    original = command.build_index

    def build_then_append(*args: Any, **kwargs: Any) -> Any:
        built.append(original(*args, **kwargs))
        table.append(range(100, 103))  # another writer commits data files before the rebuild's commit
        return built[-1]

    monkeypatch.setattr(command, "build_index", build_then_append)
    code, out, err = _run(capsys, "rebuild", "db.t", *options)
    assert (code, out) == (EXIT_FAILED, "") and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        "floe index rebuild: table db.t changed data files while the key index was being rebuilt")
    assert KEY_INDEX_PROPERTY not in table.metadata().properties
    index_dir = Path(table.location + ".floe-key-index")
    assert built and not [p for p in index_dir.rglob("*") if p.is_file()], "the rebuild's files are deleted"


def _point_at(table: CommitTable, manifest: IndexManifest, location: str) -> None:
    """Commit ``manifest`` as the table's index (what a buggy writer might do)."""
    path = manifest_path(location, manifest.snapshot_id or 0)
    write_manifest(table.io, path, manifest)
    commit_metadata_change(table.catalog, table.identifier,
                           lambda loaded, _: loaded.metadata.set_properties({KEY_INDEX_PROPERTY: path}),
                           lambda md: md.properties.get(KEY_INDEX_PROPERTY) == path, what="test index")


def _data_file_holding(table: CommitTable, key: int) -> Any:
    """The live data file whose rows include ``key``."""
    for task in TableScan(table.io, table.metadata()).plan_files():
        with table.io.open_input(task.data_file.file_path) as source:
            if key in pq.read_table(source, columns=["id"]).column("id").to_pylist():
                return task.data_file
    raise AssertionError(f"no data file holds {key}")
