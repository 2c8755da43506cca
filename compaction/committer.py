"""Committing rewritten file groups as ``replace`` snapshots, carrying concurrent deletes over.

One call commits one batch of groups (one group, a partial-progress batch,
or the whole plan) as one :class:`~commit.operations.rewrite_files.RewriteFiles`:

* the new data files keep the starting snapshot's data sequence number
  (``use-starting-sequence-number``), so equality deletes committed since the
  start still apply to them: those need nothing;
* a position delete committed since the start names rows of a replaced file
  by position. Iceberg's own rewrite gives up there (apache/iceberg #4996,
  #5404); the committer instead reads exactly which rows went (from the
  table's history up to its current head), translates them through the
  group's position map into position deletes on the new files, and commits
  again from that head with those delete files added to the same snapshot.
  It repeats while ingest keeps deleting, up to ``max_carry_rounds``;
* position delete files whose every referenced file has been replaced by
  this run are removed in the same commit (``replaced_delete_files``);
* any other conflict aborts only the groups at fault (found by the paths the
  error names, else the whole batch): their new files are deleted and the
  rest of the batch is committed.

Rows are never lost nor resurrected: a row deleted before the start is in no
new file; one deleted after the start is deleted again in the new files by
sequence number (equality) or by a carried-over position delete, and the
commit only lands when the table's history up to its parent has been
checked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import pyarrow as pa

from commit.catalog.base import Catalog
from commit.errors import CatalogError, CommitStateUnknown
from commit.identifiers import TableIdentifierLike, to_table_identifier
from commit.key_index.operation import WithRemaps
from commit.metadata_committer import BeforeCommit
from commit.operations.errors import MissingFiles, RewriteConflict, ValidationException
from commit.operations.rewrite_files import RewriteFiles
from commit.operations.validation import Change, new_deletes_for, snapshots_since
from commit.position_map import PositionMap, read_position_map
from commit.snapshot_producer import SnapshotProducer
from compaction.planner import FileGroup
from compaction.rewriter import GroupRewrite, RewriteStatus
from table.deletes.positions import deleted_positions, referenced_data_files
from table.deletes.writers import DeletionVectorWriter, PositionDeleteWriter
from table.errors import TableError
from table.io import FileIO
from table.manifest import DataFile, DataFileContent, ManifestEntry, ManifestEntryStatus
from table.metadata import Snapshot
from table.parquet.partitioned import PartitionedWriter
from table.parquet.writer import FileNameFactory, WriterOptions, abort_after
from table.partitioning import PartitionSpec
from table.schema import Schema

log = logging.getLogger(__name__)

MAX_CARRY_ROUNDS_DEFAULT = 10
RUN_ID_PROPERTY = "floe.compaction.run-id"


class GroupResult(str, Enum):
    """A group's fate; the values are the ``result`` labels of ``floe_compaction_groups_total``."""

    COMMITTED = "committed"
    FAILED = "failed"
    CONFLICTED = "conflicted"
    ABANDONED = "abandoned"


@dataclass(frozen=True)
class RewrittenGroup:
    """A planned group and its rewrite."""

    group: FileGroup
    rewrite: GroupRewrite

    @property
    def group_id(self) -> int:
        return self.rewrite.group_id

    @property
    def replaced_paths(self) -> frozenset[str]:
        return frozenset(t.data_file.file_path for t in self.group.tasks)


@dataclass(frozen=True)
class GroupCommit:
    """What became of one group in a batch commit."""

    group_id: int
    result: GroupResult
    data_files_replaced: int = 0
    bytes_replaced: int = 0
    files_added: int = 0
    deletes_carried_over: int = 0
    error: str | None = None


@dataclass(frozen=True)
class BatchCommit:
    """The outcome of one commit call."""

    groups: tuple[GroupCommit, ...]
    snapshot_id: int | None = None
    removed_delete_files: tuple[str, ...] = ()
    carry_rounds: int = 0

    @property
    def committed(self) -> bool:
        return self.snapshot_id is not None


