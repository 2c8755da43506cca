"""Reads of a table whose files sit where the containers put them, run inside the host's reader process
(``IcebergOracle.call``), which sees the volume at the containers' path."""

from __future__ import annotations

from typing import Any

from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_batch


def committed_batches(spark: Any, catalog: str, warehouse: str, table: str) -> dict[str, Any]:
    """The table's metadata location, and each ingest batch it committed (compactions left out), in
    commit order: ``{"batch_id", "offsets": {"topic/partition": [start, end]}}``."""
    with SqlCatalog(catalog, warehouse) as opened:
        loaded = opened.load_table(table)
    batches = []
    for snapshot in sorted(loaded.metadata.snapshots, key=lambda s: s.sequence_number):
        batch = committed_batch(snapshot)
        if batch is not None:
            offsets = {f"{topic}/{partition}": [start, end] for topic, ranges in batch.offsets.items()
                       for partition, (start, end) in ranges.items()}
            batches.append({"batch_id": batch.batch_id, "offsets": offsets})
    return {"metadata_location": loaded.metadata_location, "batches": batches}
