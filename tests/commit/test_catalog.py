"""Catalog operations on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

import psycopg
import pytest

from commit.catalog.base import Catalog, TablePointer
from commit.catalog.sql.catalog import PropertiesUpdate, SqlCatalog
from commit.errors import (
    CatalogDatabaseError,
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    InvalidArgument,
    NamespaceAlreadyExists,
    NamespaceNotEmpty,
    NoSuchNamespace,
    NoSuchTable,
    TableAlreadyExists,
)
from commit.identifiers import TableIdentifier
from table.io import MissingFileError
from table.schema import Schema

# -- namespaces ----------------------------------------------------------------


def test_create_namespace_with_properties(catalog: Catalog) -> None:
    catalog.create_namespace("db", {"owner": "floe", "comment": "landing zone"})

    assert catalog.namespace_exists("db")
    assert catalog.namespace_exists(("db",))
    assert not catalog.namespace_exists("other")
    assert catalog.list_namespaces() == [("db",)]
    assert catalog.load_namespace_properties("db") == {"owner": "floe", "comment": "landing zone"}


def test_create_existing_namespace_fails(catalog: Catalog) -> None:
    catalog.create_namespace("db")
    with pytest.raises(NamespaceAlreadyExists, match="'db'"):
        catalog.create_namespace("db", {"a": "b"})
    assert catalog.load_namespace_properties("db") == {}


def test_nested_namespaces_list_by_level(catalog: Catalog) -> None:
    for ns in ("a", "a.b", "a.b.c", "a.d", "ab", "x.y"):
        catalog.create_namespace(ns)

    assert catalog.list_namespaces() == [("a",), ("ab",), ("x",)]
    assert catalog.list_namespaces("a") == [("a", "b"), ("a", "d")]
    assert catalog.list_namespaces(("a", "b")) == [("a", "b", "c")]
    assert catalog.list_namespaces("a.b.c") == []
    # "x" was never created, but exists through its child, as in Java.
    assert catalog.namespace_exists("x")
    assert catalog.list_namespaces("x") == [("x", "y")]
    with pytest.raises(NoSuchNamespace, match="'nope'"):
        catalog.list_namespaces("nope")


def test_like_wildcards_and_case_do_not_leak_between_namespaces(catalog: Catalog) -> None:
    catalog.create_namespace("a_b.c")
    catalog.create_namespace("Db.x")
    catalog.create_namespace("pct%.y")

    assert not catalog.namespace_exists("aXb")  # "_" is not a wildcard
    assert not catalog.namespace_exists("db")  # SQLite's LIKE ignores case; the catalog must not
    assert catalog.namespace_exists("Db")
    assert not catalog.namespace_exists("pct")
    assert not catalog.namespace_exists("pctZ")
    assert catalog.list_namespaces("a_b") == [("a_b", "c")]


def test_update_and_remove_namespace_properties(catalog: Catalog) -> None:
    catalog.create_namespace("db", {"owner": "a", "keep": "1"})

    summary = catalog.update_namespace_properties("db", updates={"owner": "b", "new": "x"}, removals=["gone", "keep"])

    assert summary == PropertiesUpdate(updated=("new", "owner"), removed=("keep",), missing=("gone",))
    assert catalog.load_namespace_properties("db") == {"owner": "b", "new": "x"}


def test_removing_every_property_keeps_the_namespace(catalog: Catalog) -> None:
    catalog.create_namespace("db", {"owner": "a"})
    catalog.update_namespace_properties("db", removals=["owner"])
    assert catalog.namespace_exists("db")
    assert catalog.load_namespace_properties("db") == {}


def test_namespace_property_rules(catalog: Catalog) -> None:
    catalog.create_namespace("db")
    with pytest.raises(InvalidArgument, match="reserved"):
        catalog.update_namespace_properties("db", updates={"exists": "false"})
    with pytest.raises(InvalidArgument, match="reserved"):
        catalog.update_namespace_properties("db", removals=["exists"])
    with pytest.raises(InvalidArgument, match="both updated and removed"):
        catalog.update_namespace_properties("db", updates={"k": "v"}, removals=["k"])
    with pytest.raises(InvalidArgument, match="longer than 1000"):
        catalog.update_namespace_properties("db", updates={"k": "v" * 1001})
    with pytest.raises(NoSuchNamespace, match="'missing'"):
        catalog.update_namespace_properties("missing", updates={"k": "v"})
    with pytest.raises(NoSuchNamespace, match="'missing'"):
        catalog.load_namespace_properties("missing")


def test_drop_namespace(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db", {"owner": "a"})
    catalog.create_namespace("db.child")
    catalog.create_table("db.child.t", simple_schema)

    with pytest.raises(NamespaceNotEmpty, match=r"'db\.child'.*1 table"):
        catalog.drop_namespace("db.child")
    with pytest.raises(NamespaceNotEmpty, match=r"'db'.*child namespaces \['db\.child'\]"):
        catalog.drop_namespace("db")

    catalog.drop_table("db.child.t")
    catalog.drop_namespace("db.child")
    catalog.drop_namespace("db")

    assert not catalog.namespace_exists("db")
    assert catalog.list_namespaces() == []
    with pytest.raises(NoSuchNamespace):
        catalog.drop_namespace("db")


@pytest.mark.parametrize("bad", ["", "a..b", ".a", ("a.b",), ("a", ""), "x" * 256])
def test_invalid_namespace_names(catalog: Catalog, bad: Any) -> None:
    with pytest.raises(InvalidArgument):
        catalog.create_namespace(bad)


# -- tables --------------------------------------------------------------------


def test_create_table_writes_first_metadata_file(catalog: Catalog, simple_schema: Schema, warehouse: Path) -> None:
    catalog.create_namespace("db.events")

    created = catalog.create_table("db.events.clicks", simple_schema, properties={"owner": "floe"})

    metadata_dir = warehouse / "db" / "events" / "clicks" / "metadata"
    files = [p.name for p in metadata_dir.iterdir()]
    assert len(files) == 1 and re.fullmatch(r"00000-[0-9a-f-]{36}\.metadata\.json", files[0])
    assert created.metadata_location == str(metadata_dir / files[0])
    assert created.metadata.location == str(warehouse / "db" / "events" / "clicks")
    assert created.metadata.properties == {"owner": "floe"}
    assert catalog.load_pointer("db.events.clicks") == TablePointer(created.metadata_location, None)

    location, metadata, _ = catalog.load_table(("db", "events", "clicks"))
    assert location == created.metadata_location
    assert metadata.to_json() == created.metadata.to_json()
    assert catalog.table_exists("db.events.clicks")


def test_create_table_needs_namespace_and_free_name(catalog: Catalog, simple_schema: Schema, warehouse: Path) -> None:
    with pytest.raises(NoSuchNamespace, match="'db'"):
        catalog.create_table("db.t", simple_schema)
    assert list(warehouse.iterdir()) == []  # nothing written before the check

    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema)
    with pytest.raises(TableAlreadyExists, match=r"'db\.t'"):
        catalog.create_table("db.t", simple_schema)
    assert catalog.load_pointer("db.t").metadata_location == first.metadata_location


def test_table_location_from_argument_or_namespace_property(
    catalog: Catalog, simple_schema: Schema, tmp_path: Path
) -> None:
    catalog.create_namespace("db", {"location": str(tmp_path / "custom-ns")})
    by_property = catalog.create_table("db.a", simple_schema)
    explicit = catalog.create_table("db.b", simple_schema, location=str(tmp_path / "elsewhere" / "b") + "/")

    assert by_property.metadata.location == str(tmp_path / "custom-ns" / "a")
    assert by_property.metadata_location.startswith(str(tmp_path / "custom-ns" / "a" / "metadata") + "/00000-")
    assert explicit.metadata.location == str(tmp_path / "elsewhere" / "b")
    assert Path(explicit.metadata_location).is_file()


def test_list_tables_only_direct_children(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    catalog.create_namespace("db.sub")
    for name in ("zeta", "alpha", "sub.inner"):
        catalog.create_table(f"db.{name}", simple_schema)

    assert catalog.list_tables("db") == [TableIdentifier(("db",), "alpha"), TableIdentifier(("db",), "zeta")]
    assert catalog.list_tables("db.sub") == [TableIdentifier(("db", "sub"), "inner")]
    with pytest.raises(NoSuchNamespace):
        catalog.list_tables("other")


def test_rename_table_within_and_across_namespaces(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("a")
    catalog.create_namespace("b")
    created = catalog.create_table("a.t", simple_schema)

    catalog.rename_table("a.t", "a.u")
    catalog.rename_table("a.u", "b.v")

    assert not catalog.table_exists("a.t") and not catalog.table_exists("a.u")
    assert catalog.list_tables("a") == []
    assert catalog.load_pointer("b.v").metadata_location == created.metadata_location


def test_rename_table_errors(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("a")
    catalog.create_table("a.t", simple_schema)
    catalog.create_table("a.taken", simple_schema)

    with pytest.raises(NoSuchTable, match=r"'a\.missing'"):
        catalog.rename_table("a.missing", "a.x")
    with pytest.raises(NoSuchNamespace, match="'nowhere'"):
        catalog.rename_table("a.t", "nowhere.t")
    with pytest.raises(TableAlreadyExists, match=r"'a\.taken'"):
        catalog.rename_table("a.t", "a.taken")
    assert catalog.table_exists("a.t")


def test_drop_table(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    created = catalog.create_table("db.t", simple_schema)

    catalog.drop_table("db.t")

    assert not catalog.table_exists("db.t")
    assert Path(created.metadata_location).is_file()  # no purge: files stay
    with pytest.raises(NoSuchTable, match=r"'db\.t'"):
        catalog.drop_table("db.t")
    with pytest.raises(NoSuchTable):
        catalog.load_table("db.t")


def test_register_existing_metadata_file(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    created = catalog.create_table("db.original", simple_schema)

    registered = catalog.register_table("db.copy", created.metadata_location)

    assert registered.metadata.to_json() == created.metadata.to_json()
    assert catalog.load_pointer("db.copy") == TablePointer(created.metadata_location, None)
    with pytest.raises(TableAlreadyExists):
        catalog.register_table("db.copy", created.metadata_location)


def test_register_missing_metadata_file_adds_no_row(catalog: Catalog, tmp_path: Path) -> None:
    catalog.create_namespace("db")
    with pytest.raises(MissingFileError):
        catalog.register_table("db.t", str(tmp_path / "nope.metadata.json"))
    assert not catalog.table_exists("db.t")


def test_invalid_table_identifiers(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    for bad in ("t", "db.", "db..t", ("db",), ("db", "a.b")):
        with pytest.raises(InvalidArgument):
            catalog.create_table(bad, simple_schema)


def test_view_rows_are_not_tables(catalog: Catalog, run_sql: Callable[..., Any], simple_schema: Schema) -> None:
    """Rows Iceberg Java writes for views are left alone, but still occupy their name."""
    catalog.create_namespace("db")
    run_sql(
        "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location, "
        "previous_metadata_location, iceberg_type) VALUES (?, ?, ?, ?, NULL, ?)",
        ("floe", "db", "v", "/views/v.metadata.json", "VIEW"),
    )

    assert catalog.list_tables("db") == []
    assert not catalog.table_exists("db.v")
    with pytest.raises(NoSuchTable):
        catalog.load_pointer("db.v")
    with pytest.raises(NoSuchTable):
        catalog.swap_metadata_location("db.v", "/views/v.metadata.json", "/x.metadata.json")
    with pytest.raises(TableAlreadyExists):
        catalog.create_table("db.v", simple_schema)
    with pytest.raises(NamespaceNotEmpty, match="1 table"):
        catalog.drop_namespace("db")


def test_catalog_names_are_isolated(catalog_uri: str, warehouse: Path, simple_schema: Schema) -> None:
    with SqlCatalog(catalog_uri, str(warehouse), name="one") as one, SqlCatalog(catalog_uri, str(warehouse), "two") as two:
        one.create_namespace("db")
        one.create_table("db.t", simple_schema)
        assert two.list_namespaces() == []
        assert not two.table_exists("db.t")
        two.create_namespace("db")
        assert two.list_tables("db") == []


def test_reopening_keeps_everything(catalog_uri: str, warehouse: Path, simple_schema: Schema) -> None:
    with SqlCatalog(catalog_uri, str(warehouse)) as first:
        first.create_namespace("db", {"k": "v"})
        created = first.create_table("db.t", simple_schema)
    with SqlCatalog(catalog_uri, str(warehouse)) as second:
        assert second.load_namespace_properties("db") == {"k": "v"}
        assert second.load_pointer("db.t").metadata_location == created.metadata_location


# -- compare-and-swap ------------------------------------------------------------


def test_swap_moves_pointer_and_records_previous(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location

    catalog.swap_metadata_location("db.t", first, "/w/00001.metadata.json")
    catalog.swap_metadata_location("db.t", "/w/00001.metadata.json", "/w/00002.metadata.json")

    assert catalog.load_pointer("db.t") == TablePointer("/w/00002.metadata.json", "/w/00001.metadata.json")


def test_swap_from_stale_location_conflicts(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location
    catalog.swap_metadata_location("db.t", first, "/w/winner.metadata.json")

    with pytest.raises(CommitConflict) as caught:
        catalog.swap_metadata_location("db.t", first, "/w/loser.metadata.json")

    assert isinstance(caught.value, CommitFailed)
    assert caught.value.current_location == "/w/winner.metadata.json"
    assert caught.value.expected_location == first
    assert "db.t" in str(caught.value) and "/w/winner.metadata.json" in str(caught.value)
    assert catalog.load_pointer("db.t") == TablePointer("/w/winner.metadata.json", first)


def test_a_metadata_file_is_read_once_while_the_pointer_stays_and_again_once_another_writer_moves_it(
    catalog_uri: str, warehouse: Path, simple_schema: Schema
) -> None:
    from table.metadata_json import write_table_metadata

    with SqlCatalog(catalog_uri, str(warehouse)) as mine, SqlCatalog(catalog_uri, str(warehouse)) as other:
        mine.create_namespace("db")
        created = mine.create_table("db.t", simple_schema)
        first = mine.load_table("db.t")
        assert mine.load_table("db.t").metadata is first.metadata, "the pointer did not move: no file read again"
        moved = created.metadata.with_last_updated_ms(created.metadata.last_updated_ms + 1)
        location = str(warehouse / "db" / "t" / "metadata" / "00001-other.metadata.json")
        write_table_metadata(created.io, location, moved)
        other.swap_metadata_location("db.t", created.metadata_location, location)
        again = mine.load_table("db.t")
        assert again.metadata_location == location and again.metadata == moved, "another writer's commit is seen"


def test_swap_on_missing_table(catalog: Catalog) -> None:
    catalog.create_namespace("db")
    with pytest.raises(NoSuchTable, match=r"'db\.t'"):
        catalog.swap_metadata_location("db.t", "/a.metadata.json", "/b.metadata.json")


def test_swap_argument_checks(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location
    with pytest.raises(InvalidArgument, match="equals"):
        catalog.swap_metadata_location("db.t", first, first)
    with pytest.raises(InvalidArgument, match="longer than 1000"):
        catalog.swap_metadata_location("db.t", first, "/" + "x" * 1000)
    with pytest.raises(InvalidArgument, match="empty"):
        catalog.swap_metadata_location("db.t", first, "")
    assert catalog.load_pointer("db.t").metadata_location == first


def test_threads_sharing_one_catalog_commit_in_turn(catalog: Catalog, simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location
    wins: list[tuple[str, str]] = []
    errors: list[BaseException] = []

    def worker(worker_id: int) -> None:
        for i in range(10):
            while True:
                current = catalog.load_pointer("db.t").metadata_location
                try:
                    catalog.swap_metadata_location("db.t", current, f"/w/{worker_id}-{i}.metadata.json")
                except CommitConflict:
                    continue
                except BaseException as e:  # reported below, so the test fails with it
                    errors.append(e)
                    return
                wins.append((current, f"/w/{worker_id}-{i}.metadata.json"))
                break

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(wins) == 30 and len({expected for expected, _ in wins}) == 30
    assert first in {expected for expected, _ in wins}


# -- failures of the database during a commit --------------------------------------


def _install_failing_trigger(run_sql: Callable[..., Any], backend: str, deferred: bool = False) -> None:
    if backend == "sqlite":
        run_sql(
            "CREATE TRIGGER fail_swap BEFORE UPDATE OF metadata_location ON iceberg_tables "
            "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        return
    run_sql(
        "CREATE FUNCTION floe_fail() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
    )
    timing = "CONSTRAINT TRIGGER fail_swap AFTER" if deferred else "TRIGGER fail_swap BEFORE"
    tail = " DEFERRABLE INITIALLY DEFERRED" if deferred else ""
    run_sql(f"CREATE {timing} UPDATE ON iceberg_tables{tail} FOR EACH ROW EXECUTE FUNCTION floe_fail()")


def _drop_failing_trigger(run_sql: Callable[..., Any], backend: str) -> None:
    run_sql("DROP TRIGGER fail_swap" + ("" if backend == "sqlite" else " ON iceberg_tables"))


def test_error_during_update_is_unknown_state(catalog: Catalog, run_sql: Callable[..., Any], simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location
    _install_failing_trigger(run_sql, catalog.backend)

    with pytest.raises(CommitStateUnknown) as caught:
        catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")

    assert isinstance(caught.value, CommitFailed)
    assert caught.value.new_location == "/w/new.metadata.json"
    assert "db.t" in str(caught.value) and "injected failure" in str(caught.value)
    # The caller resolves the unknown state by reloading: here the swap did not happen.
    assert catalog.load_pointer("db.t").metadata_location == first
    _drop_failing_trigger(run_sql, catalog.backend)
    catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")
    assert catalog.load_pointer("db.t").metadata_location == "/w/new.metadata.json"


def test_error_at_commit_is_unknown_state(
    postgres_catalog: Catalog, postgres_uri: str, sql_on: Callable[..., Any], simple_schema: Schema
) -> None:
    """A failing COMMIT (here: a deferred trigger) leaves the outcome unknown to the writer."""
    postgres_catalog.create_namespace("db")
    first = postgres_catalog.create_table("db.t", simple_schema).metadata_location
    _install_failing_trigger(lambda *a: sql_on(postgres_uri, *a), "postgresql", deferred=True)

    with pytest.raises(CommitStateUnknown, match="COMMIT failed"):
        postgres_catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")

    assert postgres_catalog.load_pointer("db.t").metadata_location == first


def test_connection_killed_during_update_is_unknown_state(
    postgres_catalog: Catalog, postgres_uri: str, simple_schema: Schema
) -> None:
    postgres_catalog.create_namespace("db")
    first = postgres_catalog.create_table("db.t", simple_schema).metadata_location
    outcome: list[BaseException] = []

    def commit() -> None:
        try:
            postgres_catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")
        except BaseException as e:  # examined by the test below
            outcome.append(e)

    with psycopg.connect(postgres_uri) as blocker:  # holds the row lock: the UPDATE waits
        blocker.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 't' FOR UPDATE")
        thread = threading.Thread(target=commit)
        thread.start()
        pid = _wait_for_lock_waiter(blocker)
        blocker.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(timeout=30)
        blocker.rollback()

    assert len(outcome) == 1 and isinstance(outcome[0], CommitStateUnknown), outcome
    assert postgres_catalog.load_pointer("db.t").metadata_location == first  # reconnects by itself
    postgres_catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")


def test_a_row_locked_past_the_lock_timeout_fails_the_swap_and_changes_nothing(
    postgres_uri: str, warehouse: Path, simple_schema: Schema, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session that holds a catalog row (an operator's open transaction) stalls that table's commit
    for the lock timeout, not forever; the commit's outcome is then checked, as any failed swap's is."""
    monkeypatch.setattr("commit.catalog.sql.dialects.LOCK_TIMEOUT_S", 1.0)
    with SqlCatalog(postgres_uri, str(warehouse)) as catalog:
        catalog.create_namespace("db")
        first = catalog.create_table("db.t", simple_schema).metadata_location
        with psycopg.connect(postgres_uri) as blocker:
            blocker.execute("SELECT 1 FROM iceberg_tables WHERE table_name = 't' FOR UPDATE")
            began = time.monotonic()
            with pytest.raises(CommitStateUnknown, match="lock timeout"):
                catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")
            waited = time.monotonic() - began
            blocker.rollback()
        assert waited < 30, f"the swap waited {waited:.0f}s for the row"
        assert catalog.load_pointer("db.t").metadata_location == first
        catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")