@dataclass
class _Pending:
    """A group on its way to a commit, with the deletes carried over to its new files so far."""

    rewritten: RewrittenGroup
    position_map: PositionMap | None = None
    carried_files: list[DataFile] = field(default_factory=list)
    carried: dict[str, set[int]] = field(default_factory=dict)  # old path -> old positions carried
    carried_count: int = 0
    carried_new: dict[str, list[int]] = field(default_factory=dict)  # v3: new path -> new positions carried

    @property
    def group_id(self) -> int:
        return self.rewritten.group_id

    @property
    def added(self) -> tuple[DataFile, ...]:
        return self.rewritten.rewrite.added_files


@dataclass(frozen=True)
class CommitContext:
    """What every commit of one run shares."""

    catalog: Catalog
    identifier: TableIdentifierLike
    io: FileIO
    starting_snapshot: Snapshot
    schema: Schema
    output_spec: PartitionSpec
    data_location: str
    run_id: str
    writer: WriterOptions
    """The table's file writing options: carried-over deletes are written with them."""
    use_starting_sequence_number: bool = True
    max_carry_rounds: int = MAX_CARRY_ROUNDS_DEFAULT
    before_commit: BeforeCommit | None = None
    deletion_vectors: bool = False
    """v3: carried-over deletes are deletion vectors (one per new file), not position delete files."""


class RewriteCommitter:
    """Commits batches of rewritten groups of one run (see the module docstring)."""

    def __init__(self, context: CommitContext) -> None:
        self.context = context
        self.identifier = to_table_identifier(context.identifier)
        self.replaced: set[str] = set()  # data files replaced by this run's commits
        self.removed_deletes: set[str] = set()  # delete files removed by this run's commits
        self._referenced: dict[str, frozenset[str]] = {}
        self._carry_round = 0

    # -- public ------------------------------------------------------------------

    def commit(self, groups: Sequence[RewrittenGroup]) -> BatchCommit:
        """Commit ``groups`` (all :attr:`RewriteStatus.REWRITTEN`) in one snapshot, or as many as can be."""
        for g in groups:
            if g.rewrite.status != RewriteStatus.REWRITTEN:
                raise ValueError(f"group {g.group_id} was not rewritten ({g.rewrite.status.value})")
        pending = {g.group_id: _Pending(g) for g in groups}
        return _BatchCommit(self, pending).run()

    def discard(self, rewrite: GroupRewrite, carried: Iterable[DataFile] = ()) -> None:
        """Delete the files of a rewrite that will not be committed."""
        paths = [f.file_path for f in (*rewrite.added_files, *carried)]
        if rewrite.position_map_path:
            paths.append(rewrite.position_map_path)
        self.context.io.delete_many(paths)

    # -- shared with _BatchCommit --------------------------------------------------

    def referenced(self, delete_file: DataFile) -> frozenset[str]:
        path = delete_file.file_path
        if path not in self._referenced:
            self._referenced[path] = referenced_data_files(self.context.io, delete_file)
        return self._referenced[path]

    def next_carry_round(self) -> int:
        self._carry_round += 1
        return self._carry_round


