"""HTTPS and OAuth2 in front of a real REST catalog server, as a gateway with an identity provider guards one.

The proxy serves TLS on a certificate from the test's CA, answers the OAuth2 client-credentials request
(``POST /v1/oauth/tokens``) for one client with tokens that live ``token_ttl_s``, and refuses any other
request with 401 unless it carries a live token. Everything else goes to the server over plain HTTP.
"""

from __future__ import annotations

import json
import secrets
import ssl
import threading
import time
from typing import Optional
from urllib.parse import parse_qs

from tests.support.certificates import Issued
from tests.support.dropping_proxy import DroppingProxy

TOKEN_PATH = "/v1/oauth/tokens"


class OAuthTlsProxy(DroppingProxy):
    """``with OAuthTlsProxy(upstream, certificate, "id", "secret", token_ttl_s=5) as proxy: proxy.uri``."""

    def __init__(self, upstream: str, certificate: Issued, client_id: str, client_secret: str,
                 token_ttl_s: float) -> None:
        super().__init__(upstream)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate.cert, certificate.key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.client = (client_id, client_secret)
        self.token_ttl_s = token_ttl_s
        self.tokens: dict[str, float] = {}  # every token issued, and when it expires (monotonic seconds)
        self.expired_refusals = 0  # requests refused for a token that had expired
        self._lock = threading.Lock()

    @property
    def uri(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def answer_here(self, method: str, path: str, headers: dict[str, str],
                    body: Optional[bytes]) -> Optional[tuple[int, bytes]]:
        if path.split("?")[0] == TOKEN_PATH:
            return self._token(parse_qs((body or b"").decode()))
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        with self._lock:
            expires = self.tokens.get(token)
            if expires is not None and time.monotonic() < expires:
                return None
            self.expired_refusals += expires is not None
        return 401, json.dumps({"error": {"message": "the token is missing, unknown or expired",
                                          "type": "NotAuthorizedException", "code": 401}}).encode()

    def _token(self, form: dict[str, list[str]]) -> tuple[int, bytes]:
        given = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
        if form.get("grant_type") != ["client_credentials"] or given != self.client:
            return 401, json.dumps({"error": "invalid_client"}).encode()
        token = secrets.token_urlsafe(24)
        with self._lock:
            self.tokens[token] = time.monotonic() + self.token_ttl_s
        return 200, json.dumps({"access_token": token, "token_type": "bearer",
                                "expires_in": self.token_ttl_s}).encode()
