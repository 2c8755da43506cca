"""Where a table's files go: its data and metadata locations.

Data files go to ``write.data.path``, else ``<table location>/data``;
metadata files, manifest lists and manifests to ``write.metadata.path``, else
``<table location>/metadata`` (Iceberg Java's ``LocationProvider`` defaults).
Every location is returned without a trailing slash, so a caller joins a
name with exactly one ``/``.

A table's files may live outside its location when these properties point
elsewhere: :func:`table_roots` gives every directory a table writes under,
for the one place that lists storage (orphan cleanup).
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


def table_roots(metadata: TableMetadata) -> list[str]:
    """The table location, plus the data and metadata locations that are not under it."""
    root = _under_table(metadata.location)
    roots = [root]
    for configured in (props.DATA_PATH.read(metadata.properties), props.METADATA_PATH.read(metadata.properties)):
        if configured and not _is_under(to_fs_path(configured), to_fs_path(root)):
            roots.append(configured)
    return roots


def _is_under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")
