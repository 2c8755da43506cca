"""A Confluent-compatible schema registry for the tests, over HTTP on a loopback port.

Neither Confluent's Schema Registry nor Apicurio Registry resolves from what this machine reaches (Apicurio's
app needs ``apicurio-registry-schema-util-provider``, which Maven Central does not serve, and a Quarkus build).
So the tests run this one, and their producers talk to it through confluent-kafka's own
``SchemaRegistryClient`` and serializers: both ends of the wire are real clients.

It serves what producers and Floe use, as the Confluent API reference describes them:

* ``POST /subjects/{s}/versions`` registers (the same schema again gives its existing version and id; the
  same schema under another subject gets the same id), ``POST /subjects/{s}`` looks a schema up;
* ``GET /subjects``, ``GET /subjects/{s}/versions``, ``GET /subjects/{s}/versions/{v|latest}``;
* ``GET /schemas/ids/{id}``, ``GET /schemas/ids/{id}/versions``;
* ``GET|PUT /config`` and ``/config/{s}``: the compatibility level is stored and reported. Registrations are
  not checked against it: the tests register incompatible versions on purpose, as under ``NONE``.

Schemas are kept in memory: the registry lives as long as the test that started it.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class _Schema:
    schema_id: int
    text: str
    schema_type: str
    references: list = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": self.text}
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = self.references
        return body


class SchemaRegistry:
    """The registry's state and its answers; :meth:`serve` puts it on a loopback port."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[int, _Schema] = {}
        self._by_key: dict[tuple[str, str], _Schema] = {}
        self._subjects: dict[str, list[int]] = {}  # subject -> schema id of each version, version = index + 1
        self._config: dict[str, str] = {"": "BACKWARD"}
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    # -- the API ---------------------------------------------------------------

    def register(self, subject: str, body: dict) -> dict:
        schema = self._schema_of(body)
        versions = self._subjects.setdefault(subject, [])
        if schema.schema_id not in versions:
            versions.append(schema.schema_id)
        version = versions.index(schema.schema_id) + 1
        return {"id": schema.schema_id, "subject": subject, "version": version, **schema.body()}

    def lookup(self, subject: str, body: dict) -> dict:
        versions = self._versions(subject)
        key = (body.get("schemaType", "AVRO"), _canonical(body["schema"], body.get("schemaType", "AVRO")))
        schema = self._by_key.get(key)
        if schema is None or schema.schema_id not in versions:
            raise RegistryError(404, 40403, "Schema not found")
        return self.version(subject, str(versions.index(schema.schema_id) + 1))

    def version(self, subject: str, version: str) -> dict:
        versions = self._versions(subject)
        number = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= number <= len(versions):
            raise RegistryError(404, 40402, f"Version {version} not found.")
        schema = self._by_id[versions[number - 1]]
        return {"subject": subject, "version": number, "id": schema.schema_id, **schema.body()}

    def schema(self, schema_id: int) -> dict:
        if schema_id not in self._by_id:
            raise RegistryError(404, 40403, f"Schema {schema_id} not found")
        return self._by_id[schema_id].body()

    def schema_versions(self, schema_id: int) -> list[dict]:
        return [
            {"subject": s, "version": v.index(schema_id) + 1} for s, v in sorted(self._subjects.items()) if schema_id in v
        ]

    def _versions(self, subject: str) -> list[int]:
        if subject not in self._subjects:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        return self._subjects[subject]

    def _schema_of(self, body: dict) -> _Schema:
        kind = body.get("schemaType", "AVRO")
        if kind not in ("AVRO", "PROTOBUF", "JSON"):
            raise RegistryError(422, 42201, f"Unknown schema type {kind}")
        text = body.get("schema")
        if not isinstance(text, str):
            raise RegistryError(422, 42201, "Invalid schema: no schema text")
        key = (kind, _canonical(text, kind))
        if key not in self._by_key:
            schema = _Schema(len(self._by_id) + 1, text, kind, list(body.get("references") or []))
            self._by_key[key] = self._by_id[schema.schema_id] = schema
        return self._by_key[key]

    # -- HTTP ------------------------------------------------------------------

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        """The status and JSON body of one request."""
        with self._lock:
            self.requests.append(f"{method} {path}")
            route = urllib.parse.urlsplit(path).path.rstrip("/")
            for pattern, verb, handler in self._routes():
                match = re.fullmatch(pattern, route)
                if match and verb == method:
                    try:
                        return 200, handler(*[urllib.parse.unquote(g) for g in match.groups()], body=body)
                    except RegistryError as exc:
                        return exc.status, {"error_code": exc.code, "message": exc.message}
            return 404, {"error_code": 404, "message": f"no route for {method} {route}"}

    def _routes(self) -> Iterator[tuple[str, str, Callable[..., Any]]]:
        yield r"/subjects", "GET", lambda body: sorted(self._subjects)
        yield r"/subjects/([^/]+)/versions", "GET", lambda s, body: list(range(1, len(self._versions(s)) + 1))
        yield r"/subjects/([^/]+)/versions", "POST", lambda s, body: self.register(s, body)
        yield r"/subjects/([^/]+)/versions/([^/]+)", "GET", lambda s, v, body: self.version(s, v)
        yield r"/subjects/([^/]+)", "POST", lambda s, body: self.lookup(s, body)
        yield r"/schemas/ids/(\d+)", "GET", lambda i, body: self.schema(int(i))
        yield r"/schemas/ids/(\d+)/versions", "GET", lambda i, body: self.schema_versions(int(i))
        yield r"/config", "GET", lambda body: {"compatibilityLevel": self._config[""]}
        yield r"/config", "PUT", lambda body: self._set_config("", body)
        yield r"/config/([^/]+)", "GET", lambda s, body: {"compatibilityLevel": self._config.get(s, self._config[""])}
        yield r"/config/([^/]+)", "PUT", lambda s, body: self._set_config(s, body)

    def _set_config(self, subject: str, body: dict) -> dict:
        level = body.get("compatibility")
        if level not in ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE"):
            raise RegistryError(422, 42203, f"Invalid compatibility level {level!r}")
        self._config[subject] = level
        return {"compatibility": level}

    def serve(self) -> str:
        """Start answering on 127.0.0.1 in a daemon thread; returns the base URL."""
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, answer = registry.answer(method, self.path, json.loads(raw) if raw else None)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._reply("GET")

            def do_POST(self) -> None:
                self._reply("POST")

            def do_PUT(self) -> None:
                self._reply("PUT")

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _canonical(text: str, kind: str) -> str:
    """One text per schema, whatever its whitespace or key order (JSON schemas); Protobuf as written."""
    if kind == "PROTOBUF":
        return text.strip()
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError as exc:
        raise RegistryError(422, 42201, f"Invalid schema: {exc}") from None
