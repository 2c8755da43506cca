"""Table metadata already read, by the location of its file: a metadata file never changes once written.

A catalog that stores only a pointer (Floe's SQL catalog) reads and parses the
table's metadata file on every load. Many tables loaded again and again (a
shared query prepares each table it lands, every interval) would parse the
same file each time; with this cache a load whose pointer has not moved costs
the pointer's row only. The location is the key, so a stale entry can never be
returned for a table that moved on: its pointer names another file.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from commit.catalog.base import LoadedTable


class MetadataCache:
    """The ``capacity`` most recently used :class:`LoadedTable` s, by metadata location. Thread-safe."""

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, LoadedTable] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str) -> LoadedTable | None:
        with self._lock:
            loaded = self._entries.get(location)
            if loaded is not None:
                self._entries.move_to_end(location)
            return loaded

    def put(self, loaded: LoadedTable) -> None:
        with self._lock:
            self._entries[loaded.metadata_location] = loaded
            self._entries.move_to_end(loaded.metadata_location)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
