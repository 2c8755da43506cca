"""Floe's catalogs: its own SQL catalog (``sqlite://``, ``postgresql://``) and REST catalogs (``http(s)://``).

:class:`~commit.catalog.base.Catalog` is what both offer (load, create,
register, list, drop, leases, and the commit point); :func:`open_catalog`
opens the one a URI names.
"""

from __future__ import annotations

from commit.catalog.base import Catalog, LoadedTable, TablePointer
from commit.catalog.rest.catalog import RestCatalog
from commit.catalog.rest.options import RestOptions
from commit.catalog.sql.catalog import SqlCatalog

__all__ = [
    "Catalog",
    "LoadedTable",
    "RestCatalog",
    "RestOptions",
    "SqlCatalog",
    "TablePointer",
    "is_rest_uri",
    "open_catalog",
]

REST_SCHEMES = ("http://", "https://")


def is_rest_uri(uri: str) -> bool:
    return uri.lower().startswith(REST_SCHEMES)


def open_catalog(
    uri: str, warehouse: str, name: str = "floe", *, create: bool = True, rest: RestOptions | None = None
) -> Catalog:
    """The catalog at ``uri``; ``create`` makes a missing SQL catalog's tables (REST has none to make)."""
    if is_rest_uri(uri):
        return RestCatalog(uri, warehouse, name, options=rest)
    return SqlCatalog(uri, warehouse, name, create=create)
