"""Where a table's files go: its data and metadata locations.

Data files go to ``write.data.path``, else ``<table location>/data``;
metadata files, manifest lists and manifests to ``write.metadata.path``, else
``<table location>/metadata`` (Iceberg Java's ``LocationProvider`` defaults).
Every location is returned without a trailing slash, so a caller joins a
name with exactly one ``/``.

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


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