class _BatchCommit:
    """One commit call: attempts, carry-over rounds, and aborting groups at fault."""

    def __init__(self, owner: RewriteCommitter, pending: dict[int, _Pending]) -> None:
        self.owner = owner
        self.ctx = owner.context
        self.pending = pending
        self.start = self.ctx.starting_snapshot.snapshot_id
        self.outcomes: dict[int, GroupCommit] = {}
        self.concurrent_position_deletes: dict[str, DataFile] = {}
        self.gone_deletes: set[str] = set()
        self.rounds = 0
        self.remaps: WithRemaps | None = None

    def run(self) -> BatchCommit:
        while self.pending:
            replaced_deletes = self._useless_deletes()
            try:
                snapshot = self._attempt(replaced_deletes)
            except CommitStateUnknown:
                raise  # it may have landed: nothing may be deleted
            except Exception as error:  # noqa: BLE001 - _handle aborts the groups and re-raises the unexpected
                self._handle(error, replaced_deletes)
                continue
            return self._committed(snapshot, replaced_deletes)
        return BatchCommit(self._ordered(), None, (), self.rounds)

    def _handle(self, error: Exception, replaced_deletes: list[str]) -> None:
        """Carry deletes over, or abort the groups at fault; anything unexpected aborts
        the whole batch and is raised again."""
        try:
            if isinstance(error, RewriteConflict):
                self._on_rewrite_conflict(error)
            elif isinstance(error, MissingFiles):
                self._on_missing(error, replaced_deletes)
            elif isinstance(error, ValidationException):
                self._abort(self._at_fault(error), GroupResult.CONFLICTED, error)
            elif isinstance(error, (CatalogError, TableError)):
                self._abort(list(self.pending), GroupResult.FAILED, error)
            else:
                self._abort(list(self.pending), GroupResult.FAILED, error)
                raise error
        except (CatalogError, TableError) as follow_up:  # reading the history or writing deletes failed
            self._abort(list(self.pending), GroupResult.FAILED, follow_up)

    # -- one attempt -------------------------------------------------------------

    def _attempt(self, replaced_deletes: list[str]) -> Snapshot:
        ctx = self.ctx
        pending = list(self.pending.values())
        operation = RewriteFiles(
            [t.data_file for p in pending for t in p.rewritten.group.tasks],
            [f for p in pending for f in p.added],
            starting_snapshot_id=self.start,
            replaced_delete_files=replaced_deletes,
            added_delete_files=[f for p in pending for f in p.carried_files],
            keep_starting_sequence_number=ctx.use_starting_sequence_number,
            data_sequence_number=ctx.starting_snapshot.sequence_number if ctx.use_starting_sequence_number else None,
        )
        maps = [
            (p.rewritten.rewrite.position_map_path, tuple(sorted(p.rewritten.replaced_paths)))
            for p in pending
            if p.rewritten.rewrite.position_map_path
        ]
        self.remaps = WithRemaps(operation, maps)
        producer = SnapshotProducer(
            ctx.catalog,
            self.owner.identifier,
            self.remaps,
            io=ctx.io,
            before_commit=ctx.before_commit,
            snapshot_properties={RUN_ID_PROPERTY: ctx.run_id},
        )
        return producer.commit()

    def _useless_deletes(self) -> list[str]:
        """Position delete files whose every referenced data file this run has replaced
        (counting this commit): nothing is left for them to delete."""
        replaced = self.owner.replaced | {p for q in self.pending.values() for p in q.rewritten.replaced_paths}
        candidates: dict[str, DataFile] = dict(self.concurrent_position_deletes)
        for p in self.pending.values():
            for d in p.rewritten.group.delete_files:
                if d.content == DataFileContent.POSITION_DELETES:
                    candidates.setdefault(d.location_key, d)  # a DV: its Puffin file and offset
        skip = self.owner.removed_deletes | self.gone_deletes
        return sorted(
            path for path, d in candidates.items() if path not in skip and self.owner.referenced(d) <= replaced
        )

    # -- outcomes ----------------------------------------------------------------

    def _committed(self, snapshot: Snapshot, replaced_deletes: list[str]) -> BatchCommit:
        for p in self.pending.values():
            files = p.rewritten.group.data_files
            self.outcomes[p.group_id] = GroupCommit(
                p.group_id,
                GroupResult.COMMITTED,
                data_files_replaced=len(files),
                bytes_replaced=sum(f.file_size_in_bytes for f in files),
                files_added=len(p.added),
                deletes_carried_over=p.carried_count,
            )
            self.owner.replaced |= p.rewritten.replaced_paths
        self.owner.removed_deletes |= set(replaced_deletes)
        self._drop_position_maps(self.pending.values())
        self._drop_obsolete_index_files()
        log.info(
            "committed rewritten file groups",
            extra={
                "table": str(self.owner.identifier),
                "snapshot_id": snapshot.snapshot_id,
                "groups": sorted(self.pending),
                "delete_files_removed": len(replaced_deletes),
                "deletes_carried_over": sum(p.carried_count for p in self.pending.values()),
                "carry_rounds": self.rounds,
            },
        )
        self.pending = {}
        return BatchCommit(self._ordered(), snapshot.snapshot_id, tuple(replaced_deletes), self.rounds)

    def _abort(self, group_ids: Iterable[int], result: GroupResult, error: BaseException) -> None:
        """Give up on these groups: delete their new files and carried deletes; the rest go on."""
        for group_id in list(group_ids):
            p = self.pending.pop(group_id)
            self.outcomes[group_id] = GroupCommit(group_id, result, error=f"{type(error).__name__}: {error}")
            self.owner.discard(p.rewritten.rewrite, p.carried_files)
            log.warning(
                "file group not committed",
                extra={
                    "table": str(self.owner.identifier),
                    "group_id": group_id,
                    "result": result.value,
                    "error": f"{type(error).__name__}: {error}",
                },
            )

    def _at_fault(self, error: ValidationException) -> list[int]:
        """The groups whose files an error names; all pending groups when it names none of them."""
        paths = set(getattr(error, "paths", ()) or ())
        hit = [gid for gid, p in self.pending.items() if p.rewritten.replaced_paths & paths]
        return hit or list(self.pending)

    def _on_missing(self, missing: MissingFiles, replaced_deletes: list[str]) -> None:
        """Delete files someone else removed first are simply not removed again; missing data
        files are a real conflict for the groups that replace them."""
        gone_deletes = missing.paths & set(replaced_deletes)
        if gone_deletes == missing.paths:
            self.gone_deletes |= gone_deletes
            return
        self._abort(self._at_fault(missing), GroupResult.CONFLICTED, missing)

    def _ordered(self) -> tuple[GroupCommit, ...]:
        return tuple(self.outcomes[g] for g in sorted(self.outcomes))

    def _drop_obsolete_index_files(self) -> None:
        """Remaps every key index bucket has folded in: the landed commit no longer names them."""
        if self.remaps is None or not self.remaps.obsolete:
            return
        try:
            self.ctx.io.delete_many(self.remaps.obsolete)
        except Exception as error:  # noqa: BLE001 - the commit has landed: a leftover is only garbage
            log.warning("could not delete %d folded key index remaps: %s", len(self.remaps.obsolete), error)

    def _drop_position_maps(self, pending: Iterable[_Pending]) -> None:
        paths = [p.rewritten.rewrite.position_map_path for p in pending]
        self.ctx.io.delete_many([p for p in paths if p])

    # -- carrying deletes over ---------------------------------------------------

    def _on_rewrite_conflict(self, conflict: RewriteConflict) -> None:
        """Carry every delete committed since ``self.start`` over, then start again from the head.

        The conflict's own positions stop at the base of the attempt that
        failed, which is not visible here; retrying from any later snapshot
        would skip the deletes in between. So the positions are read again,
        up to a head loaded now, and the next attempt validates from there.
        """
        self.rounds += 1
        if self.rounds > self.ctx.max_carry_rounds:
            conflict.add_note(f"gave up after {self.ctx.max_carry_rounds} carry-over rounds")
            self._abort(list(self.pending), GroupResult.CONFLICTED, conflict)
            return
        loaded = self.ctx.catalog.load_table(self.owner.identifier)
        head = loaded.metadata.current_snapshot()
        assert head is not None, "a table with a conflicting commit has a snapshot"
        history = snapshots_since(loaded.metadata, head, self.start)
        entries = [
            _entry(t.data_sequence_number, t.data_file) for p in self.pending.values() for t in p.rewritten.group.tasks
        ]
        applying = new_deletes_for(self.ctx.io, loaded.metadata, history, entries)
        self._abort_equality_conflicts(applying, conflict)
        position_files = {
            c.path: c.entry.data_file
            for changes in applying.values()
            for c in changes
            if c.entry.data_file.content == DataFileContent.POSITION_DELETES
        }
        old_paths = {path for p in self.pending.values() for path in p.rewritten.replaced_paths}
        positions = deleted_positions(self.ctx.io, position_files.values(), old_paths)
        self.concurrent_position_deletes.update(position_files)
        for p in list(self.pending.values()):
            self._carry(p, {path: positions[path] for path in p.rewritten.replaced_paths if path in positions})
        log.info(
            "carried concurrent position deletes over to rewritten files",
            extra={
                "table": str(self.owner.identifier),
                "since_snapshot_id": self.start,
                "head_snapshot_id": head.snapshot_id,
                "position_delete_files": len(position_files),
                "round": self.rounds,
            },
        )
        self.start = head.snapshot_id

    def _abort_equality_conflicts(self, applying: Mapping[str, list[Change]], conflict: RewriteConflict) -> None:
        """New files with a new sequence number escape later equality deletes: a real conflict."""
        if self.ctx.use_starting_sequence_number:
            return
        hit = {
            path
            for path, changes in applying.items()
            if any(c.entry.data_file.content == DataFileContent.EQUALITY_DELETES for c in changes)
        }
        at_fault = [gid for gid, p in self.pending.items() if p.rewritten.replaced_paths & hit]
        if at_fault:
            self._abort(at_fault, GroupResult.CONFLICTED, conflict)

    def _carry(self, pending: _Pending, deleted: Mapping[str, Sequence[int]]) -> None:
        """Write position deletes on the group's new files for rows ``deleted`` from its old ones."""
        fresh = {}
        for old_path, positions in deleted.items():
            done = pending.carried.setdefault(old_path, set())
            new = sorted(set(positions) - done)
            if new:
                fresh[old_path] = new
                done.update(new)
        if not fresh:
            return
        if pending.position_map is None:
            path = pending.rewritten.rewrite.position_map_path
            assert path is not None
            pending.position_map = read_position_map(self.ctx.io, path)
        translated = pending.position_map.translate(fresh)
        if self.ctx.deletion_vectors:
            self._write_vectors(pending, translated)
        else:
            pending.carried_files.extend(self._write_position_deletes(pending, translated))
        pending.carried_count += sum(len(v) for v in translated.values())

    def _write_vectors(self, pending: _Pending, translated: Mapping[str, list[int]]) -> None:
        """v3: one DV per new file, holding every position carried to it in every round so far.

        A later round rewrites the group's DVs whole and deletes the earlier
        Puffin file (never committed): a new file may have one DV only.
        """
        for path, positions in translated.items():
            pending.carried_new.setdefault(path, []).extend(positions)
        partitions = {f.file_path: f.partition for f in pending.added}
        names = FileNameFactory(
            prefix=f"{pending.group_id:05d}-carry{self.owner.next_carry_round()}", operation_id=self.ctx.run_id
        )
        writer = DeletionVectorWriter(self.ctx.io, self.ctx.data_location, names)
        for path, positions in pending.carried_new.items():
            writer.delete(path, positions, self.ctx.output_spec.spec_id, partitions[path])
        earlier = sorted({f.file_path for f in pending.carried_files})
        pending.carried_files[:] = writer.close()
        if earlier:
            self.ctx.io.delete_many(earlier)

    def _write_position_deletes(self, pending: _Pending, translated: Mapping[str, list[int]]) -> list[DataFile]:
        """Delete files for the translated positions, one writer per partition of the new files."""
        ctx = self.ctx
        partitions = {f.file_path: f.partition for f in pending.added}
        names = FileNameFactory(
            prefix=f"{pending.group_id:05d}-carry{self.owner.next_carry_round()}", operation_id=ctx.run_id
        )
        options = ctx.writer.for_deletes()
        writer = PartitionedWriter(
            ctx.schema,
            ctx.output_spec,
            lambda partition: PositionDeleteWriter(
                ctx.io, ctx.data_location, ctx.schema, ctx.output_spec, partition, file_name_factory=names, **options
            ),
        )
        try:
            for path in sorted(translated):
                writer.write_partition(partitions[path], _position_rows([path], translated))
            return writer.close()
        except BaseException as error:
            abort_after(error, writer)
            raise


def _position_rows(paths: list[str], translated: Mapping[str, list[int]]) -> pa.Table:
    file_paths = [p for p in paths for _ in translated[p]]
    positions = [pos for p in paths for pos in translated[p]]
    return pa.table({"file_path": pa.array(file_paths, pa.string()), "pos": pa.array(positions, pa.int64())})


def _entry(sequence_number: int, data_file: DataFile) -> ManifestEntry:
    """A live manifest entry as planning saw it: what conflict detection needs."""
    return ManifestEntry(ManifestEntryStatus.EXISTING, None, sequence_number, None, data_file)
