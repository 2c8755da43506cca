"""The ``catalog`` section.

The password is kept apart from the URI so the URI can be shown anywhere;
:meth:`CatalogConfig.connection_uri` joins them only to connect.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator

from commit.catalog.sql.uri import POSTGRESQL, DatabaseTarget, parse_catalog_uri, redact_uri
from commit.errors import InvalidArgument
from service.config.credentials import secret_source_problems, secret_value, url_password_problems
from service.config.fields import ConfigPath, Duration, Location, Properties, Section
from service.config.problems import Problem, invalid, raise_all


class CatalogConfig(Section):
    """The Iceberg catalog (Floe's SQL catalog, or a REST catalog) and where table files go."""

    type: Literal["sql", "rest"] = Field(
        "sql", description="`sql` (Floe's own, in SQLite or PostgreSQL) or `rest` (an Iceberg REST catalog)."
    )
    uri: str = Field(
        description="`sqlite:////abs/path/catalog.db` or `postgresql://user@host:port/db` (no password in it); "
        "with `type: rest`, the REST catalog's `http(s)://host:port[/path]`."
    )
    password: SecretStr | None = Field(
        None, description="PostgreSQL password (prefer `FLOE_CATALOG__PASSWORD` or `password_file`)."
    )
    password_file: ConfigPath | None = Field(None, description="File holding the PostgreSQL password.")
    name: str = Field(
        "floe", min_length=1, description="Catalog name (rows of several catalogs can share one database)."
    )
    warehouse: Location = Field(
        description="Root location of new tables: an absolute path or a URI (`s3://bucket/prefix`); with "
        "`type: rest`, also the warehouse the REST catalog is asked for."
    )
    prefix: str | None = Field(None, description="REST: the path prefix, when the server's config gives none.")
    token: SecretStr | None = Field(None, description="REST: a bearer token (prefer `token_file`).")
    token_file: ConfigPath | None = Field(None, description="REST: file holding the bearer token.")
    credential: SecretStr | None = Field(
        None, description="REST: OAuth2 client credentials `client_id:client_secret` (prefer `credential_file`)."
    )
    credential_file: ConfigPath | None = Field(None, description="REST: file holding the client credentials.")
    oauth2_server_uri: str | None = Field(
        None, description="REST: the OAuth2 token endpoint (default: the catalog's `v1/oauth/tokens`)."
    )
    scope: str = Field("catalog", description="REST: the OAuth2 scope asked for with client credentials.")
    ca_file: ConfigPath | None = Field(
        None,
        description="REST: PEM bundle of CA certificates to trust for an `https://` catalog and its OAuth2 "
        "server (default: the system's).",
    )
    headers: Properties = Field(default_factory=dict, description="REST: extra HTTP headers on every request.")
    request_timeout: Duration = Field(
        timedelta(seconds=60),
        description="REST: how long a request waits for the server's answer (e.g. `60s`). A commit that gets "
        "none is checked by reloading the table, never sent blindly again.",
    )
    access_delegation: Literal["vended-credentials"] | None = Field(
        None,
        description="REST: `vended-credentials` asks the catalog for storage credentials with each table, "
        "used instead of this process's own (`storage.s3` keys or the AWS default chain) for that table's files.",
    )

    @model_validator(mode="after")
    def _valid_uri(self) -> CatalogConfig:
        if self.type == "rest":
            raise_all(self._rest_problems())
            return self
        raise_all(self._sql_only_problems())
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

    def _rest_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        if not self.uri.lower().startswith(("http://", "https://")):
            problems.append(("uri", f"expected http(s)://host:port for a REST catalog, got {redact_uri(self.uri)!r}"))
        if self.password is not None or self.password_file is not None:
            problems.append(
                ("password", "only used with a postgresql:// catalog uri; a REST catalog takes token or credential")
            )
        problems += secret_source_problems("token", self.token, self.token_file)
        problems += secret_source_problems("credential", self.credential, self.credential_file)
        if (self.token or self.token_file) and (self.credential or self.credential_file):
            problems.append(("token", "set token or credential, not both"))
        secret = secret_value(self.credential, None)
        if secret is not None and ":" not in secret:
            problems.append(("credential", "expected client_id:client_secret"))
        return problems + url_password_problems("uri", self.uri, "catalog.token or catalog.credential")

    def _sql_only_problems(self) -> list[Problem]:
        rest_only = (
            "prefix",
            "token",
            "token_file",
            "credential",
            "credential_file",
            "oauth2_server_uri",
            "ca_file",
            "headers",
            "access_delegation",
            "request_timeout",
        )
        return [
            (key, "only used with type: rest")
            for key in rest_only
            if key in self.model_fields_set and getattr(self, key)
        ]

    def rest_headers(self) -> dict[str, str]:
        """The REST catalog's static request headers: the extra ones and the bearer token. Secrets: never log them.

        Client credentials are not exchanged here: the catalog client fetches
        tokens itself, and again before each expires (:mod:`commit.catalog.rest.auth`).
        """
        token = secret_value(self.token, self.token_file)
        return {**self.headers, **({"Authorization": f"Bearer {token}"} if token else {})}

    def rest_credential(self) -> str | None:
        """The OAuth2 client credentials ``client_id:client_secret``, if set. A secret: never log it."""
        return secret_value(self.credential, self.credential_file)

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
