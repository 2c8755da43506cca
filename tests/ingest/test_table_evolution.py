"""ingest.driver.table_setup: an existing table evolves at start-up when the configuration adds to it.

Real SQLite catalogs on local disk: a table is created by ``ensure_table``,
a batch is written with the table's own writers and committed through the
exactly-once commit, then the configuration changes and ``ensure_table``
runs again. The rows written before must still read (with null in a new
column), with Floe's reader and, in one test, with Iceberg's Java runtime.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import pytest

from commit.catalog.base import Catalog, LoadedTable
from commit.catalog.sql.catalog import SqlCatalog
from commit.batch_commit import commit_batch
from commit.metadata_committer import CommitFiles, MetadataCommitter, PendingCommit
from ingest.tasks.decode_records import DecodeSpec
from ingest.job import TableSpec
from ingest.driver.table_setup import TableMismatchError, ensure_table, evolve_table
from table.arrow_schema import cast_to_schema, schema_to_arrow
from table.io import FileIO
from table.parquet.partitioned import write_partitioned
from table.scan import TableScan
from table.schema import Schema
from table.types import IntegerType, LongType, NestedField, StringType, StructType

IDENT = "shop.orders"


def schema(*, qty: Any = IntegerType(), email: bool = False, note: bool = False) -> Schema:
    """The orders schema; the keyword arguments are what a later configuration changes."""
    customer = [NestedField(4, "name", StringType())] + ([NestedField(5, "email", StringType())] if email else [])
    fields = [
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "qty", qty),
        NestedField(3, "customer", StructType(*customer)),
    ]
    if note:
        fields.append(NestedField(6, "note", StringType()))
    return Schema(*fields, identifier_field_ids=[1])


def spec(table_schema: Schema, **kwargs: Any) -> TableSpec:
    kwargs.setdefault("partition", (("bucket[4]", "id"),))
    return TableSpec(IDENT, DecodeSpec(table_schema, mode="append"), **kwargs)


@pytest.fixture()
def catalog(tmp_path: Path):
    with SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")) as opened:
        yield opened


def append(catalog: Catalog, rows: Sequence[dict[str, Any]], batch: int) -> None:
    """Write ``rows`` in the table's current schema and commit them as Kafka batch ``batch``."""
    loaded = catalog.load_table(IDENT)
    current = loaded.metadata.schema()
    data = cast_to_schema(pa.Table.from_pylist(list(rows), schema=schema_to_arrow(current)), current)
    io = FileIO.for_location(loaded.metadata_location)
    files = write_partitioned(io, loaded.metadata.location, current, loaded.metadata.spec(), [data])
    commit_batch(catalog, IDENT, "writer-1", batch, {"orders": {0: (batch * 10, batch * 10 + 10)}}, files,
                 fast_append=True)


def rows(loaded: LoadedTable) -> list[dict[str, Any]]:
    scan = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata)
    return sorted(scan.to_arrow().to_pylist(), key=lambda r: r["id"])


BEFORE = [{"id": i, "qty": i * 10, "customer": {"name": f"c{i}"}} for i in range(3)]


def test_adding_a_column_evolves_the_table_and_old_rows_read_null(catalog, caplog):
    ensure_table(catalog, spec(schema()))
    append(catalog, BEFORE, 0)
    caplog.set_level(logging.INFO, logger="floe.ingest")

    loaded = ensure_table(catalog, spec(schema(note=True)))

    note = loaded.metadata.schema().find_field("note")
    assert (note.field_id, note.required, loaded.metadata.last_column_id) == (5, False, 5)
    assert loaded.metadata.current_schema_id == 1 and len(loaded.metadata.schemas) == 2
    assert [r.getMessage() for r in caplog.records if "evolved" in r.getMessage()] == [
        "evolved table shop.orders: add column note (string)"
    ]
    assert rows(loaded) == [{**r, "note": None} for r in BEFORE]
    append(catalog, [{"id": 7, "qty": 1, "customer": {"name": "c7"}, "note": "new"}], 1)
    assert rows(catalog.load_table(IDENT))[-1] == {"id": 7, "qty": 1, "customer": {"name": "c7"}, "note": "new"}


def test_widening_int_to_long_keeps_the_old_rows(catalog):
    ensure_table(catalog, spec(schema()))
    append(catalog, BEFORE, 0)

    loaded = ensure_table(catalog, spec(schema(qty=LongType())))

    assert loaded.metadata.schema().find_field("qty").field_type == LongType()
    assert loaded.metadata.last_column_id == 4, "a widening takes no new id"
    table = TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()
    assert table.schema.field("qty").type == pa.int64()
    assert rows(loaded) == BEFORE
    append(catalog, [{"id": 9, "qty": 2**40, "customer": None}], 1)
    assert rows(catalog.load_table(IDENT))[-1]["qty"] == 2**40


def test_a_field_added_inside_a_struct_reads_null_in_old_rows(catalog):
    ensure_table(catalog, spec(schema()))
    append(catalog, BEFORE, 0)

    loaded = ensure_table(catalog, spec(schema(email=True)))

    assert loaded.metadata.schema().find_field("customer.email").field_id == 5
    assert rows(loaded) == [{**r, "customer": {**r["customer"], "email": None}} for r in BEFORE]


def test_a_matching_table_is_left_alone(catalog):
    first = ensure_table(catalog, spec(schema()))
    again = ensure_table(catalog, spec(schema()))
    assert again.metadata_location == first.metadata_location


