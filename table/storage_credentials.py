"""Storage credentials that a catalog vends with a table ("access delegation").

A REST catalog may answer a table load with short-lived credentials for the
table's files, instead of every writer holding long-lived keys for the whole
warehouse. The REST specification carries them two ways, and Iceberg Java's
FileIO reads both:

- ``storage-credentials``: a list of ``{"prefix", "config"}``, each for the
  locations under its prefix (the longest prefix wins);
- ``config``: FileIO properties for the whole table (older servers, and
  Iceberg's own test server).

The properties are Iceberg's FileIO names (``s3.access-key-id``,
``s3.secret-access-key``, ``s3.session-token``,
``s3.session-token-expires-at-ms``). :func:`vended_credentials` reads them
(pure) into :class:`StorageCredentials`, which the loaded table's
:class:`table.io.FileIO` holds. There is no process-wide store, so a process
that serves several tables never hands one table's keys to another's files.
Spark tasks run in other processes; they receive the table's FileIO, with its
credentials, inside their task description. On the driver the credentials are
:class:`RefreshingCredentials`, loaded again before they expire. Secrets are
never in a ``repr``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

ACCESS_KEY_ID = "s3.access-key-id"
SECRET_ACCESS_KEY = "s3.secret-access-key"
SESSION_TOKEN = "s3.session-token"
EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
_EQUIVALENT_SCHEMES = {"s3a": "s3", "s3n": "s3"}
REFRESH_BEFORE_EXPIRY_MS = 5 * 60 * 1000
REFRESH_AT_MOST_EVERY_S = 30.0


@dataclass(frozen=True)
class S3Credential:
    """Keys for the S3 locations under ``prefix``; the secret parts are kept out of ``repr``."""

    prefix: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    expires_at_ms: int | None = None

    def covers(self, location: str) -> bool:
        """Whether ``location`` starts with this credential's prefix (``s3a://`` and ``s3://`` alike).

        A plain string prefix, as Iceberg Java matches storage credentials: the
        table's credential also covers Floe's key index beside the table
        (``<table location>.floe-key-index/``), and a sibling table's longer
        prefix wins for its own files.
        """
        return _comparable(location).startswith(_comparable(self.prefix))

    def expires_within(self, ms: int, now_ms: int) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms - now_ms <= ms


def vended_credentials(
    table_prefixes: Sequence[str], config: Mapping[str, Any] | None, storage_credentials: Any
) -> list[S3Credential]:
    """The S3 credentials of one load answer.

    The spec has clients look at ``storage-credentials`` first: its S3
    entries, each for its own prefix. Only without any does the table
    ``config`` count, for each of ``table_prefixes`` (the table's location,
    and whatever else belongs to the table). Entries without both key parts
    vend something else (GCS, ADLS) or nothing, and malformed ones are
    skipped.
    """
    found = []
    for entry in storage_credentials if isinstance(storage_credentials, list) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("config"), Mapping):
            credential = _s3_credential(str(entry.get("prefix", "")), entry["config"])
            if credential is not None:
                found.append(credential)
    if found or not isinstance(config, Mapping):
        return found
    return [c for c in (_s3_credential(prefix, config) for prefix in table_prefixes) if c is not None]


def _s3_credential(prefix: str, properties: Mapping[str, Any]) -> S3Credential | None:
    key, secret = properties.get(ACCESS_KEY_ID), properties.get(SECRET_ACCESS_KEY)
    if not prefix or not key or not secret:
        return None
    expires = properties.get(EXPIRES_AT_MS)
    token = properties.get(SESSION_TOKEN)
    return S3Credential(
        prefix,
        str(key),
        str(secret),
        str(token) if token else None,
        int(str(expires)) if str(expires or "").isdigit() else None,
    )


def _comparable(location: str) -> str:
    scheme, sep, rest = location.partition("://")
    return f"{_EQUIVALENT_SCHEMES.get(scheme.lower(), scheme.lower())}{sep}{rest}" if sep else location


@dataclass(frozen=True)
class StorageCredentials:
    """The S3 credentials vended with one table load, by prefix.

    Immutable and picklable: a table's :class:`table.io.FileIO` holds them,
    and the tasks that write the table's files carry them with it. Secrets are
    never in a ``repr``.
    """

    credentials: tuple[S3Credential, ...] = ()

    def for_location(self, location: str) -> S3Credential | None:
        """The credential with the longest prefix covering ``location``, if any."""
        covering = [c for c in self.credentials if c.covers(location)]
        return max(covering, key=lambda c: len(_comparable(c.prefix)), default=None)

    def current(self) -> StorageCredentials:
        return self

    def expire_within(self, ms: int, now_ms: int) -> bool:
        return any(c.expires_within(ms, now_ms) for c in self.credentials)

    def __bool__(self) -> bool:
        return bool(self.credentials)


NO_CREDENTIALS = StorageCredentials()


class CredentialSource(Protocol):
    """Where a FileIO finds the keys for a location: fixed credentials, or the driver's refreshing ones."""

    def for_location(self, location: str) -> S3Credential | None: ...

    def current(self) -> StorageCredentials: ...


class RefreshingCredentials:
    """A table's vended credentials on the driver, loaded again when about to expire.

    ``reload`` loads the table again and returns its new credentials. It runs
    when a credential is looked up within five minutes of its expiry, at most
    every 30 s; a failed reload keeps the old keys, and the store's own error
    names the file if they no longer work. A Spark task has no reload: it
    uses what it carried, which is at most one batch old.
    """

    def __init__(
        self,
        current: StorageCredentials,
        reload: Callable[[], StorageCredentials],
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._current = current
        self._reload = reload
        self._clock_ms = clock_ms
        self._reloaded_at = -1e9
        self._lock = threading.Lock()

    def current(self) -> StorageCredentials:
        with self._lock:
            return self._current

    def for_location(self, location: str) -> S3Credential | None:
        found = self.current().for_location(location)
        if found is not None and self._due(found):
            self._reload_now(found)
            found = self.current().for_location(location)
        return found

    def _due(self, credential: S3Credential) -> bool:
        with self._lock:
            if time.monotonic() - self._reloaded_at < REFRESH_AT_MOST_EVERY_S:
                return False
        return credential.expires_within(REFRESH_BEFORE_EXPIRY_MS, self._clock_ms())

    def _reload_now(self, credential: S3Credential) -> None:
        with self._lock:
            self._reloaded_at = time.monotonic()
        try:
            fresh = self._reload()
        except Exception as failed:  # noqa: BLE001 - the old keys stay; the store's own error will name the file
            log.warning("could not refresh the vended storage credentials for %s: %s", credential.prefix, failed)
            return
        if fresh:
            with self._lock:
                self._current = fresh
