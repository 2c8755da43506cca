"""The driver's steps of a batch that uses the key index (docs/key-index-design.md).

Before the batch's tasks run, :func:`plan_index` picks the index the batch
starts from (the table's, or one built from the table when there is none or
it is stale) and describes it to the tasks as an
:class:`~ingest.tasks.indexed_writer.IndexPlan`. After they ran, the driver
reads their output: the index segments they wrote (:func:`read_index_changes`),
the data files their deletes point at (:func:`read_referenced`), and on v3 the
deleted positions, from which it writes one deletion vector per data file
(:func:`write_batch_vectors`). After a small batch it writes the index
segments itself (:func:`write_index_segments_here`): one Spark stage fewer.
:func:`index_update` is the commit's index change. The task bodies are in
:mod:`ingest.tasks.indexed_writer`.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from commit.key_index.bucket_change import BucketChange
from commit.key_index.catch_up import CatchUpImpossible, check_catch_up, foreign_deletes
from commit.key_index.manifest import (
    IndexChange,
    IndexManifest,
    describes,
)
from commit.key_index.operation import KeyIndexUpdate
from commit.key_index.rebuild import build_index, live_files
from commit.key_index.segments import FILE, POS
from commit.key_index.store import current_manifest, index_location
from ingest.tasks.indexed_writer import IndexPlan, segment_rows, take_entries
from ingest.tasks.output import DV_POSITIONS, INDEX_SEGMENT, REFERENCED, ipc_table, payloads_of
from table import properties
from table.deletes.writers import DeletionVectorWriter
from table.io import FileIO
from table.manifest import DataFile
from table.metadata import MAIN_BRANCH, TableMetadata
from table.parquet.writer import FileNameFactory
from table.partitioning import partition_key

log = logging.getLogger("floe.ingest")


@dataclass(frozen=True)
class IndexStart:
    """The index a batch starts from, and what the driver wrote to it first (``prelude``): a whole
    new index built from the table (``rebuilt``), or tombstones for other writers' deletes."""

    plan: IndexPlan
    manifest: IndexManifest
    prelude: IndexChange | None = None
    rebuilt: bool = False
    rebuilt_from: int | None = None
    existing_deletes: Mapping[str, tuple[DataFile, ...]] = field(default_factory=dict)
    """v3: each live data file's DV or position deletes, which a new DV of the file merges (driver only)."""

    @property
    def paths(self) -> list[str]:
        return [] if self.prelude is None else self.prelude.paths


def plan_index(io: FileIO, metadata: TableMetadata, key_ids: Sequence[int], table: str) -> IndexStart:
    """The index this batch starts from: the table's, or one built now if it has none or it is stale.

    The index is keyed by the key's field ids in ascending order, whatever
    order the job lists its key fields in (as ``floe index rebuild`` does).
    """
    key_ids = tuple(sorted(key_ids))
    location = index_location(metadata)
    manifest = current_manifest(io, metadata)
    if manifest is not None and manifest.key_ids != tuple(key_ids):
        log.warning(
            "table %s: the key index is keyed by field ids %s, the job by %s",
            table,
            list(manifest.key_ids),
            list(key_ids),
            extra={"table": table},
        )
        manifest = None
    prelude, rebuilt, rebuilt_from = None, False, None
    if manifest is not None and describes(manifest, metadata):
        head = metadata.snapshot_for_ref(MAIN_BRANCH)
        try:
            check_catch_up(foreign_deletes(io, metadata, manifest.snapshot_id, head), key_ids)
        except CatchUpImpossible as impossible:
            log.warning("table %s: %s", table, impossible, extra={"table": table})
            manifest = None
    if manifest is None or not describes(manifest, metadata):
        reason = "it has none" if manifest is None else f"its index describes snapshot {manifest.snapshot_id}"
        level = logging.INFO if metadata.current_snapshot() is None else logging.WARNING
        log.log(level, "table %s: building the key index from the table (%s)", table, reason, extra={"table": table})
        built = build_index(io, metadata, key_ids, properties.KEY_INDEX_BUCKETS.read(metadata.properties), location)
        manifest, prelude, rebuilt, rebuilt_from = built.manifest, built.change, True, built.snapshot_id
    tasks = live_files(io, metadata)
    partitions: dict[tuple[int, Any], int] = {}
    files = []
    for task in tasks:
        data = task.data_file
        ordinal = partitions.setdefault(partition_key(data.spec_id, data.partition), len(partitions))
        files.append((data.file_path, ordinal))
    by_ordinal = {ordinal: key for key, ordinal in partitions.items()}
    specs = tuple((s.spec_id, json.dumps(s.to_json())) for s in metadata.partition_specs)
    plan = IndexPlan(
        manifest=json.dumps(manifest.to_json()),
        location=location,
        schema=json.dumps(metadata.schema().to_json()),
        key_ids=tuple(key_ids),
        io=io,
        live_files=tuple(files),
        partitions=tuple(_spec_and_partition(tasks, by_ordinal[o]) for o in range(len(by_ordinal))),
        specs=specs,
        max_deltas=properties.KEY_INDEX_MAX_DELTAS.read(metadata.properties),
        deletion_vectors=metadata.tracks_row_lineage,
    )
    existing = {t.data_file.file_path: tuple(t.position_deletes) for t in tasks if t.position_deletes}
    return IndexStart(plan, manifest, prelude, rebuilt, rebuilt_from, existing if plan.deletion_vectors else {})