def test_a_refused_difference_raises_with_the_fix_and_changes_nothing(catalog):
    created = ensure_table(catalog, spec(schema(qty=LongType())))
    narrowed_and_noted = spec(schema(note=True), partition=())

    with pytest.raises(TableMismatchError) as raised:
        ensure_table(catalog, narrowed_and_noted)

    message = str(raised.value)
    assert message.startswith("shop.orders does not fit the configuration: column 'qty': long in the table, "
                              "int in the configuration: Iceberg cannot narrow a type. "
                              "Fix: change the configuration back to long; partition spec: ")
    assert "ALTER TABLE shop.orders DROP PARTITION FIELD bucket(4, id)" in message
    assert "note" not in message, "the evolvable add is not a problem, and it is not applied either"
    assert catalog.load_table(IDENT).metadata_location == created.metadata_location
    copy = pickle.loads(pickle.dumps(raised.value))
    assert (str(copy), copy.detail) == (message, raised.value.detail)


def test_after_a_lost_race_the_update_is_rebuilt_from_the_winners_table(catalog, tmp_path):
    ensure_table(catalog, spec(schema()))
    append(catalog, BEFORE, 0)
    wanted = spec(schema(qty=LongType(), note=True))

    def meanwhile(pending: PendingCommit) -> None:
        if pending.attempt == 1:  # another replica, configured with the widening only, starts first
            evolve_table(catalog, spec(schema(qty=LongType())))

    loaded = evolve_table(catalog, wanted, before_commit=meanwhile)

    evolved = loaded.metadata.schema()
    assert (evolved.find_field("qty").field_type, evolved.find_field("note").field_id) == (LongType(), 5)
    assert [s.schema_id for s in loaded.metadata.schemas] == [0, 1, 2]
    assert rows(loaded) == [{**r, "note": None} for r in BEFORE]
    metadata_dir = Path(loaded.metadata.location) / "metadata"
    on_disk = {str(p) for p in metadata_dir.glob("*.metadata.json")}
    known = {loaded.metadata_location, *(e.metadata_file for e in loaded.metadata.metadata_log)}
    assert on_disk == known, "the lost attempt's metadata file is deleted"


def test_a_race_with_a_replica_evolving_the_same_way_commits_nothing_more(catalog):
    ensure_table(catalog, spec(schema()))
    wanted = spec(schema(note=True))

    def meanwhile(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            evolve_table(catalog, wanted)

    loaded = evolve_table(catalog, wanted, before_commit=meanwhile)

    assert len(loaded.metadata.schemas) == 2 and loaded.metadata.schema().find_field("note").field_id == 5
    metadata_dir = Path(loaded.metadata.location) / "metadata"
    assert len(list(metadata_dir.glob("*.metadata.json"))) == 2, "created, evolved once; the loser's file is gone"


def test_the_evolution_keeps_a_concurrent_metadata_change(catalog):
    ensure_table(catalog, spec(schema()))

    def meanwhile(pending: PendingCommit) -> None:
        if pending.attempt == 1:
            pointer = catalog.load_pointer(IDENT)
            other = MetadataCommitter(catalog, IDENT, CommitFiles(FileIO.for_location(pointer.metadata_location)))
            other.commit(lambda loaded, _: loaded.metadata.set_properties({"owner": "ops"}), lambda _: False)

    loaded = evolve_table(catalog, spec(schema(note=True)), before_commit=meanwhile)

    assert loaded.metadata.properties["owner"] == "ops"
    assert loaded.metadata.schema().find_field("note").field_id == 5


@pytest.mark.oracle
def test_iceberg_java_reads_the_evolved_table(catalog, iceberg_oracle):
    ensure_table(catalog, spec(schema()))
    append(catalog, BEFORE, 0)
    ensure_table(catalog, spec(schema(qty=LongType(), email=True, note=True)))
    after = {"id": 5, "qty": 2**40, "customer": {"name": "c5", "email": "e5"}, "note": "n5"}
    append(catalog, [after], 1)

    loaded = catalog.load_table(IDENT)
    java = iceberg_oracle.call("tests.support.oracle_ops:read_by_metadata_location",
                               metadata_location=loaded.metadata_location)
    expected = [{**r, "customer": {**r["customer"], "email": None}, "note": None} for r in BEFORE] + [after]
    assert sorted(java.to_pylist(), key=lambda r: r["id"]) == expected
    assert java.schema.field("qty").type == pa.int64()
    assert rows(loaded) == expected


def test_a_table_created_from_a_config_with_the_format_version_property_is_that_version(catalog, tmp_path: Path):
    from service.config import load_config  # the configuration, as a user writes it, through to the created table
    from service.jobs import build_jobs

    config = tmp_path / "floe.yaml"
    config.write_text(f"""
kafka: {{bootstrap_servers: "localhost:9092"}}
catalog: {{uri: "sqlite:///{tmp_path / 'catalog.db'}", warehouse: "{tmp_path / 'warehouse'}"}}
checkpoint_location: {tmp_path / 'checkpoints'}
tables:
  - {{identifier: {IDENT}, topics: [orders], schema: [{{name: id, type: long}}], properties: {{format-version: "3"}}}}
""")
    [job] = build_jobs(load_config(config, {}))
    loaded = ensure_table(catalog, job.table)
    assert loaded.metadata.format_version == 3
