"""Catalog database URIs: which backend, where, and how to name it safely.

The URI forms are SQLAlchemy's, so the very same string opens the catalog in
pyiceberg's ``SqlCatalog``: ``sqlite:///relative/file.db`` and
``sqlite:////absolute/file.db`` (everything after ``sqlite:///`` is the file
path), and ``postgresql://user@host:port/db`` (``postgres://`` and
``postgresql+psycopg://`` are accepted too). A PostgreSQL password may be in
the URI or, better, in ``PGPASSWORD`` / ``~/.pgpass``, which libpq reads; it
never appears in :attr:`DatabaseTarget.display`, the only form that goes into
messages and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from commit.errors import InvalidArgument

SQLITE = "sqlite"
POSTGRESQL = "postgresql"

_SQLITE_PREFIX = "sqlite:///"
_POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
_SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})


@dataclass(frozen=True)
class DatabaseTarget:
    """A parsed catalog URI."""

    backend: str  # SQLITE or POSTGRESQL
    address: str  # the SQLite file path, or a libpq connection URI
    display: str  # the URI without secrets


def parse_catalog_uri(uri: str) -> DatabaseTarget:
    """Parse ``uri``; raises :class:`InvalidArgument` naming the URI (redacted)."""
    if uri.startswith(_SQLITE_PREFIX):
        return _sqlite_target(uri)
    scheme = uri.partition("://")[0].lower()
    if scheme in _POSTGRES_SCHEMES:
        address = "postgresql" + uri[len(scheme) :]
        return DatabaseTarget(POSTGRESQL, address, redact_uri(address))
    raise InvalidArgument(
        f"catalog URI {redact_uri(uri)!r} is not supported: use sqlite:///<file> or postgresql://user@host:port/db"
    )


def redact_uri(uri: str) -> str:
    """``uri`` with any password (in the user part or the query) removed."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable URI>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        netloc = f"{userinfo.partition(':')[0]}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs])
    if (netloc, query) == (parts.netloc, parts.query):
        return uri  # nothing to hide; urlunsplit would also drop the empty authority of sqlite:////abs/path
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _sqlite_target(uri: str) -> DatabaseTarget:
    path = uri[len(_SQLITE_PREFIX) :]
    if not path or path == ":memory:" or path.startswith("file:"):
        raise InvalidArgument(f"catalog URI {uri!r} must name a database file (in-memory catalogs are not durable)")
    if "?" in path:
        raise InvalidArgument(f"catalog URI {uri!r}: query parameters are not supported for SQLite")
    return DatabaseTarget(SQLITE, path, uri)
