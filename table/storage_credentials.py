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

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional

ACCESS_KEY_ID = "s3.access-key-id"
SECRET_ACCESS_KEY = "s3.secret-access-key"
SESSION_TOKEN = "s3.session-token"
EXPIRES_AT_MS = "s3.session-token-expires-at-ms"
_EQUIVALENT_SCHEMES = {"s3a": "s3", "s3n": "s3"}


@dataclass(frozen=True)
class S3Credential:
    """Keys for the S3 locations under ``prefix``; the secret parts are kept out of ``repr``."""

    prefix: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: Optional[str] = field(default=None, repr=False)
    expires_at_ms: Optional[int] = None

    def covers(self, location: str) -> bool:
        """Whether ``location`` starts with this credential's prefix (``s3a://`` and ``s3://`` alike).

        A plain string prefix, as Iceberg Java matches storage credentials: the
        table's credential also covers Floe's key index beside the table
        (``<table location>.floe-key-index/``), and a sibling table's longer
        prefix wins for its own files.
        """
        return _comparable(location).startswith(_comparable(self.prefix))


def vended_credentials(table_location: str, config: Optional[Mapping[str, Any]],
                       storage_credentials: Optional[Iterable[Mapping[str, Any]]]) -> list[S3Credential]:
    """The S3 credentials of one load answer: each ``storage-credentials`` entry, and ``config`` for the table.

    Entries without both key parts are skipped: they vend something else
    (GCS, ADLS) or nothing.
    """
    found = []
    for entry in storage_credentials or ():
        credential = _s3_credential(str(entry.get("prefix", "")), entry.get("config") or {})
        if credential is not None:
            found.append(credential)
    table_wide = _s3_credential(table_location, config or {})
    return found + ([table_wide] if table_wide is not None else [])


def _s3_credential(prefix: str, properties: Mapping[str, Any]) -> Optional[S3Credential]:
    key, secret = properties.get(ACCESS_KEY_ID), properties.get(SECRET_ACCESS_KEY)
    if not prefix or not key or not secret:
        return None
    expires = properties.get(EXPIRES_AT_MS)
    token = properties.get(SESSION_TOKEN)
    return S3Credential(prefix, str(key), str(secret), str(token) if token else None,
                        int(expires) if str(expires or "").isdigit() else None)


def _comparable(location: str) -> str:
    scheme, sep, rest = location.partition("://")
    return f"{_EQUIVALENT_SCHEMES.get(scheme.lower(), scheme.lower())}{sep}{rest}" if sep else location


class CredentialStore:
    """The vended credentials this process knows, by prefix; the newest for a prefix replaces the older."""

    def __init__(self) -> None:
        self._by_prefix: dict[str, S3Credential] = {}
        self._lock = threading.Lock()

    def remember(self, credentials: Iterable[S3Credential]) -> None:
        with self._lock:
            for credential in credentials:
                self._by_prefix[_comparable(credential.prefix)] = credential

    def for_location(self, location: str) -> Optional[S3Credential]:
        """The credential with the longest prefix covering ``location``, if any."""
        with self._lock:
            covering = [c for c in self._by_prefix.values() if c.covers(location)]
        return max(covering, key=lambda c: len(c.prefix), default=None)

    def snapshot(self) -> tuple[S3Credential, ...]:
        with self._lock:
            return tuple(self._by_prefix.values())

    def forget_all(self) -> None:
        with self._lock:
            self._by_prefix.clear()

    def carried(self, task: Callable[..., Any]) -> Callable[..., Any]:
        """``task``, carrying this process's credentials to the Spark worker that runs it.

        Unchanged when there are none, so nothing changes for a catalog that
        vends nothing.
        """
        known = self.snapshot()
        return _WithCredentials(task, known) if known else task


@dataclass(frozen=True)
class _WithCredentials:
    """A picklable task that adopts its driver's credentials in the worker, then runs."""

    task: Callable[..., Any]
    credentials: tuple[S3Credential, ...] = field(repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        VENDED.remember(self.credentials)
        return self.task(*args, **kwargs)


VENDED = CredentialStore()
"""This process's vended credentials: filled by catalog loads, read by :class:`table.io.FileIO`."""