def _wait_for_lock_waiter(conn: psycopg.Connection[Any]) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'floe-catalog' AND wait_event_type = 'Lock'"
        ).fetchall()
        if rows:
            return int(rows[0][0])
        time.sleep(0.02)
    raise AssertionError("the commit never waited for the row lock")


def test_sqlite_writer_waits_for_the_write_lock(
    sqlite_catalog: Catalog, sqlite_uri: str, simple_schema: Schema
) -> None:
    import sqlite3

    sqlite_catalog.create_namespace("db")
    first = sqlite_catalog.create_table("db.t", simple_schema).metadata_location
    holder = sqlite3.connect(sqlite_uri[len("sqlite:///") :], isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    releaser = threading.Timer(0.5, holder.execute, args=("COMMIT",))
    releaser.start()
    started = time.monotonic()

    sqlite_catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")

    assert time.monotonic() - started >= 0.4
    releaser.join()
    holder.close()
    assert sqlite_catalog.load_pointer("db.t").metadata_location == "/w/new.metadata.json"


def test_sqlite_busy_timeout_fails_before_anything_is_sent(
    sqlite_uri: str, warehouse: Path, simple_schema: Schema
) -> None:
    import sqlite3

    with SqlCatalog(sqlite_uri, str(warehouse), timeout_s=0.2) as catalog:
        catalog.create_namespace("db")
        first = catalog.create_table("db.t", simple_schema).metadata_location
        holder = sqlite3.connect(sqlite_uri[len("sqlite:///") :], isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(CatalogDatabaseError, match=r"commit to table db\.t.*locked") as caught:
                catalog.swap_metadata_location("db.t", first, "/w/new.metadata.json")
            assert not isinstance(caught.value, CommitFailed)  # known: nothing was applied
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert catalog.load_pointer("db.t").metadata_location == first


def test_sqlite_catalog_uses_wal(sqlite_catalog: Catalog, sqlite_uri: str, sql_on: Callable[..., Any]) -> None:
    assert sql_on(sqlite_uri, "PRAGMA journal_mode") == [("wal",)]


def test_unreachable_postgres_names_target_without_password(warehouse: Path) -> None:
    from tests.support.postgres import free_port

    uri = f"postgresql://floe:top-secret@127.0.0.1:{free_port()}/catalog"
    with pytest.raises(CatalogDatabaseError) as caught:
        SqlCatalog(uri, str(warehouse), timeout_s=2)
    message = str(caught.value)
    assert "top-secret" not in message
    assert "postgresql://floe@127.0.0.1" in message and "cannot connect" in message


def test_the_first_metadata_file_honours_write_metadata_path(catalog: Catalog, simple_schema: Schema, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "meta"
    catalog.create_namespace("db")
    created = catalog.create_table("db.moved", simple_schema, properties={"write.metadata.path": f"{elsewhere}/"})
    assert created.metadata_location.startswith(f"{elsewhere}/00000-"), created.metadata_location
