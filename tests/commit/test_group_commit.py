"""Group commit: swaps asked at once share one SQLite transaction, and each keeps its own outcome."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from commit.catalog.sql.catalog import SqlCatalog
from commit.catalog.sql.group_commit import GroupCommit, Swap
from commit.errors import CommitConflict, CommitStateUnknown, NoSuchTable
from commit.identifiers import to_table_identifier
from table.schema import Schema


def test_swaps_that_arrive_while_a_transaction_runs_share_the_next_one() -> None:
    groups: list[list[str]] = []
    first_running, release = threading.Event(), threading.Event()

    def run(group: list[Swap]) -> None:
        groups.append([s.new_location for s in group])
        if len(groups) == 1:
            first_running.set()
            release.wait(10)
        for swap in group:
            if swap.new_location == "/bad":
                swap.error = CommitConflict("db.bad", swap.expected_location, "/elsewhere")

    group_commit = GroupCommit(run, lambda swap, error: error)
    errors: dict[str, BaseException | None] = {}

    def ask(location: str) -> None:
        try:
            group_commit.swap(Swap(to_table_identifier("db.t"), "/old", location))
            errors[location] = None
        except CommitConflict as error:
            errors[location] = error

    threads = [threading.Thread(target=ask, args=("/first",))]
    threads[0].start()
    assert first_running.wait(10)
    for location in ("/a", "/bad", "/b"):
        threads.append(threading.Thread(target=ask, args=(location,)))
        threads[-1].start()
    deadline = time.monotonic() + 10
    while len(group_commit._pending) < 3 and time.monotonic() < deadline:  # all three queued behind the first
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(10)
    assert groups[0] == ["/first"] and sorted(groups[1]) == ["/a", "/b", "/bad"], groups
    assert errors["/a"] is None and errors["/b"] is None and errors["/first"] is None
    assert isinstance(errors["/bad"], CommitConflict), "a conflict is its own table's, the others commit"


def test_a_failed_transaction_is_every_swap_of_its_group(tmp_path: Path) -> None:
    def run(group: list[Swap]) -> None:
        raise RuntimeError("lost")

    group_commit = GroupCommit(run, lambda swap, error: ValueError(f"{swap.new_location}: {error}"))
    with pytest.raises(ValueError, match="/x: lost"):
        group_commit.swap(Swap(to_table_identifier("db.t"), "/old", "/x"))


def test_many_tables_committed_at_once_on_sqlite_each_keep_their_own_outcome(
    sqlite_uri: str, sqlite_catalog: SqlCatalog, simple_schema: Schema
) -> None:
    catalog = sqlite_catalog
    catalog.create_namespace("db")
    firsts = {f"db.t{i}": catalog.create_table(f"db.t{i}", simple_schema).metadata_location for i in range(24)}
    outcomes: dict[str, BaseException | None] = {}
    start = threading.Barrier(len(firsts) + 1)

    def commit(table: str, expected: str) -> None:
        start.wait(10)
        try:
            catalog.swap_metadata_location(table, expected, f"/w/{table}-next.metadata.json")
            outcomes[table] = None
        except (CommitConflict, NoSuchTable, CommitStateUnknown) as error:
            outcomes[table] = error

    catalog.swap_metadata_location("db.t3", firsts["db.t3"], "/w/db.t3-someone-else.metadata.json")
    catalog.drop_table("db.t5")
    threads = [threading.Thread(target=commit, args=(t, first)) for t, first in firsts.items()]
    for thread in threads:
        thread.start()
    start.wait(10)
    for thread in threads:
        thread.join(30)
    assert isinstance(outcomes["db.t3"], CommitConflict), "its pointer had moved: its own conflict"
    assert isinstance(outcomes["db.t5"], NoSuchTable), "dropped: its own error"
    committed = [t for t in firsts if t not in ("db.t3", "db.t5")]
    assert all(outcomes[t] is None for t in committed), outcomes
    with SqlCatalog(sqlite_uri, catalog.warehouse) as fresh:
        assert all(fresh.load_pointer(t).metadata_location == f"/w/{t}-next.metadata.json" for t in committed)
        assert fresh.load_pointer("db.t3").metadata_location == "/w/db.t3-someone-else.metadata.json"

