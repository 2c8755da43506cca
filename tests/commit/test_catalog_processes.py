"""Several processes on one catalog: the compare-and-swap has exactly one winner.

Workers are started with "spawn", so each is a fresh interpreter that opens
its own connection, as separate Floe processes (or hosts) would. Their
first swaps all expect the initial location (they wait for each other
between the load and the swap), so the race happens on any machine.
"""

from __future__ import annotations

import multiprocessing
import queue
from pathlib import Path
from typing import Any

import psycopg

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.errors import CommitConflict
from table.schema import Schema

PROCESSES = 4
SWAPS_PER_PROCESS = 25
_SPAWN = multiprocessing.get_context("spawn")


def _swap_worker(uri: str, warehouse: str, worker_id: int, start: Any, results: Any) -> None:
    """Win ``SWAPS_PER_PROCESS`` swaps; report (expected, new) of each win and the conflicts seen."""
    try:
        catalog = SqlCatalog(uri, warehouse)
        wins: list[tuple[str, str]] = []
        conflicts: list[tuple[str, str]] = []
        start.wait()
        attempt = 0
        while len(wins) < SWAPS_PER_PROCESS:
            current = catalog.load_pointer("db.t").metadata_location
            new = f"{warehouse}/db/t/metadata/w{worker_id}-{attempt}.metadata.json"
            if attempt == 0:  # the first swaps all expect the initial location: a race on any machine
                start.wait(timeout=120)
            attempt += 1
            try:
                catalog.swap_metadata_location("db.t", current, new)
            except CommitConflict as e:
                conflicts.append((current, str(e.current_location)))
                continue
            wins.append((current, new))
        catalog.close()
        results.put(("ok", worker_id, wins, conflicts))
    except BaseException as e:  # sent to the test, which fails with it
        results.put(("error", worker_id, repr(e), []))


def _open_worker(uri: str, warehouse: str, worker_id: int, start: Any, results: Any) -> None:
    """Open a catalog on a database that has no tables yet, all at the same moment."""
    try:
        start.wait()
        with SqlCatalog(uri, warehouse) as catalog:
            catalog.create_namespace(f"ns{worker_id}")
            catalog.leases.acquire_lease("probe", f"w{worker_id}", 60_000)
        results.put(("ok", worker_id, [], []))
    except BaseException as e:  # sent to the test, which fails with it
        results.put(("error", worker_id, repr(e), []))


def _run_workers(target: Any, uri: str, warehouse: Path) -> list[tuple[Any, ...]]:
    start = _SPAWN.Barrier(PROCESSES)
    results = _SPAWN.Queue()
    procs = [
        _SPAWN.Process(target=target, args=(uri, str(warehouse), n, start, results)) for n in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = [results.get(timeout=180) for _ in procs]
    except queue.Empty as e:
        raise AssertionError("a worker process did not report back") from e
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [o for o in outcomes if o[0] != "ok"]
    assert errors == [], errors
    return outcomes


def test_concurrent_swaps_have_one_winner_per_location(catalog: Catalog, catalog_uri: str, warehouse: Path,
                                                        simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    initial = catalog.create_table("db.t", simple_schema).metadata_location

    outcomes = _run_workers(_swap_worker, catalog_uri, warehouse)

    wins = [win for outcome in outcomes for win in outcome[2]]
    conflicts = [c for outcome in outcomes for c in outcome[3]]
    assert len(wins) == PROCESSES * SWAPS_PER_PROCESS
    next_of = dict(wins)
    assert len(next_of) == len(wins), "two writers won from the same expected location"
    # Walk the chain from the first metadata file: every win is one link, no gaps, no forks.
    chain = [initial]
    while chain[-1] in next_of:
        chain.append(next_of[chain[-1]])
    assert len(chain) == len(wins) + 1
    pointer = catalog.load_pointer("db.t")
    assert pointer.metadata_location == chain[-1]
    assert pointer.previous_metadata_location == chain[-2]
    # The first swaps all expected the initial location: one won, the others lost.
    assert sum(1 for expected, _ in conflicts if expected == initial) == PROCESSES - 1
    # A conflict always reports where the pointer had moved to, never the stale location.
    assert all(expected != current for expected, current in conflicts)
    assert {current for _, current in conflicts} <= set(chain)


def test_processes_create_the_schema_at_once(catalog_uri: str, warehouse: Path) -> None:
    _run_workers(_open_worker, catalog_uri, warehouse)

    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        assert catalog.list_namespaces() == [(f"ns{n}",) for n in range(PROCESSES)]
        lease = catalog.leases.get_lease("probe")
        assert lease is not None and lease.holder in {f"w{n}" for n in range(PROCESSES)}


def _floe_backends(uri: str) -> int:
    """How many Floe catalog connections the PostgreSQL server has now."""
    with psycopg.connect(uri) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'floe-catalog'").fetchone()
    return int(row[0]) if row else 0


def _swap_in_forked_child(catalog: Catalog, uri: str, expected: str, new: str, results: Any) -> None:
    try:
        catalog.swap_metadata_location("db.t", expected, new)
        results.put(_floe_backends(uri) if catalog.backend == "postgresql" else 0)
    except BaseException as e:  # sent to the test, which fails with it
        results.put(repr(e))


def test_forked_child_never_uses_the_parents_connection(catalog: Catalog, catalog_uri: str,
                                                         simple_schema: Schema) -> None:
    catalog.create_namespace("db")
    first = catalog.create_table("db.t", simple_schema).metadata_location  # the parent's connection is open
    before = _floe_backends(catalog_uri) if catalog.backend == "postgresql" else 0
    fork = multiprocessing.get_context("fork")
    results = fork.Queue()
    child = fork.Process(
        target=_swap_in_forked_child, args=(catalog, catalog_uri, first, "/w/child.metadata.json", results)
    )
    child.start()
    try:
        in_child = results.get(timeout=60)
    finally:
        child.join(timeout=30)

    if catalog.backend == "postgresql":
        assert in_child == before + 1, "the child must have opened a connection of its own"
    else:
        assert in_child == 0, in_child
    # The parent's connection was left alone: it still works, and sees the child's commit.
    assert catalog.load_pointer("db.t").metadata_location == "/w/child.metadata.json"
    catalog.swap_metadata_location("db.t", "/w/child.metadata.json", "/w/parent.metadata.json")
    assert catalog.load_pointer("db.t").previous_metadata_location == "/w/child.metadata.json"
