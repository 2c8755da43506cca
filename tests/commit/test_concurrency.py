"""Four processes commit row deltas to one table at the same time, on SQLite and PostgreSQL.

Each process is a streaming writer (its own writer id and Kafka partition)
committing 50 batches through ``commit_batch``. Batch ``n`` of writer ``w``
adds a small data file with four new keys and an upsert of one key of batch
``n - 1``, and an equality delete of two keys of batch ``n - 1`` (its own
keys only): the upserted key must come back exactly once with its new value,
the other deleted key must stay deleted. All 200 commits must land in one
linear history with sequence numbers 1..200, totals that add up, and the
rows all readable with Floe's reader. Every writer's first commit waits,
metadata written, until all four have written theirs: they swap from the same
base, so three of them lose a race on any machine; later commits race freely.
"""

from __future__ import annotations

import multiprocessing
import queue
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from commit.catalog import open_catalog
from commit.batch_commit import commit_batch
from commit.exactly_once import BATCH_ID, WRITER_ID, committed_offsets
from commit.metadata_committer import PendingCommit
from commit.summary import TOTALS
from table.arrow_schema import cast_to_schema
from table.io import FileIO
from table.manifest import DataFileContent, ManifestEntryStatus, read_manifest_entries
from table.metadata import Snapshot
from table.parquet.partitioned import write_partitioned
from tests.commit.producer_support import CommitTable

WRITERS = 4
BATCHES = 50
TOTAL = WRITERS * BATCHES
TOPIC = "events"
RETRY_PROPERTIES = {
    "commit.retry.num-retries": "1000",
    "commit.retry.min-wait-ms": "5",
    "commit.retry.max-wait-ms": "200",
}
_SPAWN = multiprocessing.get_context("spawn")


def _key(writer: int, batch: int, j: int) -> int:
    return writer * 100_000 + batch * 10 + j


def _batch_rows(writer: int, batch: int) -> list[tuple[int, str]]:
    rows = [(_key(writer, batch, j), f"d{batch}") for j in range(4)]
    if batch > 0:
        rows.append((_key(writer, batch - 1, 0), f"u{batch}"))  # upsert of the previous batch's key 0
    return rows


def _deleted_keys(writer: int, batch: int) -> list[int]:
    return [] if batch == 0 else [_key(writer, batch - 1, 0), _key(writer, batch - 1, 1)]


def expected_rows() -> dict[int, str]:
    rows: dict[int, str] = {}
    for w in range(WRITERS):
        for n in range(BATCHES):
            for key in _deleted_keys(w, n):
                rows.pop(key)
            rows.update(_batch_rows(w, n))
    return rows


def _write_rows(table: CommitTable, rows: list[tuple[int, str]]) -> Any:
    md = table.metadata()
    arrow = pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "data": [r[1] for r in rows],
                      "category": ["a"] * len(rows)})
    [data_file] = write_partitioned(table.io, md.location, md.schema(), md.spec(), [cast_to_schema(arrow, md.schema())])
    return data_file


def _writer(uri: str, warehouse: str, name: str, writer: int, start: Any, results: Any) -> None:
    try:
        with open_catalog(uri, warehouse) as catalog:
            table = CommitTable(catalog, name, FileIO.for_location(warehouse))  # type: ignore[arg-type]
            start.wait()
            committed = []

            def race(pending: PendingCommit) -> None:
                """The first batch's first attempt: swap once every writer holds one on the same base."""
                if pending.attempt == 1:
                    start.wait(timeout=120)

            for n in range(BATCHES):
                data = _write_rows(table, _batch_rows(writer, n))
                deletes = [table.write_equality_deletes(_deleted_keys(writer, n))] if n else []
                offsets = {TOPIC: {writer: (n * 10, n * 10 + 10)}}
                result = commit_batch(catalog, name, f"w{writer}", n, offsets, [data], deletes,  # type: ignore[arg-type]
                                      before_commit=race if n == 0 else None)
                assert result.committed, result
                committed.append((result.snapshot.snapshot_id, result.attempts))
        results.put(("ok", writer, committed))
    except BaseException as e:  # reported to the test
        results.put(("error", writer, f"{e!r} {getattr(e, '__notes__', '')}"))


