"""The ``catalog`` section.

The password is kept apart from the URI so the URI can be shown anywhere;
:meth:`CatalogConfig.connection_uri` joins them only to connect.
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator

from commit.catalog_uri import POSTGRESQL, DatabaseTarget, parse_catalog_uri, redact_uri
from commit.errors import InvalidArgument
from service.config.credentials import secret_source_problems, secret_value, url_password_problems
from service.config.fields import ConfigPath, Location, Section
from service.config.problems import Problem, invalid, raise_all


class CatalogConfig(Section):
    """The Iceberg SQL catalog (commit/catalog.py) and where table files go."""

    uri: str = Field(
        description="`sqlite:////abs/path/catalog.db` or `postgresql://user@host:port/db` (no password in it)."
    )
    password: Optional[SecretStr] = Field(
        None, description="PostgreSQL password (prefer `FLOE_CATALOG__PASSWORD` or `password_file`)."
    )
    password_file: Optional[ConfigPath] = Field(None, description="File holding the PostgreSQL password.")
    name: str = Field(
        "floe", min_length=1, description="Catalog name (rows of several catalogs can share one database)."
    )
    warehouse: Location = Field(
        description="Root location of new tables: an absolute path or a URI (`s3://bucket/prefix`)."
    )

    @model_validator(mode="after")
    def _valid_uri(self) -> "CatalogConfig":
        try:
            target = parse_catalog_uri(self.uri)
        except InvalidArgument as exc:
            raise invalid(("uri", str(exc))) from None
        raise_all([*self._uri_problems(target), *self._password_problems(target)])
        return self

    def _uri_problems(self, target: DatabaseTarget) -> list[Problem]:
        problems = []
        if target.backend != POSTGRESQL and not target.address.startswith("/"):
            problems.append(("uri", f"expected an absolute SQLite path, sqlite:////abs/path.db, got {self.uri!r}"))
        return problems + url_password_problems("uri", self.uri, "catalog.password or catalog.password_file")

    def _password_problems(self, target: DatabaseTarget) -> list[Problem]:
        has_password = self.password is not None or self.password_file is not None
        problems = []
        if has_password and target.backend != POSTGRESQL:
            problems.append(("password", "only used with a postgresql:// catalog uri"))
        problems += secret_source_problems("password", self.password, self.password_file)
        if has_password and target.backend == POSTGRESQL and not urlsplit(self.uri).username:
            problems.append(
                (
                    "uri",
                    "needs a user name (postgresql://user@host/db) when a password is set "
                    f"(got {redact_uri(self.uri)!r})",
                )
            )
        return problems

    @property
    def display_uri(self) -> str:
        """The URI for messages and logs (without any password)."""
        return redact_uri(self.uri)

    def connection_uri(self) -> str:
        """The URI to open the catalog with, password included. Never log it."""
        # An empty inline password means none, as it always has.
        password = secret_value(self.password or None, self.password_file)
        if password is None:
            return self.uri
        parts = urlsplit(self.uri)
        netloc = f"{parts.username}:{quote(password, safe='')}@{parts.netloc.rpartition('@')[2]}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
