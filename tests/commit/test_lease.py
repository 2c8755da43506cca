"""Leases on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import multiprocessing
import queue
import time
from pathlib import Path
from typing import Any

import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.errors import InvalidArgument
from commit.catalog.sql.lease import LeaseTable

RACERS = 4
_SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture()
def leases(catalog: Catalog) -> LeaseTable:
    return catalog.leases


def test_acquire_free_lease_then_others_are_refused(leases: LeaseTable) -> None:
    assert leases.acquire_lease("compact:db.t", "host-a", 60_000)
    assert not leases.acquire_lease("compact:db.t", "host-b", 60_000)
    lease = leases.get_lease("compact:db.t")
    assert lease is not None and lease.holder == "host-a" and not lease.expired
    assert 50_000 <= lease.expires_at_ms - lease.now_ms <= 60_000


def test_acquire_again_by_holder_extends(leases: LeaseTable) -> None:
    assert leases.acquire_lease("l", "a", 1_000)
    first = leases.get_lease("l")
    assert leases.acquire_lease("l", "a", 120_000)
    second = leases.get_lease("l")
    assert first is not None and second is not None
    assert second.expires_at_ms - first.expires_at_ms >= 100_000


def test_expired_lease_can_be_taken_over(leases: LeaseTable) -> None:
    assert leases.acquire_lease("l", "dead-holder", 50)
    time.sleep(0.15)
    lease = leases.get_lease("l")
    assert lease is not None and lease.expired
    assert leases.acquire_lease("l", "new-holder", 60_000)
    assert not leases.renew_lease("l", "dead-holder", 60_000)
    assert not leases.release_lease("l", "dead-holder")
    current = leases.get_lease("l")
    assert current is not None and current.holder == "new-holder"


def test_renew_only_an_unexpired_own_lease(leases: LeaseTable) -> None:
    assert leases.acquire_lease("l", "a", 60_000)
    before = leases.get_lease("l")
    assert leases.renew_lease("l", "a", 600_000)
    after = leases.get_lease("l")
    assert before is not None and after is not None and after.expires_at_ms > before.expires_at_ms + 500_000
    assert not leases.renew_lease("l", "b", 60_000)
    assert not leases.renew_lease("missing", "a", 60_000)

    assert leases.acquire_lease("short", "a", 50)
    time.sleep(0.15)
    assert not leases.renew_lease("short", "a", 60_000)  # lapsed: must acquire again
    assert leases.acquire_lease("short", "a", 60_000)


def test_release(leases: LeaseTable) -> None:
    assert leases.acquire_lease("l", "a", 60_000)
    assert not leases.release_lease("l", "b")
    assert leases.get_lease("l") is not None
    assert leases.release_lease("l", "a")
    assert leases.get_lease("l") is None
    assert not leases.release_lease("l", "a")
    assert leases.acquire_lease("l", "b", 60_000)


def test_leases_are_per_catalog(catalog_uri: str, warehouse: Path) -> None:
    with SqlCatalog(catalog_uri, str(warehouse), "one") as one, SqlCatalog(catalog_uri, str(warehouse), "two") as two:
        assert one.leases.acquire_lease("l", "a", 60_000)
        assert two.leases.acquire_lease("l", "b", 60_000)
        assert two.leases.get_lease("l").holder == "b"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "name, holder, ttl_ms",
    [("", "a", 1), ("l", "", 1), ("l", "a", 0), ("l", "a", -5), ("l", "a", 1.5), ("x" * 256, "a", 1)],
)
def test_invalid_lease_arguments(leases: LeaseTable, name: str, holder: str, ttl_ms: Any) -> None:
    with pytest.raises(InvalidArgument):
        leases.acquire_lease(name, holder, ttl_ms)


def _race_worker(uri: str, warehouse: str, worker_id: int, start: Any, results: Any) -> None:
    try:
        with SqlCatalog(uri, warehouse) as catalog:
            leases = catalog.leases
            start.wait()
            results.put((worker_id, leases.acquire_lease("contended", f"w{worker_id}", 60_000)))
    except BaseException as e:  # sent to the test, which fails with it
        results.put((worker_id, repr(e)))


def test_one_of_many_processes_gets_the_lease(catalog: Catalog, catalog_uri: str, warehouse: Path) -> None:
    start = _SPAWN.Barrier(RACERS)
    results = _SPAWN.Queue()
    procs = [
        _SPAWN.Process(target=_race_worker, args=(catalog_uri, str(warehouse), n, start, results))
        for n in range(RACERS)
    ]
    for p in procs:
        p.start()
    try:
        outcomes = dict(results.get(timeout=120) for _ in procs)
    except queue.Empty as e:
        raise AssertionError("a worker process did not report back") from e
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()

    assert all(isinstance(v, bool) for v in outcomes.values()), outcomes
    winners = [n for n, won in outcomes.items() if won]
    assert len(winners) == 1
    assert catalog.leases.get_lease("contended").holder == f"w{winners[0]}"  # type: ignore[union-attr]
