"""Catalog fixtures: a real SQLite file and a real PostgreSQL server.

``catalog`` (and ``catalog_uri``) run a test once per backend. Each test gets
a fresh SQLite file or a fresh PostgreSQL database; the server is shared by
the session and always stopped at the end.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import psycopg
import pytest

from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from table.schema import Schema
from table.types import LongType, NestedField, StringType
from tests.support.postgres import PostgresServer, PostgresUnavailable

BACKENDS = ("sqlite", "postgresql")
_URI_FIXTURES = {"sqlite": "sqlite_uri", "postgresql": "postgres_uri"}

RunSql = Callable[..., list[tuple[Any, ...]]]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session, stopped even when tests fail."""
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as e:
        pytest.fail(f"cannot start the test PostgreSQL server: {e}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def sqlite_uri(tmp_path: Path) -> str:
    """A catalog URI of a SQLite file that does not exist yet (SQLAlchemy form)."""
    return f"sqlite:///{tmp_path / 'catalog' / 'catalog.db'}"


@pytest.fixture(scope="session")
def postgres_database(postgres_server: PostgresServer) -> str:
    """The URI of one database for the session; each test gets its own schema in it."""
    return postgres_server.create_database("floe_tests")


@pytest.fixture()
def postgres_uri(postgres_database: str) -> str:
    """A catalog URI whose search_path is a fresh, empty schema (much faster than a database)."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{postgres_database}?options=-csearch_path%3D{schema}"


@pytest.fixture(params=BACKENDS)
def catalog_uri(request: pytest.FixtureRequest) -> str:
    """A fresh catalog database URI, once per backend."""
    return str(request.getfixturevalue(_URI_FIXTURES[request.param]))


@pytest.fixture()
def sqlite_catalog(sqlite_uri: str, warehouse: Path) -> Iterator[Catalog]:
    with SqlCatalog(sqlite_uri, str(warehouse)) as catalog:
        yield catalog


@pytest.fixture()
def postgres_catalog(postgres_uri: str, warehouse: Path) -> Iterator[Catalog]:
    with SqlCatalog(postgres_uri, str(warehouse)) as catalog:
        yield catalog


@pytest.fixture()
def catalog(catalog_uri: str, warehouse: Path) -> Iterator[Catalog]:
    """A Floe catalog named ``floe`` on each backend in turn."""
    with SqlCatalog(catalog_uri, str(warehouse)) as catalog:
        yield catalog


@pytest.fixture()
def run_sql(catalog_uri: str) -> RunSql:
    """Run raw SQL (``?`` placeholders) on the catalog's database, outside Floe."""

    def run(statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return raw_sql(catalog_uri, statement, params)

    return run


def raw_sql(uri: str, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Execute one statement in its own committed transaction; rows, if it returns any."""
    if uri.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(uri[len("sqlite:///") :], isolation_level=None)
        try:
            cursor = conn.execute(statement, tuple(params))
            return cursor.fetchall()
        finally:
            conn.close()
    with psycopg.connect(uri, autocommit=True) as pg:
        result = pg.execute(statement.replace("?", "%s") if params else statement, tuple(params))
        return result.fetchall() if result.description else []


@pytest.fixture()
def sql_on() -> Callable[..., list[tuple[Any, ...]]]:
    """:func:`raw_sql`, for tests that name the database URI themselves."""
    return raw_sql


@pytest.fixture()
def pyiceberg_uri(catalog_uri: str) -> str:
    """The catalog database as pyiceberg's SqlCatalog names it (SQLAlchemy, psycopg 3)."""
    return catalog_uri.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture()
def simple_schema() -> Schema:
    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "payload", StringType(), required=False),
    )
