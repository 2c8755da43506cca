"""Leases: at most one holder of a name at a time, for a limited time.

Used so that one compactor works on a table at a time. A lease is a row
(name, holder, expiry); taking, renewing and releasing are each one guarded
statement, so they are atomic on both backends. A holder that dies stops
renewing and its lease expires; anyone may then take it.

Expiry is measured on the *database's* clock, never the caller's: holders on
different hosts compare against one clock, so a skewed host clock cannot make
two holders believe they hold the same lease.

A lease is advisory: it tells cooperating Floe processes who should work. It
is not what keeps a table correct; the catalog's compare-and-swap does that.
"""

from __future__ import annotations

from dataclasses import dataclass

from commit.catalog.sql.database import CatalogDatabase
from commit.errors import InvalidArgument
from commit.identifiers import check_name_length

LEASES = "floe_leases"
CREATE_LEASES = (
    f"CREATE TABLE IF NOT EXISTS {LEASES} ("
    "catalog_name VARCHAR(255) NOT NULL, "
    "lease_name VARCHAR(255) NOT NULL, "
    "holder VARCHAR(255) NOT NULL, "
    "expires_at_ms BIGINT NOT NULL, "
    "PRIMARY KEY (catalog_name, lease_name))"
)


@dataclass(frozen=True)
class Lease:
    """A lease row as read, with the database's clock at the time of reading."""

    name: str
    holder: str
    expires_at_ms: int
    now_ms: int

    @property
    def expired(self) -> bool:
        return self.expires_at_ms <= self.now_ms


class LeaseTable:
    """The leases of one catalog, kept in the catalog's database."""

    def __init__(self, db: CatalogDatabase, catalog_name: str) -> None:
        self._db = db
        self._catalog = catalog_name
        now = db.dialect.now_ms_sql
        self._acquire_sql = (
            f"INSERT INTO {LEASES} (catalog_name, lease_name, holder, expires_at_ms) VALUES (?, ?, ?, {now} + ?) "
            "ON CONFLICT (catalog_name, lease_name) DO UPDATE "
            "SET holder = excluded.holder, expires_at_ms = excluded.expires_at_ms "
            f"WHERE {LEASES}.holder = excluded.holder OR {LEASES}.expires_at_ms <= {now}"
        )
        self._renew_sql = (
            f"UPDATE {LEASES} SET expires_at_ms = {now} + ? "
            f"WHERE catalog_name = ? AND lease_name = ? AND holder = ? AND expires_at_ms > {now}"
        )
        self._release_sql = f"DELETE FROM {LEASES} WHERE catalog_name = ? AND lease_name = ? AND holder = ?"
        self._get_sql = f"SELECT holder, expires_at_ms, {now} FROM {LEASES} WHERE catalog_name = ? AND lease_name = ?"
        db.ensure_tables("create lease table", ((LEASES, CREATE_LEASES),))

    def acquire_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Take ``name`` for ``ttl_ms`` if it is free, expired, or already ours (then extend it)."""
        _check(name, holder, ttl_ms)
        with self._db.write(f"acquire lease {name!r} for {holder!r}") as session:
            return session.execute(self._acquire_sql, (self._catalog, name, holder, ttl_ms)) == 1

    def renew_lease(self, name: str, holder: str, ttl_ms: int) -> bool:
        """Extend our unexpired lease to ``ttl_ms`` from now; False if it lapsed or is not ours.

        A lapsed lease is not silently revived: the holder learns that it was
        unprotected for a while, and must acquire again.
        """
        _check(name, holder, ttl_ms)
        with self._db.write(f"renew lease {name!r} for {holder!r}") as session:
            return session.execute(self._renew_sql, (ttl_ms, self._catalog, name, holder)) == 1

    def release_lease(self, name: str, holder: str) -> bool:
        """Give up ``name`` if ``holder`` has it (expired or not); False if it had not."""
        _check(name, holder, 1)
        with self._db.write(f"release lease {name!r} for {holder!r}") as session:
            return session.execute(self._release_sql, (self._catalog, name, holder)) == 1

    def get_lease(self, name: str) -> Lease | None:
        """The row of ``name``, expired or not; None when nobody has taken it."""
        check_name_length(name, "lease name")
        with self._db.read(f"read lease {name!r}") as session:
            rows = session.query(self._get_sql, (self._catalog, name))
        if not rows:
            return None
        holder, expires_at_ms, now_ms = rows[0]
        return Lease(name, holder, int(expires_at_ms), int(now_ms))


def _check(name: str, holder: str, ttl_ms: int) -> None:
    if not name or not holder:
        raise InvalidArgument(f"lease name {name!r} and holder {holder!r} must not be empty")
    check_name_length(name, "lease name")
    check_name_length(holder, "lease holder")
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms <= 0:
        raise InvalidArgument(f"lease {name!r}: ttl_ms must be a positive integer, got {ttl_ms!r}")
