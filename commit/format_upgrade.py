"""Upgrading a table's format version (spec Appendix E), as one metadata commit.

Only the version and, for v3, ``next-row-id = 0`` change: existing snapshots,
manifests and delete files stay valid, and the first snapshot committed after
the upgrade gives the existing data files their row ids. Position delete files
stay valid in a v3 table until a deletion vector replaces them.
"""

from __future__ import annotations

import logging

from commit.catalog.base import Catalog, LoadedTable
from commit.identifiers import TableIdentifierLike
from commit.metadata_committer import commit_metadata_change
from table.metadata import TableMetadata

log = logging.getLogger("floe.commit")


def upgrade_format_version(catalog: Catalog, identifier: TableIdentifierLike, version: int) -> TableMetadata:
    """Commit the upgrade (nothing when the table is already at ``version``); the table's metadata.

    A downgrade or an unsupported version raises ValidationError before anything is written.
    """

    def build(loaded: LoadedTable, _attempt: int) -> TableMetadata | None:
        upgraded = loaded.metadata.upgrade_format_version(version)
        return None if upgraded is loaded.metadata else upgraded

    def landed(metadata: TableMetadata) -> bool:
        return metadata.format_version >= version

    committed = commit_metadata_change(catalog, identifier, build, landed, what=f"format-version {version} upgrade")
    if committed is not None:
        log.info("upgraded table %s to format version %d", identifier, version, extra={"table": str(identifier)})
        return committed.metadata
    return catalog.load_table(identifier).metadata
