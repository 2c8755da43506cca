"""An HTTP proxy in front of a real server that loses the answers to chosen requests.

The request reaches the server and is applied; the client then gets a 503 in
its place, or no answer at all until its read timeout. That is how a commit
whose outcome is unknown looks from the client's side. A rule may also refuse
a request with 401 before it reaches the server, as an expired token is, or
with 503 ("down"), as a catalog that is down, or behind a load balancer with
no healthy server, refuses it.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

import requests

Rule = Callable[[str, str], Optional[str]]  # (method, path) -> None (pass), "503", "silence", "401" or "down"


class DroppingProxy:
    """``with DroppingProxy(upstream) as proxy: proxy.uri``; :attr:`rule` picks what to lose."""

    def __init__(self, upstream: str, rule: Optional[Rule] = None, silence_s: float = 5.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.rule: Rule = rule or (lambda method, path: None)
        self.silence_s = silence_s
        self.lost: list[tuple[str, str, int]] = []  # method, path, the server's real status
        self.seen: list[tuple[str, str, str]] = []  # method, path and Authorization header of each request
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "DroppingProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer_here(self, method: str, path: str, headers: dict[str, str],
                    body: Optional[bytes]) -> Optional[tuple[int, bytes]]:
        """A status and JSON body to answer with instead of the server's; None forwards the request."""
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                proxy.seen.append((self.command, self.path, self.headers.get("Authorization", "")))
                local = proxy.answer_here(self.command, self.path, headers, body)
                if local is not None:
                    return self._answer(*local)
                verdict = proxy.rule(self.command, self.path)
                if verdict == "down":
                    return self._answer(503, b'{"error": {"message": "no healthy upstream", '
                                             b'"type": "ServiceUnavailable", "code": 503}}')
                if verdict == "401":
                    return self._answer(401, b'{"error": {"message": "token expired", "type": "NotAuthorized", '
                                             b'"code": 401}}')
                answer = requests.request(self.command, proxy.upstream + self.path, data=body, headers=headers,
                                          timeout=60)
                if verdict is not None:
                    proxy.lost.append((self.command, self.path, answer.status_code))
                if verdict == "silence":
                    time.sleep(proxy.silence_s)
                    self.close_connection = True
                    return
                status, content = (503, b'{"error": {"message": "upstream lost", "type": "ServiceUnavailable", '
                                        b'"code": 503}}') if verdict == "503" else (answer.status_code, answer.content)
                self._answer(status, content)

            def _answer(self, status: int, content: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_DELETE = do_HEAD = _forward

        return Handler
