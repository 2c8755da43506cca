"""Pure rules: catalog URIs, namespace and table names."""

from __future__ import annotations

import re

import pytest

from commit.catalog.sql.uri import POSTGRESQL, SQLITE, parse_catalog_uri, redact_uri
from commit.errors import InvalidArgument
from commit.identifiers import (
    TableIdentifier,
    child_namespaces,
    like_children_pattern,
    to_namespace,
    to_table_identifier,
)


def test_sqlite_uris_follow_sqlalchemy() -> None:
    assert parse_catalog_uri("sqlite:////var/floe/catalog.db").address == "/var/floe/catalog.db"
    assert parse_catalog_uri("sqlite:///relative/catalog.db").address == "relative/catalog.db"
    assert parse_catalog_uri("sqlite:////x.db").backend == SQLITE


@pytest.mark.parametrize("uri", ["sqlite:///", "sqlite:///:memory:", "sqlite:///x.db?mode=ro", "mysql://h/db", "x"])
def test_unsupported_uris(uri: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_catalog_uri(uri)


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg"])
def test_postgres_uris_become_libpq_uris(scheme: str) -> None:
    target = parse_catalog_uri(f"{scheme}://floe:pw@db.example:5433/catalog")
    assert target.backend == POSTGRESQL
    assert target.address == "postgresql://floe:pw@db.example:5433/catalog"
    assert target.display == "postgresql://floe@db.example:5433/catalog"


def test_redaction_removes_every_password() -> None:
    assert redact_uri("postgresql://u:p%40ss@h/db") == "postgresql://u@h/db"
    shown = redact_uri("postgresql://u@h/db?password=hunter2&sslmode=require")
    assert "hunter2" not in shown and "sslmode=require" in shown
    unsupported = "mysql://root:hunter2@h/db"
    with pytest.raises(InvalidArgument) as caught:
        parse_catalog_uri(unsupported)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("uri", ["sqlite:////tmp/floe/catalog.db", "sqlite:///relative/catalog.db",
                                 "postgresql://u@h:5432/db?sslmode=require", "http://127.0.0.1:8181/catalog"])
def test_a_uri_without_secrets_is_shown_exactly_as_written(uri: str) -> None:
    assert redact_uri(uri) == uri  # floe check printed sqlite://tmp/floe/catalog.db: two slashes lost


def test_namespaces_and_identifiers() -> None:
    assert to_namespace("a.b") == ("a", "b")
    assert to_namespace(["a", "b"]) == ("a", "b")
    ident = to_table_identifier("a.b.t")
    assert ident == TableIdentifier(("a", "b"), "t") == to_table_identifier(("a", "b", "t"))
    assert str(ident) == "a.b.t" and ident.namespace_string == "a.b"
    assert to_table_identifier(ident) is not None


@pytest.mark.parametrize("bad", ["", "a.", "a..b", ("a.b",), (), "x" * 256])
def test_invalid_namespaces(bad: object) -> None:
    with pytest.raises(InvalidArgument):
        to_namespace(bad)  # type: ignore[arg-type]


def test_like_pattern_escapes_wildcards() -> None:
    assert like_children_pattern(("a_b", "c%d", "e!f")) == "a!_b.c!%d.e!!f.%"


def test_child_namespaces_are_direct_and_exact() -> None:
    stored = ["a", "a.b", "a.b.c", "ab.x", "A.z", "b"]
    assert child_namespaces((), stored) == [("A",), ("a",), ("ab",), ("b",)]
    assert child_namespaces(("a",), stored) == [("a", "b")]
    assert child_namespaces(("a", "b"), stored) == [("a", "b", "c")]


@pytest.mark.parametrize(
    "identifier, named",
    [
        ("shop./tmp/x/evil", "contains '/'"),
        ("../../etc.orders", "contains '/'"),
        ("shop.a\\b", "contains '\\\\'"),
        ("shop..orders", "contains '..'"),
        ("shop.ord\ners", "control character U+000A"),
        ("shop.ord\x7fers", "control character U+007F"),
        (("shop", "x/y"), "contains '/'"),
        ("shop.", "empty level"),
    ],
)
def test_identifiers_refuse_what_could_leave_the_warehouse(identifier: object, named: str) -> None:
    """Names become directories: a path separator or '..' must not create a directory elsewhere."""
    with pytest.raises(InvalidArgument, match=re.escape(named)):
        to_table_identifier(identifier)  # type: ignore[arg-type]
