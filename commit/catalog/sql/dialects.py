"""The two catalog database backends: SQLite (embedded) and PostgreSQL.

Each dialect says how to connect, how to open a *write* transaction that
serializes with other writers, how to lock a name inside one, how to look up
the schema, and how to recognise its driver's errors. Everything else (the
SQL of the catalog and of leases) is shared: it is written with ``?``
placeholders and plain SQL that both backends run unchanged.

SQLite is used in WAL mode: readers never block the one writer, and a writer
that finds another one holding the lock waits (busy timeout) inside
``BEGIN IMMEDIATE`` instead of failing halfway through its transaction. WAL is
a property of the database file, so Iceberg Java (sqlite-jdbc) and pyiceberg
open the file in WAL mode too; all of them must run on the same host, which
is the rule for any SQLite file shared between processes anyway.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from typing import Any, Protocol

import psycopg
import psycopg.errors

log = logging.getLogger(__name__)

_SQLITE_DUPLICATE_KEY = frozenset({"SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE"})


class Dialect(Protocol):
    """What :class:`commit.catalog.sql.database.CatalogDatabase` needs from a backend."""

    errors: tuple[type[Exception], ...]
    now_ms_sql: str  # the database's clock, in ms since the epoch, as an SQL expression

    def connect(self) -> Any: ...

    def begin_write(self, conn: Any) -> None: ...

    def lock(self, conn: Any, name: str) -> None: ...

    def adapt(self, sql: str) -> str: ...

    def table_exists_sql(self) -> str: ...

    def column_exists_sql(self) -> str: ...

    def is_duplicate_key(self, error: Exception) -> bool: ...

    def is_unusable(self, conn: Any) -> bool: ...


class SqliteDialect:
    """One SQLite file shared by the processes of one host."""

    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    now_ms_sql = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s

    def connect(self) -> sqlite3.Connection:
        """A connection in autocommit mode: every transaction is begun explicitly."""
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
        try:
            self._configure(conn)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _configure(self, conn: sqlite3.Connection) -> None:
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            self._switch_to_wal(conn)
        # A commit acknowledged to a writer must survive a power loss: it is the table's commit point.
        conn.execute("PRAGMA synchronous=FULL")

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a (new) file to WAL, waiting while another process does the same.

        The switch reads the file and then needs it exclusively; when two
        processes do that at once SQLite fails one of them at once instead of
        calling the busy handler (it would deadlock). Waiting and asking again
        is the busy timeout done by hand; the switch is idempotent.
        """
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as e:
                if getattr(e, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
        if str(mode).lower() != "wal":
            log.warning("SQLite catalog %s stays in journal mode %s (WAL not available)", self.path, mode)

    def begin_write(self, conn: sqlite3.Connection) -> None:
        """Take the database's write lock now, waiting up to the busy timeout."""
        conn.execute("BEGIN IMMEDIATE")

    def lock(self, conn: sqlite3.Connection, name: str) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already excludes every other writer."""

    def adapt(self, sql: str) -> str:
        return sql

    def table_exists_sql(self) -> str:
        return "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"

    def column_exists_sql(self) -> str:
        return "SELECT 1 FROM pragma_table_info(?) WHERE name = ?"

    def is_duplicate_key(self, error: Exception) -> bool:
        return (
            isinstance(error, sqlite3.IntegrityError)
            and getattr(error, "sqlite_errorname", "") in _SQLITE_DUPLICATE_KEY
        )

    def is_unusable(self, conn: sqlite3.Connection) -> bool:
        return False


LOCK_TIMEOUT_S = 10.0  # a commit's wait for a catalog row's lock; Floe's own transactions hold one for milliseconds


class PostgresDialect:
    """A PostgreSQL database shared by processes on several hosts."""

    errors: tuple[type[Exception], ...] = (psycopg.Error,)
    now_ms_sql = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"

    def __init__(self, conninfo: str, connect_timeout_s: float) -> None:
        self.conninfo = conninfo
        self.connect_timeout_s = connect_timeout_s

    def connect(self) -> psycopg.Connection[Any]:
        """A connection in autocommit mode, so reads never leave a transaction open.

        Its statements wait at most :data:`LOCK_TIMEOUT_S` for a row lock: a
        catalog row locked by a session that hangs (a stuck client, an
        operator's open transaction) fails that one table's commit, which is
        then retried, instead of stalling every table committed alongside it.
        TCP keepalives find a server that vanished without closing the
        connection (a host gone, a network partition) within about a minute.
        """
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=max(1, round(self.connect_timeout_s)),
            application_name="floe-catalog",
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_S * 1000:.0f}ms'")
        return conn

    def begin_write(self, conn: psycopg.Connection[Any]) -> None:
        """READ COMMITTED is enough: each guarded UPDATE re-checks its WHERE on the latest row."""
        conn.execute("BEGIN")

    def lock(self, conn: psycopg.Connection[Any], name: str) -> None:
        """Serialize with every other Floe transaction that locks ``name``, until commit."""
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_lock_key(name),))

    def adapt(self, sql: str) -> str:
        if "%" in sql:
            raise ValueError(f"literal '%' in SQL text must be passed as a parameter: {sql}")
        return sql.replace("?", "%s")

    def table_exists_sql(self) -> str:
        return "SELECT 1 WHERE to_regclass(?) IS NOT NULL"

    def column_exists_sql(self) -> str:
        return "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(?) AND attname = ? AND NOT attisdropped"

    def is_duplicate_key(self, error: Exception) -> bool:
        return isinstance(error, psycopg.errors.UniqueViolation)

    def is_unusable(self, conn: psycopg.Connection[Any]) -> bool:
        return bool(conn.closed or conn.broken)


def advisory_lock_key(name: str) -> int:
    """A stable signed 64-bit key for ``name`` (PostgreSQL advisory locks take a bigint)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
