"""The one file-IO layer of Floe, over ``pyarrow.fs``.

Iceberg needs only in-place writes, seekable reads and deletes (spec: "File
System Operations"), so that is all this layer offers to correctness-relevant
code: it never renames and never lists a directory to decide what a table
contains. That keeps every caller correct on object stores (S3, GCS, ADLS)
as well as on local disk.

Locations are kept exactly as the caller gave them, because they are written
into metadata that other engines (Iceberg Java) read back. Only
:func:`to_fs_path` turns a location into the path the pyarrow file system
wants.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from table.errors import NotFoundError, TableError
from table.object_store import ObjectStoreSettingError, S3Settings
from table.storage_credentials import NO_CREDENTIALS, CredentialSource, StorageCredentials

_LOCAL_SCHEMES = frozenset({"", "file"})
# Schemes served by one pyarrow file system; the first is the one pyarrow parses.
_REMOTE_SCHEME_FAMILIES = (
    ("s3", "s3a", "s3n"),
    ("gs", "gcs"),
    ("abfs", "abfss"),
)


class FileIOError(TableError):
    """A file operation failed; names the location and the operation."""

    def __init__(self, path: str, operation: str, reason: str) -> None:
        self.path = path
        self.operation = operation
        self.reason = reason
        super().__init__(f"cannot {operation} {path}: {reason}")


class MissingFileError(FileIOError, NotFoundError):
    """The file that an operation needs does not exist."""


@dataclass(frozen=True)
class FileEntry:
    """One file found by :meth:`FileIO.list_prefix`."""

    location: str
    size: int
    mtime_ms: int | None


def _split_location(location: str) -> tuple[str, str]:
    """Split ``location`` into (head, fs_path) with ``head + fs_path == location``.

    ``/x`` -> ("", "/x"); ``file:/x`` -> ("file:", "/x"); ``file:///x`` ->
    ("file://", "/x"); ``s3://bucket/key`` -> ("s3://", "bucket/key").
    """
    if location.startswith("/"):
        return "", location
    scheme, sep, rest = location.partition(":")
    if not sep or not scheme.isascii() or not scheme.isalnum():
        raise FileIOError(location, "resolve", "not an absolute path or URI")
    if scheme.lower() == "file":
        return _split_file_uri(location, rest)
    if not rest.startswith("//") or len(rest) <= 2:
        raise FileIOError(location, "resolve", f"{scheme}: URI has no authority")
    return location[: len(scheme) + 3], rest[2:]


def _split_file_uri(location: str, rest: str) -> tuple[str, str]:
    """Split a ``file:`` URI; only the local host is allowed as authority."""
    if rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        if authority not in ("", "localhost") or not slash:
            raise FileIOError(location, "resolve", "file: URI must name a local absolute path")
        head_len = len(location) - len(path) - 1
        return location[:head_len], "/" + path
    if not rest.startswith("/"):
        raise FileIOError(location, "resolve", "file: URI must name an absolute path")
    return location[: len(location) - len(rest)], rest


def to_fs_path(location: str) -> str:
    """The path that the pyarrow file system serving ``location`` expects."""
    return _split_location(location)[1]


def _scheme(location: str) -> str:
    """The lower-case URI scheme of ``location``; "" for a plain path."""
    head = _split_location(location)[0]
    return head.partition(":")[0].lower()


def _scheme_family(scheme: str) -> tuple[str, ...]:
    """All schemes served by the same file system as ``scheme``."""
    if scheme in _LOCAL_SCHEMES:
        return tuple(_LOCAL_SCHEMES)
    for family in _REMOTE_SCHEME_FAMILIES:
        if scheme in family:
            return family
    return (scheme,)


@contextmanager
def _wrapped(location: str, operation: str) -> Iterator[None]:
    """Turn pyarrow's OSError into a typed error naming location and operation."""
    try:
        yield
    except FileNotFoundError as e:
        raise MissingFileError(location, operation, "file does not exist") from e
    except OSError as e:
        raise FileIOError(location, operation, str(e)) from e


