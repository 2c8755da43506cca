"""HTTP to an Iceberg REST catalog, with the server's answers as Floe's typed errors.

``requests`` keeps one pooled connection per server and gives timeouts on
connect and read; the protocol itself (paths, bodies) lives in
:mod:`commit.catalog.rest.catalog`. Errors follow the OpenAPI specification and
Iceberg Java's error handlers:

- on a commit, 409 is :class:`CommitConflict` (a requirement failed: reload,
  re-validate, retry), and 500, 502, 503, 504 or a timeout after the request
  was sent are :class:`CommitStateUnknown` (the outcome must be checked);
- 404 names a missing table or namespace, 409 elsewhere an existing one;
- anything else is a :class:`RestCatalogError` with the status and the
  server's message (error bodies need not be JSON).

Credentials are never logged: the token is only in the request's headers.
With OAuth2 client credentials (:class:`Authorizer`), each request carries
the current token, and a 401 fetches a new one and sends the request once
more: a refused request changed nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import requests

from commit.errors import CatalogError

UNKNOWN_OUTCOME_STATUSES = frozenset({500, 502, 503, 504})


class RestCatalogError(CatalogError):
    """The REST catalog refused a request or could not be reached; names the call and the reason."""

    def __init__(self, call: str, status: int | None, kind: str, message: str) -> None:
        self.call = call
        self.status = status
        self.kind = kind
        self.server_message = message
        at = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"REST catalog {call}: {at}{f' {kind}' if kind else ''}: {message}")


class Authorizer(Protocol):
    """Gives the ``Authorization`` header value, and learns when the server refused it."""

    def authorization(self) -> str: ...

    def refused(self, authorization: str) -> None: ...


@dataclass(frozen=True)
class RestAnswer:
    status: int
    body: dict[str, Any] | None


class RestClient:
    """One REST catalog endpoint: ``uri`` (``http(s)://host:port[/base]``) and static headers."""

    def __init__(
        self,
        uri: str,
        headers: Mapping[str, str] | None = None,
        *,
        auth: Authorizer | None = None,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
        ca_file: str | None = None,
    ) -> None:
        """``ca_file``: PEM certificate authorities trusted for an ``https://`` uri; None: the system's."""
        self.uri = uri.rstrip("/")
        self.timeouts = (connect_timeout_s, read_timeout_s)
        self._auth = auth
        self._verify: str | bool = ca_file or True  # per request: a session's own is overridden by the environment
        self._session = requests.Session()
        self._session.headers.update(
            {
                "Content-Type": "application/json",
                "Accept": "application/json",
                "X-Client-Version": "floe",
                **(headers or {}),
            }
        )

    def close(self) -> None:
        self._session.close()

    def request(
        self,
        call: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        idempotent_key: bool = False,
        on_error: Callable[[RestCatalogError], Exception] | None = None,
    ) -> RestAnswer:
        """Send one request; an error answer goes through ``on_error`` (a typed error) or is raised as is.

        ``idempotent_key`` sends an ``Idempotency-Key`` header, so that a server
        that supports it applies a retried mutation once.
        """
        headers = {"Idempotency-Key": str(uuid.uuid4())} if idempotent_key else {}
        try:
            response, sent = self._send(method, path, body, params, headers)
            if response.status_code == 401 and self._auth is not None:
                self._auth.refused(sent)
                response, _ = self._send(method, path, body, params, headers)
        except requests.Timeout as timeout:
            raise _typed(RestCatalogError(call, None, "Timeout", str(timeout)), on_error) from None
        except requests.RequestException as failed:
            raise _typed(RestCatalogError(call, None, type(failed).__name__, str(failed)), on_error) from None
        if response.status_code < 400:
            return RestAnswer(response.status_code, _json(response) if response.content else None)
        kind, message = _error_of(response)
        raise _typed(RestCatalogError(call, response.status_code, kind, message), on_error)

    def _send(
        self, method: str, path: str, body: Any, params: Mapping[str, str] | None, headers: dict[str, str]
    ) -> tuple[requests.Response, str]:
        """The response, and the Authorization value it was sent with ("" without OAuth)."""
        authorization = self._auth.authorization() if self._auth is not None else ""
        if authorization:
            headers = {**headers, "Authorization": authorization}
        response = self._session.request(
            method,
            f"{self.uri}/{path.lstrip('/')}",
            json=body,
            params=params,
            headers=headers,
            timeout=self.timeouts,
            verify=self._verify,
        )
        return response, authorization


def _typed(error: RestCatalogError, on_error: Callable[[RestCatalogError], Exception] | None) -> Exception:
    return on_error(error) if on_error is not None else error


def _json(response: requests.Response) -> dict[str, Any] | None:
    try:
        value = response.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _error_of(response: requests.Response) -> tuple[str, str]:
    """The error's type and message from the spec's ``{"error": {...}}`` body, or the raw text."""
    body = _json(response) or {}
    error = body.get("error") if isinstance(body.get("error"), dict) else body
    kind = str(error.get("type", "")) if isinstance(error, dict) else ""
    message = error.get("message") if isinstance(error, dict) else None
    if not message:
        message = response.text.strip().splitlines()[0][:300] if response.text.strip() else response.reason
    return kind, str(message)
