"""What a task hands the driver: one protocol for every write path.

Every write task of a batch returns rows of :data:`OUTPUT_SCHEMA`
(``kind``, ``payload``, ``records``, ``bytes``, ``bucket``), and the driver
reads them back here. One row per kind of result:

============================  ==========================================  =========  ======
kind                          payload                                     records    bucket
============================  ==========================================  =========  ======
``data``                      a pickled ``DataFile``                      rows       -
``equality_deletes``          a pickled ``DataFile``                      rows       -
``position_deletes``          a pickled ``DataFile``                      rows       -
``deleted_keys``              empty                                       keys       -
``stats``                     a decode task's aggregate rows, JSON        -          -
``referenced_data_files``     the files its position deletes point at,   files      -
                              JSON
``dv_positions``              deleted (file, pos, ordinal), Arrow IPC     rows       -
``index_entries``             a bucket's key-index entries, Arrow IPC     rows       yes
``index_segment``             a pickled (``BucketChange``, seconds)       rows       yes
============================  ==========================================  =========  ======

The last four belong to the key-index path (:mod:`ingest.tasks.indexed_writer`,
:mod:`ingest.driver.key_index_steps`). Before the write, the decode tasks'
stats travel inside the decoded frame as *side rows* (a non-null
``_floe_stats`` column, :mod:`ingest.tasks.frame`): :func:`take_stats` parts
them from the data rows, and :func:`side_row_columns` is what a key reduction
partitions by so that they pass it intact. No other module names the column.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.frame import STATS_COLUMN, stats_rows
from table.manifest import DataFile, DataFileContent

DATA = "data"
EQUALITY_DELETES = "equality_deletes"
POSITION_DELETES = "position_deletes"
DELETED_KEYS = "deleted_keys"
STATS = "stats"
REFERENCED = "referenced_data_files"
DV_POSITIONS = "dv_positions"
INDEX_ENTRIES = "index_entries"
INDEX_SEGMENT = "index_segment"
KINDS = (
    DATA,
    EQUALITY_DELETES,
    POSITION_DELETES,
    DELETED_KEYS,
    STATS,
    REFERENCED,
    DV_POSITIONS,
    INDEX_ENTRIES,
    INDEX_SEGMENT,
)
DELETION_VECTORS = "deletion_vectors"
"""Not a kind: the files-written metric's label for the Puffin files of a v3 batch's DVs."""

OUTPUT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("payload", pa.binary()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
        ("bucket", pa.int32()),
    ]
)
OUTPUT_DDL = "kind string, payload binary, records long, bytes long, bucket int"
""":data:`OUTPUT_SCHEMA` as Spark's ``mapInArrow`` and Python data sources take it."""


def side_row_columns(columns: Sequence[str]) -> list[str]:
    """The frame columns that a reduction by key must also partition by, so side rows pass it intact:
    null for every data row, unique for each decode task's stats row."""
    return [STATS_COLUMN] if STATS_COLUMN in columns else []


def split_side_rows(batch: pa.RecordBatch) -> tuple[pa.RecordBatch | None, pa.RecordBatch]:
    """(the side rows of a frame batch, or None when it has none; its data rows)."""
    index = batch.schema.get_field_index(STATS_COLUMN)
    if index < 0 or batch.column(index).null_count == batch.num_rows:
        return None, batch
    is_side = batch.column(index).is_valid()
    return batch.filter(is_side), batch.filter(pc.invert(is_side))


def take_stats(batch: pa.RecordBatch, payloads: list[bytes]) -> pa.RecordBatch:
    """``batch`` without its side rows, whose stats payloads are appended to ``payloads``."""
    side, rows = split_side_rows(batch)
    if side is not None:
        payloads.extend(side.column(STATS_COLUMN).to_pylist())
    return rows


def written_batch(data: Sequence[DataFile], deletes: Sequence[DataFile], deleted_keys: int) -> pa.RecordBatch:
    files = [(DATA, f) for f in data] + [(_delete_kind(f), f) for f in deletes]
    kinds = [k for k, _ in files] + [DELETED_KEYS]
    payloads = [pickle.dumps(f) for _, f in files] + [b""]
    records = [f.record_count for _, f in files] + [deleted_keys]
    sizes = [f.file_size_in_bytes for _, f in files] + [0]
    return written_rows(kinds, payloads, records, sizes)


def _delete_kind(delete_file: DataFile) -> str:
    return POSITION_DELETES if delete_file.content == DataFileContent.POSITION_DELETES else EQUALITY_DELETES


