"""OAuth2 client credentials for a REST catalog (RFC 6749 section 4.4, as the Iceberg REST spec uses it).

A token lives ``expires_in`` seconds, and Floe runs for months, so the token
is fetched again before it expires (:func:`refresh_due`: with a fifth of its
life, at most five minutes, left) and at once when the server answers 401.
A token without ``expires_in`` is kept until the server refuses it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests

from commit.catalog.rest.client import RestCatalogError

REFRESH_MARGIN_MAX_S = 300.0


@dataclass(frozen=True)
class ClientCredentials:
    """Where to ask for a token, and as whom; the secret is kept out of ``repr``."""

    endpoint: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = "catalog"
    ca_file: str | None = None
    """PEM certificate authorities trusted for an ``https://`` endpoint; None: the system's."""


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    expires_in_s: float | None
    """Seconds the token is valid for, as the server said; None when it did not say."""


def refresh_due(fetched_at: float, expires_in_s: float | None, now: float) -> bool:
    """Whether a token fetched at ``fetched_at`` should be replaced at ``now`` (monotonic seconds)."""
    if expires_in_s is None:
        return False
    margin = min(REFRESH_MARGIN_MAX_S, expires_in_s / 5)
    return now >= fetched_at + expires_in_s - margin


def client_credentials_token(credentials: ClientCredentials, timeout_s: float = 30.0) -> Token:
    """A new token for the client; :class:`RestCatalogError` names the endpoint when refused."""
    call = f"get a token from {credentials.endpoint}"
    form = {
        "grant_type": "client_credentials",
        "client_id": credentials.client_id,
        "client_secret": credentials.client_secret,
        "scope": credentials.scope,
    }
    try:
        answer = requests.post(credentials.endpoint, data=form, timeout=timeout_s, verify=credentials.ca_file or True)
    except requests.RequestException as failed:
        raise RestCatalogError(call, None, type(failed).__name__, str(failed)) from None
    if answer.status_code >= 400:
        raise RestCatalogError(call, answer.status_code, "", answer.text.strip()[:300] or answer.reason)
    try:
        body = answer.json()
        expires = body.get("expires_in")
        return Token(str(body["access_token"]), float(expires) if expires is not None else None)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RestCatalogError(call, answer.status_code, "", "the answer has no access_token") from None


class OAuthTokens:
    """The current token for one client: fetched when first needed, again when due or refused."""

    def __init__(
        self,
        credentials: ClientCredentials,
        *,
        clock: Callable[[], float] = time.monotonic,
        fetch: Callable[[ClientCredentials], Token] = client_credentials_token,
    ) -> None:
        self.credentials = credentials
        self._clock = clock
        self._fetch = fetch
        self._token: Token | None = None
        self._fetched_at = 0.0
        self._lock = threading.Lock()
        self.fetches = 0

    def authorization(self) -> str:
        """The ``Authorization`` header value, with a fresh token when the old one is due."""
        with self._lock:
            if self._token is None or refresh_due(self._fetched_at, self._token.expires_in_s, self._clock()):
                self._token, self._fetched_at = self._fetch(self.credentials), self._clock()
                self.fetches += 1
            return f"Bearer {self._token.value}"

    def refused(self, authorization: str) -> None:
        """The server answered 401 to ``authorization``: the next request fetches a new token.

        Only if that is still the current token: another thread may have
        replaced it already.
        """
        with self._lock:
            if self._token is not None and authorization == f"Bearer {self._token.value}":
                self._token = None
