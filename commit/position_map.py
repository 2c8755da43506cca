"""Where each row of a rewritten file went: (old file, old position) -> (new file, new position).

A position delete names a row by its position in a data file. When one lands
on a file the compactor is replacing, the compactor must say the same thing
about its new files (carry the delete over) instead of giving up, as
Iceberg's own rewrite does. This module keeps the mapping that makes that
possible, compactly:

* per old file, the sorted positions of the rows that were live at the start
  and were written out (``survivors``), as one Arrow array;
* runs over that array: ``survivors[offsets[i]:offsets[i+1]]`` went to new
  file ``files[i]`` at consecutive positions from ``starts[i]``.

A file rewritten into one output partition needs one run per new file it
reached; only re-partitioned data (an older spec) interleaves into many runs.
The map is written as a small Parquet file (one row per old file, positions
delta-encoded), so a Spark task hands back a path instead of the map.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from table.errors import MalformedFileError, ValidationError
from table.io import FileIO

FORMAT_KEY = b"floe.position-map"
FORMAT_VERSION = "1"
NEW_FILES_KEY = b"floe.position-map.new-files"
_DELTA_COLUMNS = ("survivors", "run_offsets", "run_starts")  # sorted ints: a few bits each

_SCHEMA = pa.schema(
    [
        pa.field("old_file", pa.string(), nullable=False),
        pa.field("survivors", pa.list_(pa.int64())),
        pa.field("run_offsets", pa.list_(pa.int64())),
        pa.field("run_files", pa.list_(pa.int32())),
        pa.field("run_starts", pa.list_(pa.int64())),
    ]
)


class UnknownRewrittenFile(ValidationError):
    """A delete names a file this map does not cover: it was not rewritten by this group."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = frozenset(paths)
        super().__init__(f"position map has no entry for data file(s) {sorted(self.paths)}")


