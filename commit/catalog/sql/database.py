"""One connection to the catalog database, and transactions over it.

Callers state what they are doing (``operation``, e.g. "drop table db.t") and
get typed errors that say so: a duplicate key is a :class:`DuplicateKeyError`,
a failed ``COMMIT`` is a :class:`CommitOutcomeUnknownError` (the transaction
may or may not have been applied), anything else a
:class:`commit.errors.CatalogDatabaseError`. Nothing is retried here: whether
a retry is safe depends on the operation, which only the caller knows.

The connection is opened lazily and reopened after it broke, or after a fork
(a child must never use, nor close, its parent's connection). A lock makes
one object safe to share between threads; they take turns.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from commit.catalog.sql.dialects import Dialect, PostgresDialect, SqliteDialect
from commit.catalog.sql.uri import POSTGRESQL, DatabaseTarget, parse_catalog_uri
from commit.errors import CatalogDatabaseError

log = logging.getLogger(__name__)

# Connections inherited through fork: kept referenced so that they are never
# finalized (and so never closed) in the child, which would disturb the parent.
_INHERITED: list[Any] = []


class DuplicateKeyError(CatalogDatabaseError):
    """An INSERT or UPDATE hit a primary key that already exists."""


class CommitOutcomeUnknownError(CatalogDatabaseError):
    """``COMMIT`` failed: the transaction may or may not have been applied."""


@dataclass(frozen=True)
class ColumnAddition:
    """A column that older databases lack, with the DDL that adds it."""

    table: str
    column: str
    ddl: str


class Session:
    """Statements inside one ``read`` or ``write`` block of :class:`CatalogDatabase`."""

    def __init__(self, db: CatalogDatabase, conn: Any, operation: str) -> None:
        self._db = db
        self._conn = conn
        self._operation = operation

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run a statement; the number of rows it changed."""
        return int(self._run(sql, params).rowcount)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a query; all of its rows."""
        return list(self._run(sql, params).fetchall())

    def lock(self, name: str) -> None:
        """Hold a lock on ``name`` until the transaction ends (no-op where writers are serial)."""
        self._db.guard(self._operation, self._db.dialect.lock, self._conn, name)

    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        text = self._db.dialect.adapt(sql)
        return self._db.guard(self._operation, self._conn.execute, text, tuple(params))


class CatalogDatabase:
    """The catalog's database: a SQLite file or a PostgreSQL database."""

    def __init__(self, target: DatabaseTarget, *, timeout_s: float = 30.0) -> None:
        self.target = target
        self.dialect: Dialect = (
            PostgresDialect(target.address, timeout_s)
            if target.backend == POSTGRESQL
            else SqliteDialect(target.address, timeout_s)
        )
        self._lock = threading.RLock()
        self._conn: Any | None = None
        self._pid = os.getpid()

    @classmethod
    def from_uri(cls, uri: str, *, timeout_s: float = 30.0) -> CatalogDatabase:
        """Open (lazily) the database named by a catalog URI; see :mod:`commit.catalog.sql.uri`."""
        return cls(parse_catalog_uri(uri), timeout_s=timeout_s)

    @property
    def backend(self) -> str:
        return self.target.backend

    @contextmanager
    def read(self, operation: str) -> Iterator[Session]:
        """Statements that each see the latest committed state; no transaction is held."""
        with self._lock:
            yield Session(self, self._connection(operation), operation)

    @contextmanager
    def write(self, operation: str) -> Iterator[Session]:
        """One transaction that excludes other writers where it locks; commit on success.

        An exception inside the block rolls back and propagates unchanged. A
        failed COMMIT raises :class:`CommitOutcomeUnknownError`.
        """
        with self._lock:
            conn = self._connection(operation)
            self.guard(operation, self.dialect.begin_write, conn)
            try:
                yield Session(self, conn, operation)
            except BaseException:
                self._rollback(conn, operation)
                raise
            self._commit(conn, operation)

    def ensure_tables(
        self, operation: str, tables: Sequence[tuple[str, str]], columns: Sequence[ColumnAddition] = ()
    ) -> None:
        """Create missing tables and columns, once, even when processes start together.

        The common case (all present) takes no write lock, so a database user
        without DDL rights can use tables that an administrator created.
        """
        if not self.missing_schema(operation, tables, columns):
            return
        with self.write(operation) as session:
            session.lock("floe:catalog-schema")
            for name, ddl in tables:
                if not session.query(self.dialect.table_exists_sql(), (name,)):
                    session.execute(ddl)
            for column in columns:
                if not session.query(self.dialect.column_exists_sql(), (column.table, column.column)):
                    session.execute(column.ddl)

    def close(self) -> None:
        """Close the connection (a later call reopens one)."""
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                self._close_quietly(conn)

    def guard(self, operation: str, fn: Any, *args: Any) -> Any:
        """Call ``fn``, turning a driver error into a typed catalog error."""
        try:
            return fn(*args)
        except self.dialect.errors as e:
            raise self._translate(e, operation) from e

    def missing_schema(
        self, operation: str, tables: Sequence[tuple[str, str]], columns: Sequence[ColumnAddition] = ()
    ) -> list[str]:
        """The ``tables`` and ``columns`` (as ``table.column``) the database lacks; nothing is created."""
        with self.read(operation) as session:
            missing = [name for name, _ in tables if not session.query(self.dialect.table_exists_sql(), (name,))]
            present = [c for c in columns if c.table not in missing]
            return missing + [
                f"{c.table}.{c.column}"
                for c in present
                if not session.query(self.dialect.column_exists_sql(), (c.table, c.column))
            ]

    def _connection(self, operation: str) -> Any:
        if self._pid != os.getpid():
            _INHERITED.append(self._conn)
            self._conn, self._pid = None, os.getpid()
        if self._conn is not None and self.dialect.is_unusable(self._conn):
            self._discard()
        if self._conn is None:
            try:
                self._conn = self.dialect.connect()
            except self.dialect.errors as e:
                raise CatalogDatabaseError(operation, f"cannot connect to {self.target.display}: {e}") from e
            except OSError as e:
                raise CatalogDatabaseError(operation, f"cannot open {self.target.display}: {e}") from e
        return self._conn

    def _commit(self, conn: Any, operation: str) -> None:
        try:
            conn.execute("COMMIT")
        except self.dialect.errors as e:
            self._rollback(conn, operation)
            reason = f"COMMIT failed on {self.target.display}: {type(e).__name__}: {e}"
            raise CommitOutcomeUnknownError(operation, reason) from e

    def _rollback(self, conn: Any, operation: str) -> None:
        """Roll back after a failure; a connection that cannot roll back is dropped."""
        try:
            conn.execute("ROLLBACK")
        except self.dialect.errors as e:
            log.warning("rollback after failed %s on %s failed (%s); reconnecting", operation, self.target.display, e)
            self._discard()

    def _translate(self, error: Exception, operation: str) -> CatalogDatabaseError:
        if self._conn is not None and self.dialect.is_unusable(self._conn):
            self._discard()
        reason = f"{type(error).__name__}: {error} ({self.target.display})".replace("\n", " ")
        if self.dialect.is_duplicate_key(error):
            return DuplicateKeyError(operation, reason)
        return CatalogDatabaseError(operation, reason)

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._close_quietly(conn)

    def _close_quietly(self, conn: Any) -> None:
        try:
            conn.close()
        except self.dialect.errors as e:
            log.warning("closing the connection to %s failed: %s", self.target.display, e)