def _run_writers(uri: str, warehouse: Path, name: str) -> list[tuple[Any, ...]]:
    start = _SPAWN.Barrier(WRITERS)
    results = _SPAWN.Queue()
    procs = [_SPAWN.Process(target=_writer, args=(uri, str(warehouse), name, w, start, results))
             for w in range(WRITERS)]
    for p in procs:
        p.start()
    try:
        return [results.get(timeout=300) for _ in procs]
    except queue.Empty as e:
        raise AssertionError("a writer did not report back within 300 s") from e
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def _check_totals(history: list[Snapshot]) -> None:
    """Every snapshot's totals are its parent's plus what it added minus what it removed."""
    parent: dict[str, str] = {}
    for snapshot in history:
        summary = snapshot.summary
        for total, added, removed in TOTALS:
            expected = int(parent.get(total, "0")) + int(summary.get(added, "0")) - int(summary.get(removed, "0"))
            assert summary[total] == str(expected), (snapshot.sequence_number, total)
        parent = summary


def test_four_processes_commit_200_row_deltas(catalog_uri: str, warehouse: Path) -> None:
    check_racing_writers(catalog_uri, warehouse)


def test_four_processes_commit_200_row_deltas_through_rest(rest_catalog_server: Any, warehouse: Path) -> None:
    """The same race through Iceberg's REST server: each lost race is its 409 (a failed
    assert-ref-snapshot-id), re-validated and retried by Floe's committer."""
    check_racing_writers(rest_catalog_server.uri, warehouse, namespace=f"race_{uuid.uuid4().hex[:8]}")


def check_racing_writers(catalog_uri: str, warehouse: Path, namespace: str = "db") -> None:
    with open_catalog(catalog_uri, str(warehouse)) as catalog:
        CommitTable.create(catalog, f"{namespace}.t", properties=RETRY_PROPERTIES)  # type: ignore[arg-type]

    outcomes = _run_writers(catalog_uri, warehouse, f"{namespace}.t")
    assert [o for o in outcomes if o[0] != "ok"] == []

    with open_catalog(catalog_uri, str(warehouse)) as catalog:
        table = CommitTable(catalog, f"{namespace}.t", FileIO.for_location(str(warehouse)))  # type: ignore[arg-type]
        metadata = table.metadata()
        history = list(reversed(list(metadata.ancestors_of(metadata.current_snapshot_id))))
        committed = {sid for o in outcomes for sid, _ in o[2]}

        # Every commit landed once, in one line, with sequence numbers 1..200.
        assert len(history) == TOTAL == len(metadata.snapshots) == len(committed)
        assert {s.snapshot_id for s in history} == committed
        assert [s.sequence_number for s in history] == list(range(1, TOTAL + 1)) and metadata.last_sequence_number == TOTAL
        # the first batches swapped from one base: one won, the others lost and retried
        assert sum(attempts - 1 for o in outcomes for _, attempts in o[2]) >= WRITERS - 1, "the writers never raced"
        for w in range(WRITERS):  # each writer's batches in order, each once
            assert [int(s.summary[BATCH_ID]) for s in history if s.summary[WRITER_ID] == f"w{w}"] == list(range(BATCHES))
        assert committed_offsets(metadata) == {TOPIC: {w: BATCHES * 10 for w in range(WRITERS)}}

        # Totals add up along the history, and the last ones match the live files.
        _check_totals(history)
        seq_of = {s.snapshot_id: s.sequence_number for s in history}
        live = [e for m in table.manifests() for e in read_manifest_entries(table.io, m) if e.status != ManifestEntryStatus.DELETED]
        for entry in live:  # each file carries the sequence number of the snapshot that added it
            assert entry.sequence_number == entry.file_sequence_number == seq_of[entry.snapshot_id]
        data = [e.data_file for e in live if e.data_file.content == DataFileContent.DATA]
        deletes = [e.data_file for e in live if e.data_file.content == DataFileContent.EQUALITY_DELETES]
        last = history[-1].summary
        assert last["total-data-files"] == str(len(data)) == str(TOTAL)
        assert last["total-delete-files"] == str(len(deletes)) == str(WRITERS * (BATCHES - 1))
        assert last["total-records"] == str(sum(f.record_count for f in data))
        assert last["total-equality-deletes"] == str(sum(f.record_count for f in deletes))
        assert last["total-files-size"] == str(sum(f.file_size_in_bytes for f in data + deletes))

        # Every expected row exactly once, with its latest value.
        rows = table.rows()
        assert len(rows) == len({r["id"] for r in rows})
        assert {r["id"]: r["data"] for r in rows} == expected_rows()