def stats_batch(payloads: Sequence[bytes]) -> pa.RecordBatch:
    n = len(payloads)
    return written_rows([STATS] * n, payloads, [0] * n, [0] * n)


def written_rows(
    kinds: Sequence[str],
    payloads: Sequence[bytes],
    records: Sequence[int],
    sizes: Sequence[int],
    buckets: Sequence[int | None] | None = None,
) -> pa.RecordBatch:
    """Rows of :data:`OUTPUT_SCHEMA`."""
    n = len(kinds)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(kinds, pa.string()),
            pa.array(payloads, pa.binary()),
            pa.array(records, pa.int64()),
            pa.array(sizes, pa.int64()),
            pa.array(buckets if buckets is not None else [None] * n, pa.int32()),
        ],
        schema=OUTPUT_SCHEMA,
    )


class BatchFiles(NamedTuple):
    """What the write tasks of one batch produced, gathered on the driver."""

    data_files: list[DataFile]
    delete_files: list[DataFile]
    deleted_keys: int
    replaced_deletes: tuple[DataFile, ...] = ()  # v3: the DVs (or position deletes) the new DVs replace

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in (*self.data_files, *self.delete_files)]

    def records_committed(self) -> int:
        """Data rows plus deleted keys: what the records-committed metric counts."""
        return self.records(DataFileContent.DATA) + self.deleted_keys

    def records(self, content: DataFileContent) -> int:
        files = self.data_files if content == DataFileContent.DATA else self.delete_files
        return sum(f.record_count for f in files)

    def bytes(self, content: DataFileContent) -> int:
        files = self.data_files if content == DataFileContent.DATA else self.delete_files
        return sum(f.file_size_in_bytes for f in files)


def read_written(rows: pa.Table) -> BatchFiles:
    """The files and counts in the write tasks' output (:data:`OUTPUT_SCHEMA` rows; other kinds ignored)."""
    data: list[DataFile] = []
    deletes: list[DataFile] = []
    deleted = 0
    for kind, payload, records in zip(
        rows.column("kind").to_pylist(), rows.column("payload").to_pylist(), rows.column("records").to_pylist()
    ):
        if kind == DELETED_KEYS:
            deleted += records
        elif kind == DATA:
            data.append(pickle.loads(payload))
        elif kind in (EQUALITY_DELETES, POSITION_DELETES):
            deletes.append(pickle.loads(payload))
    return BatchFiles(data, deletes, deleted)


def read_stats(rows: pa.Table) -> list[dict[str, Any]]:
    """The decode tasks' aggregate rows in the write output, for :func:`ingest.driver.offset_accounting.batch_stats`."""
    payloads = [p for k, p in zip(rows.column("kind").to_pylist(), rows.column("payload").to_pylist()) if k == STATS]
    return stats_rows(payloads)


def file_counts(files: BatchFiles) -> Mapping[str, tuple[int, int]]:
    """content label -> (files, bytes), for the files-written metrics.

    A v3 batch's deletion vectors share Puffin files, and each DV's entry carries its Puffin file's whole size:
    they count once per Puffin file, under their own label, never as position delete files."""
    counts = {DATA: (len(files.data_files), files.bytes(DataFileContent.DATA))}
    for kind, content in (
        (EQUALITY_DELETES, DataFileContent.EQUALITY_DELETES),
        (POSITION_DELETES, DataFileContent.POSITION_DELETES),
    ):
        of_kind = [f for f in files.delete_files if f.content == content and not f.is_deletion_vector]
        counts[kind] = (len(of_kind), sum(f.file_size_in_bytes for f in of_kind))
    puffins = {f.file_path: f.file_size_in_bytes for f in files.delete_files if f.is_deletion_vector}
    counts[DELETION_VECTORS] = (len(puffins), sum(puffins.values()))
    return counts


def ipc_payload(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream: how a task hands rows to the driver in its output."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_table(payload: bytes) -> pa.Table:
    return pa.ipc.open_stream(payload).read_all()


def payloads_of(rows: pa.Table | pa.RecordBatch, kind: str) -> list[bytes]:
    """The payloads of the ``kind`` rows of an output."""
    return [p for k, p in zip(rows.column("kind").to_pylist(), rows.column("payload").to_pylist()) if k == kind]


def split_kind(batch: pa.RecordBatch, kind: str) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(the ``kind`` rows of ``batch``, the others)."""
    is_kind = pc.equal(batch.column("kind"), kind).fill_null(False)
    return batch.filter(is_kind), batch.filter(pc.invert(is_kind))
