"""A table's health as compaction sees it: small files and delete files per partition.

Pure: computed from the table's scan tasks, exported as gauges by
:class:`compaction.metrics.CompactionMetrics` and used to decide whether a
table needs a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from table import properties
from table.manifest import DataFileContent
from table.metadata import TableMetadata
from table.tasks import FileScanTask


@dataclass(frozen=True)
class TableHealth:
    """File counts and sizes of a snapshot, as the table-health gauges show them."""

    data_files: int
    delete_files: int
    small_files: int
    avg_file_size_bytes: float
    equality_delete_files: int
    deletion_vectors: int = 0  # v3: live DVs (each counted as a delete file too)
    deleted_by_vectors: int = 0  # rows the live DVs delete


def table_health(tasks: Iterable[FileScanTask], min_file_size: int) -> TableHealth:
    """Health of the snapshot the ``tasks`` were planned from.

    Delete files are counted once however many data files they apply to;
    a delete file that applies to no live data file is not seen here.
    "Small" uses the compactor's own threshold (``min-file-size-bytes``), so
    the gauge counts the files a run would pick up for their size. Equality
    deletes are counted apart because pyiceberg and DuckDB cannot read a
    snapshot that has any: under the position strategy they are leftovers
    that compaction must remove (docs/key-index-design.md).
    """
    data_files = small = total_bytes = 0
    delete_paths: set[str] = set()
    equality_paths: set[str] = set()
    vectors: dict[str, int] = {}  # DV (Puffin file and offset) -> its cardinality
    for task in tasks:
        size = task.data_file.file_size_in_bytes
        data_files += 1
        total_bytes += size
        small += size < min_file_size
        delete_paths.update(d.location_key for d in task.delete_files)
        vectors.update((d.location_key, d.record_count) for d in task.delete_files if d.is_deletion_vector)
        equality_paths.update(d.file_path for d in task.delete_files if d.content == DataFileContent.EQUALITY_DELETES)
    average = total_bytes / data_files if data_files else 0.0
    return TableHealth(
        data_files, len(delete_paths), small, average, len(equality_paths), len(vectors), sum(vectors.values())
    )


def uses_position_deletes(metadata: TableMetadata) -> bool:
    """Whether upserts into the table delete by position (``floe.upsert.delete-strategy``).

    A malformed value reads as not ``position``: ingest refuses such a table
    at start (and says why), and a gauge must not fail a compaction run over
    a property the compactor does not use.
    """
    try:
        return properties.UPSERT_DELETE_STRATEGY.read(metadata.properties) == "position"
    except properties.PropertyError:
        return False