@dataclass(frozen=True)
class FilePositions:
    """The survivors of one old file and the runs they were written in."""

    survivors: pa.Array  # int64, sorted, distinct
    run_offsets: tuple[int, ...]  # index into survivors where each run starts
    run_files: tuple[int, ...]  # index into PositionMap.new_files
    run_starts: tuple[int, ...]  # new position of each run's first row

    def locate(self, positions: Iterable[int]) -> list[tuple[int, int]]:
        """(new file index, new position) of each given old position that was written out.

        Positions that are not survivors (already deleted at the start) are
        skipped: their rows are in no new file, so there is nothing to delete.
        """
        wanted = pa.array(sorted(set(positions)), pa.int64())
        if len(wanted) == 0 or len(self.survivors) == 0:
            return []
        indexes = pc.index_in(wanted, value_set=self.survivors).to_pylist()
        found = []
        for index in indexes:
            if index is None:
                continue
            run = bisect.bisect_right(self.run_offsets, index) - 1
            found.append((self.run_files[run], self.run_starts[run] + index - self.run_offsets[run]))
        return found

    def relocate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new file index, new position) of each old position, vectorized; index -1 for non-survivors."""
        if not self.run_offsets:
            return np.full(len(positions), -1, dtype=np.int64), np.zeros(len(positions), dtype=np.int64)
        index = pc.index_in(pa.array(positions, pa.int64()), value_set=self.survivors)
        found = index.is_valid().to_numpy(zero_copy_only=False)
        at = index.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        offsets = np.asarray(self.run_offsets, dtype=np.int64)
        run = np.searchsorted(offsets, at, side="right") - 1
        files = np.where(found, np.asarray(self.run_files, dtype=np.int64)[run], -1)
        moved = np.asarray(self.run_starts, dtype=np.int64)[run] + at - offsets[run]
        return files, np.where(found, moved, 0)


@dataclass(frozen=True)
class PositionMap:
    """The mapping of one rewritten file group."""

    new_files: tuple[str, ...]
    files: Mapping[str, FilePositions]

    def translate(self, deleted: Mapping[str, Iterable[int]]) -> dict[str, list[int]]:
        """New file path -> sorted positions to delete there, for old-file positions ``deleted``."""
        unknown = set(deleted) - set(self.files)
        if unknown:
            raise UnknownRewrittenFile(unknown)
        result: dict[str, set[int]] = defaultdict(set)
        for old_path, positions in deleted.items():
            for file_index, new_pos in self.files[old_path].locate(positions):
                result[self.new_files[file_index]].add(new_pos)
        return {path: sorted(positions) for path, positions in sorted(result.items())}

    def relocate(self, paths: pa.Array, positions: pa.Array) -> tuple[pa.Array, pa.Array]:
        """Where the rows at ``(paths[i], positions[i])`` are after this rewrite (the key index's remap).

        Rows of files this map did not rewrite keep their location. Rows of a
        rewritten file that were not written out (already deleted when the
        group was read) get a null path and position: they are nowhere.
        """
        new_paths = np.array(paths.to_pylist(), dtype=object)
        new_positions = pc.fill_null(positions, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=True)
        gone = positions.is_null().to_numpy(zero_copy_only=False).copy()  # nowhere already: it stays so
        for old_path in set(pc.unique(paths).to_pylist()) & self.files.keys():
            rows = np.flatnonzero(new_paths == old_path)
            files, moved = self.files[old_path].relocate(new_positions[rows])
            gone[rows] = files < 0
            new_paths[rows] = [self.new_files[f] if f >= 0 else None for f in files]
            new_positions[rows] = moved
        return pa.array(new_paths, pa.string()), pa.array(new_positions, pa.int64(), mask=gone)


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Chunk:
    """Rows of one old file written consecutively to one output."""

    old_file: str
    positions: pa.Array
    output: Hashable
    first_ordinal: int


class PositionMapBuilder:
    """Collects where rows went while a group is written; :meth:`build` once the outputs are closed.

    An *output* is one rolling writer (one partition); an ordinal is a row's
    index among all rows given to that output. Which new file a row ended up
    in is only known once the writer has rolled, hence the two steps.
    """

    def __init__(self) -> None:
        self._chunks: list[_Chunk] = []
        self._old_files: dict[str, None] = {}

    def add_file(self, old_file: str) -> None:
        """Register an old file, even if none of its rows survive."""
        self._old_files.setdefault(old_file, None)

    def add(self, old_file: str, positions: pa.Array, output: Hashable, first_ordinal: int) -> None:
        """Rows at ``positions`` of ``old_file`` went to ``output`` as ordinals ``first_ordinal``, ``+1``, ..."""
        self.add_file(old_file)
        if len(positions):
            self._chunks.append(_Chunk(old_file, positions.cast(pa.int64()), output, first_ordinal))

    def build(self, outputs: Mapping[Hashable, Sequence[tuple[str, int]]]) -> PositionMap:
        """The map, given each output's files in write order as (path, record count)."""
        new_files: list[str] = []
        bounds: dict[Hashable, list[tuple[int, int, int]]] = {}  # output -> (first ordinal, end, file index)
        for output, files in outputs.items():
            ordinal = 0
            bounds[output] = []
            for path, count in files:
                bounds[output].append((ordinal, ordinal + count, len(new_files)))
                new_files.append(path)
                ordinal += count
        pieces: dict[str, list[tuple[pa.Array, int, int]]] = defaultdict(list)
        for chunk in self._chunks:
            for piece in _split_chunk(chunk, bounds.get(chunk.output, [])):
                pieces[chunk.old_file].append(piece)
        positions = {old: _file_positions(pieces.get(old, [])) for old in self._old_files}
        return PositionMap(tuple(new_files), positions)


def _split_chunk(chunk: _Chunk, bounds: list[tuple[int, int, int]]) -> list[tuple[pa.Array, int, int]]:
    """The chunk cut at new-file boundaries: (positions, new file index, first new position)."""
    first, end = chunk.first_ordinal, chunk.first_ordinal + len(chunk.positions)
    pieces = []
    for start, stop, file_index in bounds:
        low, high = max(first, start), min(end, stop)
        if low < high:
            pieces.append((chunk.positions.slice(low - first, high - low), file_index, low - start))
    covered = sum(len(p) for p, _, _ in pieces)
    if covered != len(chunk.positions):
        raise ValidationError(
            f"position map of {chunk.old_file}: rows {first}..{end} of output {chunk.output!r} "
            f"are not all in its written files ({covered} of {len(chunk.positions)} found)"
        )
    return pieces


def _file_positions(pieces: list[tuple[pa.Array, int, int]]) -> FilePositions:
    """Survivors sorted by old position, with the runs of consecutive new positions."""
    if not pieces:
        return FilePositions(pa.array([], pa.int64()), (), (), ())
    old = pa.concat_arrays([p for p, _, _ in pieces])
    file_index = pa.concat_arrays([pa.repeat(pa.scalar(f, pa.int32()), len(p)) for p, f, _ in pieces])
    new_pos = pa.concat_arrays([pa.arange(s, s + len(p)) for p, _, s in pieces]).cast(pa.int64())
    order = pc.sort_indices(old)
    old, file_index, new_pos = old.take(order), file_index.take(order), new_pos.take(order)
    if len(old) > 1 and pc.any(pc.equal(old.slice(1), old.slice(0, len(old) - 1))).as_py():
        raise ValidationError("position map: an old position was written twice")
    offsets = _run_offsets(file_index, new_pos)
    return FilePositions(
        old,
        tuple(offsets),
        tuple(file_index.take(pa.array(offsets, pa.int64())).to_pylist()),
        tuple(new_pos.take(pa.array(offsets, pa.int64())).to_pylist()),
    )


def _run_offsets(file_index: pa.Array, new_pos: pa.Array) -> list[int]:
    """Indexes where a new run starts: the file changes or the new position jumps."""
    n = len(new_pos)
    if n <= 1:
        return [0] * n
    head, tail = slice(0, n - 1), slice(1, n)
    other_file = pc.not_equal(file_index[tail], file_index[head])
    jump = pc.not_equal(pc.subtract(new_pos[tail], new_pos[head]), 1)
    breaks = pc.indices_nonzero(pc.or_(other_file, jump)).to_pylist()
    return [0, *(b + 1 for b in breaks)]


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def write_position_map(io: FileIO, path: str, position_map: PositionMap) -> None:
    """Write the map as Parquet at ``path`` (a new, unreferenced file: never part of the table)."""
    names = sorted(position_map.files)
    entries = [position_map.files[n] for n in names]
    table = pa.table(
        [
            pa.array(names, pa.string()),
            pa.array([e.survivors for e in entries], pa.list_(pa.int64())),
            pa.array([list(e.run_offsets) for e in entries], pa.list_(pa.int64())),
            pa.array([list(e.run_files) for e in entries], pa.list_(pa.int32())),
            pa.array([list(e.run_starts) for e in entries], pa.list_(pa.int64())),
        ],
        schema=_SCHEMA.with_metadata(
            {FORMAT_KEY: FORMAT_VERSION.encode(), NEW_FILES_KEY: json.dumps(list(position_map.new_files)).encode()}
        ),
    )
    with io.open_output(path) as sink:
        pq.write_table(
            table,
            sink,
            compression="zstd",
            use_dictionary=["old_file"],
            column_encoding={f"{c}.list.element": "DELTA_BINARY_PACKED" for c in _DELTA_COLUMNS},
        )


def read_position_map(io: FileIO, path: str) -> PositionMap:
    """The map written by :func:`write_position_map`."""
    try:
        with io.open_input(path) as source:
            table = pq.read_table(source)
    except (pa.ArrowException, OSError) as e:
        raise MalformedFileError(path, None, f"cannot read position map: {e}") from e
    metadata = table.schema.metadata or {}
    if metadata.get(FORMAT_KEY) != FORMAT_VERSION.encode() or NEW_FILES_KEY not in metadata:
        raise MalformedFileError(path, None, f"not a version {FORMAT_VERSION} position map")
    new_files = tuple(json.loads(metadata[NEW_FILES_KEY]))
    files = {}
    for row in range(table.num_rows):
        survivors = table.column("survivors")[row].values
        files[table.column("old_file")[row].as_py()] = FilePositions(
            pa.array([], pa.int64()) if survivors is None else survivors.cast(pa.int64()),
            tuple(table.column("run_offsets")[row].as_py()),
            tuple(table.column("run_files")[row].as_py()),
            tuple(table.column("run_starts")[row].as_py()),
        )
    return PositionMap(new_files, files)
