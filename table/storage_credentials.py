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
(pure); :data:`VENDED` keeps them for this process, where
:class:`table.io.FileIO` looks up each location it opens. Spark tasks run in
other processes, so a task function is wrapped with :meth:`CredentialStore.carried`:
the credentials travel with the task and are adopted before it runs.

The store is per process and refreshed by every table load: Floe loads the
table before each batch and each compaction, so a credential is at most one
load old. Secrets are never in a ``repr``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

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


Refresh = Callable[[], None]


class CredentialStore:
    """The vended credentials this process knows, by prefix; the newest for a prefix replaces the older.

    A credential remembered with a ``refresh`` (the driver's table load) is
    refreshed when it is looked up within five minutes of its expiry, at most
    every 30 s. A Spark worker has no refresh: it uses what its task carried,
    which is at most one batch old.
    """

    def __init__(self, clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._by_prefix: dict[str, S3Credential] = {}
        self._refresh: dict[str, Refresh] = {}
        self._refreshed_at: dict[str, float] = {}
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._scope = threading.local()

    def remember(self, credentials: Iterable[S3Credential], refresh: Refresh | None = None) -> None:
        with self._lock:
            for credential in credentials:
                key = _comparable(credential.prefix)
                self._by_prefix[key] = credential
                if refresh is not None:
                    self._refresh[key] = refresh

    def for_location(self, location: str) -> S3Credential | None:
        """The credential with the longest prefix covering ``location``, if any; refreshed when about to expire."""
        found = self._covering(location)
        if found is not None and self._refresh_due(found):
            self._refresh_now(found)
            found = self._covering(location)
        return found

    def _covering(self, location: str) -> S3Credential | None:
        with self._lock:
            covering = [c for c in self._by_prefix.values() if c.covers(location)]
        return max(covering, key=lambda c: len(_comparable(c.prefix)), default=None)

    def _refresh_due(self, credential: S3Credential) -> bool:
        key = _comparable(credential.prefix)
        with self._lock:
            if (
                key not in self._refresh
                or time.monotonic() - self._refreshed_at.get(key, -1e9) < REFRESH_AT_MOST_EVERY_S
            ):
                return False
        return credential.expires_within(REFRESH_BEFORE_EXPIRY_MS, self._clock_ms())

    def _refresh_now(self, credential: S3Credential) -> None:
        key = _comparable(credential.prefix)
        with self._lock:
            self._refreshed_at[key] = time.monotonic()
            refresh = self._refresh[key]
        try:
            refresh()
        except Exception as failed:  # noqa: BLE001 - the old keys stay; the store's own error will name the file
            log.warning("could not refresh the vended storage credentials for %s: %s", credential.prefix, failed)

    def relevant_to(self, location: str) -> tuple[S3Credential, ...]:
        """The credentials for files of the table at ``location``: under it, beside it, or covering it."""
        table = _comparable(location).rstrip("/")
        with self._lock:
            return tuple(
                c
                for c in self._by_prefix.values()
                if _comparable(c.prefix).startswith(table) or table.startswith(_comparable(c.prefix))
            )

    def snapshot(self) -> tuple[S3Credential, ...]:
        with self._lock:
            return tuple(self._by_prefix.values())

    def forget_all(self) -> None:
        with self._lock:
            self._by_prefix.clear()
            self._refresh.clear()
            self._refreshed_at.clear()

    @contextmanager
    def scoped_to(self, table_location: str) -> Iterator[None]:
        """Within this block (on this thread), :meth:`carried` carries only the table's credentials."""
        previous = getattr(self._scope, "table", None)
        self._scope.table = table_location
        try:
            yield
        finally:
            self._scope.table = previous

    def carried(self, task: Callable[..., Any], table_location: str | None = None) -> Callable[..., Any]:
        """``task``, carrying the credentials of its table to the Spark worker that runs it.

        The table is ``table_location``, else the one of :meth:`scoped_to`;
        with neither, every credential travels. Only the table's own keys
        travel otherwise: a process that ingests several tables does not hand
        every table's keys to every task. Unchanged when there are none, so
        nothing changes for a catalog that vends nothing.
        """
        location = table_location or getattr(self._scope, "table", None)
        known = self.snapshot() if location is None else self.relevant_to(location)
        return _WithCredentials(task, known) if known else task


@dataclass(frozen=True)
class _WithCredentials:
    """A picklable task that adopts its driver's credentials in the worker, then runs."""

    task: Callable[..., Any]
    credentials: tuple[S3Credential, ...] = field(repr=False)

    @property
    def __name__(self) -> str:  # how Spark's UI names the task
        return getattr(self.task, "__name__", type(self.task).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        VENDED.remember(self.credentials)
        return self.task(*args, **kwargs)


VENDED = CredentialStore()
"""This process's vended credentials: filled by catalog loads, read by :class:`table.io.FileIO`."""
