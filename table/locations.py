"""Where a table's files go: its data and metadata locations.

Data files go to ``write.data.path``, else ``<table location>/data``;
metadata files, manifest lists and manifests to ``write.metadata.path``, else
``<table location>/metadata`` (Iceberg Java's ``LocationProvider`` defaults).
Every location is returned without a trailing slash, so a caller joins a
name with exactly one ``/``.

Floe's key index of an upsert table lives beside the table, at
``<table location>.floe-key-index`` (:func:`key_index_beside`): outside the
table location, so that other engines' orphan-file removal never takes it.

A table's files may live outside its location when these properties point
elsewhere: :func:`locations_outside_table` names those directories. They may
be shared with other tables, so orphan cleanup never lists them (as Iceberg
Java's ``DeleteOrphanFiles`` lists only the table location by default).
"""

from __future__ import annotations

from table import properties as props
from table.io import to_fs_path
from table.metadata import TableMetadata


def _under_table(location: str) -> str:
    return location.rstrip("/")


def data_location(metadata: TableMetadata) -> str:
    """The directory data and delete files are written under (partition paths below it)."""
    return props.DATA_PATH.read(metadata.properties) or f"{_under_table(metadata.location)}/data"


def metadata_location(metadata: TableMetadata) -> str:
    """The directory of metadata files, manifest lists and manifests."""
    return props.METADATA_PATH.read(metadata.properties) or f"{_under_table(metadata.location)}/metadata"


def locations_outside_table(metadata: TableMetadata) -> list[str]:
    """The data and metadata locations that are not under the table location."""
    root = to_fs_path(_under_table(metadata.location))
    configured = (props.DATA_PATH.read(metadata.properties), props.METADATA_PATH.read(metadata.properties))
    return [path for path in configured if path and not _is_under(to_fs_path(path), root)]


KEY_INDEX_SUFFIX = ".floe-key-index"


def key_index_beside(table_location: str) -> str:
    """Where a table's key index goes unless its metadata names another place."""
    return _under_table(table_location) + KEY_INDEX_SUFFIX


def table_file_prefixes(metadata: TableMetadata) -> tuple[str, ...]:
    """Every directory the table's files go under, each ending in ``/``: the table location, the key
    index beside it, and data or metadata paths set elsewhere (what a catalog's table-wide keys cover)."""
    directories = (metadata.location, key_index_beside(metadata.location), *locations_outside_table(metadata))
    return tuple(dict.fromkeys(d.rstrip("/") + "/" for d in directories))


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