class FileIO:
    """Reads, writes and deletes files under one kind of location.

    Build it with :meth:`for_location`. Every method takes a location in the
    form that is stored in table metadata (``/x``, ``file:/x``,
    ``file:///x``, ``s3://bucket/key``, ...). A loaded table carries its own
    (``LoadedTable.io``), with the storage credentials its catalog vended for
    it; pickled into a Spark task, it travels with the credentials it holds
    then, never with a way to load new ones.
    """

    def __init__(
        self,
        fs: pafs.FileSystem,
        schemes: Iterable[str],
        *,
        per_location: bool = False,
        root: str = "",
        credentials: CredentialSource = NO_CREDENTIALS,
    ) -> None:
        self._fs = fs
        self._schemes = frozenset(schemes)
        self._per_location = per_location
        self._root = root
        self._credentials = credentials

    def _filesystem(self, location: str) -> pafs.FileSystem:
        """The file system for one location: on S3 chosen per file, for the keys vended for that file's prefix.

        Per file, because one FileIO serves every location of its scheme (a
        table, its key index beside it), and per call, so a FileIO kept for a
        long run uses the newest keys the catalog vended.
        """
        return _s3_filesystem(location, self._credentials) if self._per_location else self._fs

    @classmethod
    def for_location(cls, location: str, credentials: CredentialSource = NO_CREDENTIALS) -> FileIO:
        """A FileIO serving ``location`` and every location of the same scheme, with ``credentials`` (S3)."""
        scheme = _scheme(location)
        family = _scheme_family(scheme)
        if scheme in _LOCAL_SCHEMES:
            return cls(pafs.LocalFileSystem(), family, root=location)
        uri = family[0] + location[len(scheme) :]
        s3 = family[0] == "s3"
        fs = _remote_fs(location, uri, credentials)
        return cls(fs, family, per_location=s3, root=location, credentials=credentials)

    @property
    def credentials(self) -> StorageCredentials:
        """The vended credentials this FileIO uses now (none for a catalog that vends nothing)."""
        return self._credentials.current()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled for a Spark task: rebuilt there from its root and the credentials it holds now."""
        return (FileIO.for_location, (self._root, self._credentials.current()))

    @property
    def is_local(self) -> bool:
        """Whether this FileIO serves local disk, where directories must be made."""
        return isinstance(self._fs, pafs.LocalFileSystem)

    def _path(self, location: str) -> str:
        """The fs path of ``location``, checking that this FileIO serves it."""
        head, path = _split_location(location)
        scheme = head.partition(":")[0].lower()
        if scheme not in self._schemes:
            raise FileIOError(location, "resolve", f"scheme {scheme or 'file'!r} is not served by this FileIO")
        return path

    def open_input(self, location: str) -> pa.NativeFile:
        """A seekable file for reading (usable by pyarrow.parquet and fastavro).

        Errors raised later while reading the returned file are pyarrow's own
        OSError; callers that parse files wrap them with the file's name.
        """
        path = self._path(location)
        with _wrapped(location, "open for reading"):
            return self._filesystem(location).open_input_file(path)

    def open_output(self, location: str) -> pa.NativeFile:
        """A new file for writing, replacing any file at ``location``.

        On local disk missing parent directories are created; object stores
        have no directories.
        """
        path = self._path(location)
        with _wrapped(location, "open for writing"):
            if self.is_local:
                parent = path.rsplit("/", 1)[0] or "/"
                self._fs.create_dir(parent, recursive=True)
            return self._filesystem(location).open_output_stream(path)

    def read_bytes(self, location: str) -> bytes:
        """The whole content of a file."""
        with _wrapped(location, "read"), self.open_input(location) as f:
            return f.read()

    def write_bytes(self, location: str, data: bytes) -> None:
        """Write ``data`` as the whole content of a new file.

        Closing is inside the error wrapper: object stores upload on close.
        """
        with _wrapped(location, "write"), self.open_output(location) as f:
            f.write(data)

    def delete(self, location: str) -> None:
        """Delete a file; a missing file is not an error, so cleanup is idempotent."""
        path = self._path(location)
        try:
            with _wrapped(location, "delete"):
                self._filesystem(location).delete_file(path)
        except MissingFileError:
            return

    def delete_many(self, locations: Iterable[str]) -> None:
        """Delete every file, trying all of them before reporting any failure."""
        failures: list[FileIOError] = []
        for location in locations:
            try:
                self.delete(location)
            except FileIOError as e:
                failures.append(e)
        if len(failures) == 1:
            raise failures[0]
        if failures:
            names = ", ".join(e.path for e in failures)
            raise FileIOError(names, "delete", f"{len(failures)} deletes failed") from failures[0]

    def exists(self, location: str) -> bool:
        """Whether a file (not a directory) exists at ``location``."""
        return self._info(location, "check existence of").type == pafs.FileType.File

    def size(self, location: str) -> int:
        """The length of a file in bytes."""
        info = self._info(location, "get size of")
        if info.type != pafs.FileType.File:
            raise MissingFileError(location, "get size of", "file does not exist")
        return int(info.size)

    def list_prefix(self, prefix: str) -> Iterator[FileEntry]:
        """Every file below the directory-like ``prefix``, recursively.

        Only for orphan-file maintenance: listings are not used to decide what
        a table contains, since object-store listings need not be consistent
        with recent writes. Locations come back in the same form as ``prefix``.
        """
        path = self._path(prefix)
        head = prefix[: len(prefix) - len(path)]
        selector = pafs.FileSelector(path.rstrip("/") or "/", recursive=True, allow_not_found=True)
        with _wrapped(prefix, "list"):
            infos = self._filesystem(prefix).get_file_info(selector)
        for info in infos:
            if info.type == pafs.FileType.File:
                yield FileEntry(head + info.path, int(info.size), _mtime_ms(info))

    def _info(self, location: str, operation: str) -> pafs.FileInfo:
        path = self._path(location)
        with _wrapped(location, operation):
            return self._filesystem(location).get_file_info(path)


@contextmanager
def removed_on_failure(io: FileIO, path: str) -> Iterator[None]:
    """Delete a file that a failure left half-written, then let the error go on.

    Used around writes of files no snapshot references yet, so a failed write
    leaves no orphan behind.
    """
    try:
        yield
    except BaseException as error:
        try:
            io.delete(path)
        except FileIOError as cleanup:
            error.add_note(f"also failed to delete the partial file: {cleanup}")
        raise


def _remote_fs(location: str, uri: str, credentials: CredentialSource) -> pafs.FileSystem:
    """pyarrow's file system for a remote URI, with its errors typed.

    S3 is configured from the environment (:mod:`table.object_store`), so a
    driver and its executors on other hosts reach the same store the same way;
    the keys are those a catalog vended for ``location``, if it did.
    """
    if uri.startswith("s3://"):
        return _s3_filesystem(location, credentials)
    with _wrapped(location, "open file system for"):
        try:
            return pafs.FileSystem.from_uri(uri)[0]
        except (ValueError, NotImplementedError) as e:
            raise FileIOError(location, "open file system for", str(e)) from e


def _s3_filesystem(location: str, credentials: CredentialSource) -> pafs.FileSystem:
    """The S3 file system for ``location``: this process's settings, with the keys vended for it if any."""
    with _wrapped(location, "open file system for"):
        try:
            return _s3_fs(_s3_settings(location, credentials))
        except (ValueError, ObjectStoreSettingError) as e:
            raise FileIOError(location, "open file system for", str(e)) from e


def _s3_settings(location: str, credentials: CredentialSource) -> S3Settings:
    settings = S3Settings.from_environment(os.environ)
    vended = credentials.for_location(location)
    if vended is None:
        return settings
    return settings.with_keys(vended.access_key_id, vended.secret_access_key, vended.session_token)


@lru_cache(maxsize=32)
def _s3_fs(settings: S3Settings) -> pafs.FileSystem:
    """One S3 client per distinct setting (vended keys included): each holds a connection pool worth reusing."""
    return pafs.S3FileSystem(**settings.pyarrow_options())


def _mtime_ms(info: pafs.FileInfo) -> int | None:
    ns = info.mtime_ns
    return None if ns is None else ns // 1_000_000
