"""Spark's offset log, read from the query's checkpoint: where each micro-batch starts and ends.

Spark writes ``offsets/<batch id>`` before the batch runs. Its end offsets let
a batch record the offsets it covers even where its last records are
transaction markers, and its start (the previous entry, or what Floe's source
pinned for batch 0) gives the batch's size before it is read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ingest.driver.offset_accounting import PINNED_START, PerPartition, parse_offset_log_entry, parse_pinned_offsets
from ingest.job import IngestJob
from table.io import FileIO, FileIOError

log = logging.getLogger("floe.ingest")


class OffsetLog:
    """The offset log of ``job``'s checkpoint, for the table ``table`` (named in its warnings)."""

    KEPT = 4
    """Entries kept once read (an entry never changes once written): a shared query's tables all read
    the same batch's entries."""

    def __init__(self, job: IngestJob, table: str) -> None:
        self._job = job
        self._table = table
        self._warned = False
        self._kept: dict[str, PerPartition] = {}
        self._lock = threading.Lock()

    def planned_ends(self, batch_id: int) -> PerPartition:
        """The batch's end offsets in Spark's offset log (written before the batch runs).

        Nothing where the entry cannot be read, warned once: the offsets seen
        then stand, as before Floe read the log, and a transactional topic's
        trailing markers show as lag. That is a checkpoint on a store Floe's
        file IO does not serve (``hdfs://``, S3A configured only in Hadoop's
        settings), or a batch processed outside a streaming query.
        """
        try:
            return self._read(f"offsets/{batch_id}", parse_offset_log_entry)
        except (FileIOError, ValueError) as error:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot read the batch's end offsets from Spark's offset log: %s; offsets are recorded "
                    "up to the last record seen, so transaction markers show as lag",
                    error,
                    extra={"table": self._table, "batch_id": batch_id},
                )
            return {}

    def planned_starts(self, batch_id: int) -> PerPartition:
        """Where the batch starts: the previous batch's end in Spark's offset log, or, for batch 0 of Floe's
        source, the starting offsets it pinned in the checkpoint. Empty where not known (batch 0 of Spark's
        source; an entry Floe's file IO cannot read): the batch's size is then unknown."""
        try:
            if batch_id > 0:
                return self._read(f"offsets/{batch_id - 1}", parse_offset_log_entry)
            if self._job.source.reader == "python":
                return self._read(PINNED_START, parse_pinned_offsets)
        except (FileIOError, ValueError):
            pass  # the size is unknown: the exchange, which spills, writes the batch
        return {}

    def _read(self, name: str, parse: Callable[[str, str], PerPartition]) -> PerPartition:
        """The checkpoint's file ``name``, parsed (``parse(text, path)``); FileIOError or ValueError."""
        with self._lock:
            kept = self._kept.get(name)
        if kept is not None:
            return {t: dict(parts) for t, parts in kept.items()}
        path = f"{self._job.checkpoint_location.rstrip('/')}/{name}"
        entry = parse(FileIO.for_location(path).read_bytes(path).decode(), path)
        with self._lock:
            self._kept[name] = entry
            while len(self._kept) > self.KEPT:
                del self._kept[next(iter(self._kept))]
        return {t: dict(parts) for t, parts in entry.items()}
