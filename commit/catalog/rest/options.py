"""How Floe talks to one REST catalog: headers, prefix, authentication, access delegation.

One value, so the configuration, the ingest job spec and the commands open a
REST catalog the same way. The secrets in it (a bearer token in the headers,
the client secret) are never logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from commit.catalog.rest.auth import ClientCredentials, OAuthTokens
from commit.catalog.rest.client import Authorizer

ACCESS_DELEGATION_HEADER = "X-Iceberg-Access-Delegation"
VENDED_CREDENTIALS = "vended-credentials"


@dataclass(frozen=True)
class RestOptions:
    """``credential`` is ``client_id:client_secret`` for OAuth2; a static token goes in ``headers``."""

    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    prefix: str | None = None
    credential: str | None = field(default=None, repr=False)
    oauth2_server_uri: str | None = None
    scope: str = "catalog"
    access_delegation: str | None = None
    """``vended-credentials`` asks the server for storage credentials with each table."""
    read_timeout_s: float = 60.0
    """How long a request waits for the answer; a commit without one has an unknown outcome."""
    ca_file: str | None = None
    """PEM certificate authorities trusted for ``https://`` (the catalog and its token endpoint); None: the
    system's."""

    def request_headers(self) -> dict[str, str]:
        delegation = {ACCESS_DELEGATION_HEADER: self.access_delegation} if self.access_delegation else {}
        return {**self.headers, **delegation}

    def authorizer(self, uri: str) -> Authorizer | None:
        """OAuth2 tokens for the client credentials, fetched as needed; None without credentials."""
        if self.credential is None:
            return None
        client_id, _, client_secret = self.credential.partition(":")
        endpoint = self.oauth2_server_uri or f"{uri.rstrip('/')}/v1/oauth/tokens"
        return OAuthTokens(ClientCredentials(endpoint, client_id, client_secret, self.scope, self.ca_file))

    @property
    def vends_credentials(self) -> bool:
        return self.access_delegation == VENDED_CREDENTIALS
