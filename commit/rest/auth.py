"""OAuth2 client credentials for a REST catalog (RFC 6749 section 4.4, as the Iceberg REST spec uses it)."""

from __future__ import annotations

import requests

from commit.rest.client import RestCatalogError


def client_credentials_token(endpoint: str, client_id: str, client_secret: str, scope: str,
                             timeout_s: float = 30.0) -> str:
    """An access token for the client; :class:`RestCatalogError` names the endpoint when refused."""
    call = f"get a token from {endpoint}"
    try:
        answer = requests.post(endpoint, data={"grant_type": "client_credentials", "client_id": client_id,
                                               "client_secret": client_secret, "scope": scope}, timeout=timeout_s)
    except requests.RequestException as failed:
        raise RestCatalogError(call, None, type(failed).__name__, str(failed)) from None
    if answer.status_code >= 400:
        raise RestCatalogError(call, answer.status_code, "", answer.text.strip()[:300] or answer.reason)
    try:
        token = answer.json()["access_token"]
    except (ValueError, KeyError, TypeError):
        raise RestCatalogError(call, answer.status_code, "", "the answer has no access_token") from None
    return str(token)
