"""Which catalog a URI names: Floe's SQL catalog (``sqlite://``, ``postgresql://``) or a REST catalog (``http(s)://``).

Both offer the same verbs to the commit path (load, create, register, list,
drop, leases); they differ in how a commit lands (a swap of Floe's metadata
file, or a change the REST server applies), which
:class:`commit.metadata_committer.MetadataCommitter` handles.
"""

from __future__ import annotations

from typing import TypeAlias

from commit.catalog import Catalog
from commit.rest.catalog import RestCatalog
from commit.rest.options import RestOptions

AnyCatalog: TypeAlias = Catalog | RestCatalog
REST_SCHEMES = ("http://", "https://")


def is_rest_uri(uri: str) -> bool:
    return uri.lower().startswith(REST_SCHEMES)


def open_catalog(
    uri: str, warehouse: str, name: str = "floe", *, create: bool = True, rest: RestOptions | None = None
) -> AnyCatalog:
    """The catalog at ``uri``; ``create`` makes a missing SQL catalog's tables (REST has none to make)."""
    if is_rest_uri(uri):
        return RestCatalog(uri, warehouse, name, options=rest)
    return Catalog(uri, warehouse, name, create=create)
