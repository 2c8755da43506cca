"""Writer schemas of Confluent-framed messages, by schema id: Avro, JSON Schema or Protobuf.

Two sources: a Confluent-compatible schema registry, of which executors need
only ``GET /schemas/ids/{id}`` and the driver the subject endpoints (so a
small stdlib client keeps executors free of the registry client's extra
dependencies), and a local directory of ``<id>.avsc`` files (Avro only).

The two failure kinds are kept apart on purpose. An id the source does not
know is a property of the record: :class:`UnknownSchemaError` sends it to the
dead letters. A registry that cannot be reached, or refuses us, is not:
:class:`RegistryUnavailableError` fails the batch so that Spark retries it,
instead of an outage dead-lettering a whole topic.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ingest.tasks.record_errors import DecodeError

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"


class UnknownSchemaError(DecodeError):
    """The message names a schema id its schema source does not have."""

    def __init__(self, reason: str, field: str | None = None, schema_id: int = -1) -> None:
        super().__init__(reason, field)
        self.schema_id = schema_id

    @classmethod
    def for_id(cls, schema_id: int, where: str) -> UnknownSchemaError:
        return cls(f"unknown schema id {schema_id} (not in {where})", None, schema_id)

    def __reduce__(self) -> tuple:
        return (type(self), (self.reason, self.field, self.schema_id))


class RegistryUnavailableError(RuntimeError):
    """The schema registry could not answer; the batch fails and is retried."""


SCHEMA_KINDS = ("AVRO", "JSON", "PROTOBUF")
"""The registry's schema types (``schemaType``; absent means Avro)."""


@dataclass(frozen=True)
class RegisteredSchema:
    """One writer schema: its kind (one of :data:`SCHEMA_KINDS`) and its text as the registry keeps it."""

    kind: str
    text: str


class WriterSchemas(Protocol):
    """Where writer schemas come from."""

    def schema(self, schema_id: int) -> RegisteredSchema:
        """The schema registered under ``schema_id``."""
        ...


class SchemaRegistryClient:
    """Reads schemas by id from a Confluent-compatible registry over HTTP(S).

    Credentials in the URL (``https://user:secret@host``) are sent as HTTP
    basic auth, as the Confluent clients do.
    """

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self._headers = {"Accept": _ACCEPT}
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            secret = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{secret}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
            parts = parts._replace(netloc=(parts.hostname or "") + (f":{parts.port}" if parts.port else ""))
        self._base = urllib.parse.urlunsplit(parts).rstrip("/")
        self._timeout = timeout

    @property
    def url(self) -> str:
        """The registry's base URL, without credentials."""
        return self._base

    def schema(self, schema_id: int) -> RegisteredSchema:
        path, what = f"/schemas/ids/{schema_id}", f"schema id {schema_id}"
        body = self._get(path, what)
        if body is None:
            raise UnknownSchemaError.for_id(schema_id, f"schema registry {self._base}")
        if _needs_serialized(body):
            body = self._get(path + "?format=serialized", what)
        return _registered(body, schema_id)

    def versions(self, subject: str) -> list[int]:
        """The versions registered under ``subject``, oldest first; empty when the subject has none."""
        body = self._get(f"/subjects/{urllib.parse.quote(subject, safe='')}/versions", f"subject {subject}")
        if body is None:
            return []
        if not isinstance(body, list) or not all(isinstance(v, int) for v in body):
            raise RegistryUnavailableError(f"schema registry {self._base} answered {body!r} for subject {subject}")
        return sorted(body)

    def version(self, subject: str, version: int) -> SubjectVersion:
        """One version of ``subject``: its schema id and Avro schema text."""
        what = f"version {version} of subject {subject}"
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions/{version}"
        body = self._get(path, what)
        if _needs_serialized(body):
            body = self._get(path + "?format=serialized", what)
        if not isinstance(body, dict) or not isinstance(body.get("id"), int):
            raise RegistryUnavailableError(f"schema registry {self._base} has no schema id for {what}")
        return SubjectVersion(subject, version, body["id"], _registered(body, body["id"]))

    def _get(self, path: str, what: str) -> object:
        """The JSON answer to ``GET path``; None for a 404. Any other failure is :class:`RegistryUnavailableError`."""
        request = urllib.request.Request(self._base + path, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise RegistryUnavailableError(f"schema registry {self._base} answered HTTP {exc.code} for {what}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RegistryUnavailableError(f"schema registry {self._base} failed for {what}: {exc}") from exc


@dataclass(frozen=True)
class SubjectVersion:
    """One registered version of a subject."""

    subject: str
    version: int
    schema_id: int
    schema: RegisteredSchema


def _needs_serialized(body: object) -> bool:
    """A Protobuf schema given as ``.proto`` text (a registry's default): Floe reads the serialized descriptor."""
    if not isinstance(body, dict) or body.get("schemaType") != "PROTOBUF" or not isinstance(body.get("schema"), str):
        return False
    try:
        base64.b64decode(body["schema"].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        return True
    return False


def _registered(body: object, schema_id: int) -> RegisteredSchema:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryUnavailableError(f"schema registry answer for id {schema_id} has no 'schema' text")
    kind = body.get("schemaType") or "AVRO"
    if kind not in SCHEMA_KINDS:
        raise DecodeError(f"schema id {schema_id} is a {kind} schema: Floe reads {', '.join(SCHEMA_KINDS)}")
    if body.get("references"):
        raise DecodeError(f"schema id {schema_id} refers to other schemas, which Floe does not follow yet")
    return RegisteredSchema(kind, body["schema"])


class SchemaDirectory:
    """Reads schemas from ``<dir>/<id>.avsc``; the directory must exist on every executor."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def schema(self, schema_id: int) -> RegisteredSchema:
        try:
            return RegisteredSchema("AVRO", (self._path / f"{schema_id}.avsc").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UnknownSchemaError.for_id(schema_id, f"schema directory {self._path}") from None
