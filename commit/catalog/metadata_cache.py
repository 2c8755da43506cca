"""Each table's metadata as last read or committed, kept while its pointer names the same file.

A catalog that stores only a pointer (Floe's SQL catalog) reads and parses the
table's metadata file on every load. Many tables loaded again and again (a
shared query prepares each table it lands, every interval) would parse the
same file each time; with this cache a load whose pointer has not moved costs
the pointer's row only. A metadata file never changes once written, and an
entry is used only for the very location the pointer names, so a table that
moved on is always read again. One entry per table, so that the cache holds
what the tables hold now, not their history.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from commit.catalog.base import LoadedTable


class MetadataCache:
    """The latest :class:`LoadedTable` of each of the ``capacity`` most recently used tables. Thread-safe."""

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, LoadedTable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, table: str, location: str) -> LoadedTable | None:
        """``table`` as read from ``location``, if that is the file kept for it."""
        with self._lock:
            loaded = self._entries.get(table)
            if loaded is None or loaded.metadata_location != location:
                return None
            self._entries.move_to_end(table)
            return loaded

    def put(self, table: str, loaded: LoadedTable) -> None:
        with self._lock:
            self._entries[table] = loaded
            self._entries.move_to_end(table)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