def _spec_and_partition(tasks: Sequence[Any], key: tuple[int, Any]) -> tuple[int, tuple[Any, ...]]:
    for task in tasks:
        data = task.data_file
        if partition_key(data.spec_id, data.partition) == key:
            return data.spec_id, tuple(data.partition)
    raise AssertionError(f"no live file of partition {key}")


def index_update(start: IndexStart, changes: Sequence[BucketChange], table: str) -> KeyIndexUpdate:
    """The commit's index update: the rebuild (if any), then the batch's segments."""
    batch = IndexChange(tuple(c.segment for c in changes), tuple(p for c in changes for p in c.replaced))
    steps = (batch,) if start.prelude is None else (start.prelude, batch)
    return KeyIndexUpdate(
        steps,
        start.manifest.key_ids,
        start.manifest.buckets,
        start.plan.location,
        table,
        rebuilt=start.rebuilt,
        rebuilt_from=start.rebuilt_from,
    )


def read_referenced(rows: pa.Table) -> frozenset[str]:
    """The data files the batch's position deletes point at: the commit checks they are still live
    (a compaction that replaced one meanwhile would leave the key's row undeleted in its new file)."""
    found: set[str] = set()
    for payload in payloads_of(rows, REFERENCED):
        found.update(json.loads(payload))
    return frozenset(found)


def read_index_changes(rows: pa.Table) -> tuple[list[BucketChange], float]:
    """The ``index_segment`` rows of the batch's output, and the seconds spent writing them."""
    changes, seconds = [], 0.0
    for payload in payloads_of(rows, INDEX_SEGMENT):
        change, took = pickle.loads(payload)
        changes.append(change)
        seconds += took
    return changes, seconds


def write_batch_vectors(
    io: FileIO, start: IndexStart, rows: pa.Table, location: str
) -> tuple[list[DataFile], list[DataFile]]:
    """The batch's deletion vectors, one per data file it deletes from, each merged with the file's
    existing DV or position deletes: written as one Puffin file under ``location``; the DVs and
    the delete files they replace (the commit removes those).

    On the driver, so that each data file gets exactly one DV however many
    tasks deleted from it (an unpartitioned table's lookup tasks split by key,
    not by file).
    """
    parts = [ipc_table(p) for p in payloads_of(rows, DV_POSITIONS)]
    if not parts:
        return [], []
    deleted = pa.concat_tables(parts)
    writer = DeletionVectorWriter(io, location, FileNameFactory("driver"))
    paths = deleted.column("file_path").combine_chunks().dictionary_encode()
    which = paths.indices.to_numpy()
    positions = deleted.column("pos").combine_chunks().to_numpy()
    ordinals = deleted.column("ordinal").combine_chunks().to_numpy()
    order = np.argsort(which, kind="stable")
    names = paths.dictionary.to_pylist()
    try:
        for rows_of_file in np.split(order, np.flatnonzero(np.diff(which[order])) + 1):
            path = names[which[rows_of_file[0]]]
            spec_id, partition = start.plan.partitions[int(ordinals[rows_of_file[0]])]
            writer.merge_existing(path, start.existing_deletes.get(path, ()), spec_id, partition)
            writer.delete(path, positions[rows_of_file], spec_id, partition)
        return writer.close(), list(writer.replaced)
    except BaseException:
        writer.abort()
        raise


DRIVER_INDEX_THREADS = 4


def write_index_segments_here(rows: pa.Table, plan: IndexPlan) -> pa.Table:
    """The same, on the batch's whole write output in this process (the driver), a few buckets at a time:
    the executors wait meanwhile, and a bucket's merge and write run mostly in Arrow, outside the GIL
    (at most :data:`DRIVER_INDEX_THREADS`, as each holds a bucket's merge in memory)."""
    entries: dict[int, list[pa.Table]] = {}
    others = [take_entries(batch, entries) for batch in rows.to_batches()]
    segments = segment_rows(entries, plan, threads=min(DRIVER_INDEX_THREADS, os.cpu_count() or 1))
    return pa.Table.from_batches([*others, *([segments] if segments is not None else [])], schema=rows.schema)


def keys_in_two_tasks(rows: pa.Table) -> int:
    """Keys with more than one index entry in a batch's write output whose tasks each kept one change per
    key (the direct upsert): keys whose changes two or more tasks wrote. 0 when the output is right.

    Each kept change has exactly one entry (its written row, or a tombstone), and a key's bucket depends
    on the key alone, so the entries of one bucket are enough to see a key twice.
    """
    entries: dict[int, list[pa.Table]] = {}
    for batch in rows.to_batches():
        take_entries(batch, entries)
    repeated = 0
    for tables in entries.values():
        table = pa.concat_tables(tables)
        keys = [name for name in table.column_names if name not in (FILE, POS)]
        counts = table.group_by(keys, use_threads=False).aggregate([([], "count_all")]).column("count_all")
        repeated += pc.sum(pc.greater(counts, 1)).as_py() or 0
    return repeated
