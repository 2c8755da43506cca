"""Which delete files apply to which data file (spec: "Scan Planning").

Decided by sequence numbers and partitions alone, from manifest entries:

* a position delete applies to data files of the same spec and partition with
  a data sequence number *less than or equal to* its own (a commit may delete
  rows it adds), and only to the data files its ``file_path`` column names;
* an equality delete applies to data files of the same spec and partition, or
  of any partition when its spec is unpartitioned (a global delete), with a
  data sequence number *strictly less than* its own.

Column metrics prune further, as Iceberg Java does: a position delete whose
``file_path`` bounds exclude a data file does not apply to it
(:func:`position_deletes_may_apply`), nor does an equality delete whose key
ranges cannot overlap the data file's (:func:`equality_deletes_may_apply`,
with the decoded bounds kept in a :class:`KeyStatsCache`).

:class:`DeleteFileIndex` keeps the deletes of each scope sorted by sequence
number, so matching a data file costs a dictionary lookup and a binary
search, not a pass over every delete. Pure logic: no file is read here.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from table.errors import NotFoundError, SchemaError, ValidationError
from table.evaluators import decode_bound
from table.manifest import DataFile, DataFileContent
from table.partitioning import PartitionSpec, partition_key
from table.schema import DELETE_FILE_PATH_ID, Schema
from table.types import NestedField, PrimitiveType, StringType


class _BySequence:
    """Delete files of one scope, sorted by data sequence number."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, DataFile]] = []
        self._seqs: list[int] = []
        self._files: list[DataFile] = []

    def add(self, sequence_number: int, delete_file: DataFile) -> None:
        self._pending.append((sequence_number, delete_file))

    def freeze(self) -> None:
        self._pending.sort(key=lambda item: item[0])
        self._seqs = [seq for seq, _ in self._pending]
        self._files = [f for _, f in self._pending]

    def newer_than(self, sequence_number: int, inclusive: bool) -> list[DataFile]:
        """Files whose sequence number is > (or >=, when ``inclusive``) ``sequence_number``."""
        find = bisect.bisect_left if inclusive else bisect.bisect_right
        return self._files[find(self._seqs, sequence_number) :]


class DeleteFileIndex:
    """The live delete files of a snapshot, indexed for matching data files."""

    def __init__(
        self,
        deletes: Iterable[tuple[int, DataFile]],
        specs: Mapping[int, PartitionSpec],
        schema: Schema,
    ) -> None:
        self._schema = schema
        self._key_stats = KeyStatsCache()
        self._global_equality = _BySequence()
        self._equality: dict[tuple[Any, ...], _BySequence] = {}
        self._position: dict[tuple[Any, ...], _BySequence] = {}
        self._position_by_path: dict[str, _BySequence] = {}
        self._vectors: dict[str, tuple[int, DataFile]] = {}  # data file -> its deletion vector (v3)
        for sequence_number, delete_file in deletes:
            self._add(sequence_number, delete_file, specs)
        for scope in self._scopes():
            scope.freeze()

    def _scopes(self) -> Iterator[_BySequence]:
        yield self._global_equality
        for scopes in (self._equality, self._position, self._position_by_path):
            yield from scopes.values()

    def _add(self, sequence_number: int, delete_file: DataFile, specs: Mapping[int, PartitionSpec]) -> None:
        spec = specs.get(delete_file.spec_id)
        if spec is None:
            raise NotFoundError(f"delete file {delete_file.file_path}: no partition spec {delete_file.spec_id}")
        key = partition_key(delete_file.spec_id, delete_file.partition)
        if delete_file.is_deletion_vector:
            self._add_vector(sequence_number, delete_file)
        elif delete_file.content == DataFileContent.POSITION_DELETES:
            path = referenced_data_file(delete_file)
            if path is None:
                self._position.setdefault(key, _BySequence()).add(sequence_number, delete_file)
            else:
                self._position_by_path.setdefault(path, _BySequence()).add(sequence_number, delete_file)
        elif delete_file.content == DataFileContent.EQUALITY_DELETES:
            _check_equality_ids(delete_file)
            if spec.is_unpartitioned:
                self._global_equality.add(sequence_number, delete_file)
            else:
                self._equality.setdefault(key, _BySequence()).add(sequence_number, delete_file)
        else:
            raise ValidationError(f"{delete_file.file_path} is a data file, not a delete file")

    def _add_vector(self, sequence_number: int, vector: DataFile) -> None:
        """At most one DV per data file is live (spec "Deletion Vectors"): a second is a broken table."""
        path = vector.referenced_data_file
        assert path is not None  # the manifest reader and writer require it
        if path in self._vectors:
            raise ValidationError(
                f"data file {path} has two deletion vectors ({self._vectors[path][1].file_path} and "
                f"{vector.file_path}); the spec allows one"
            )
        self._vectors[path] = (sequence_number, vector)

    def for_data_file(self, sequence_number: int, data_file: DataFile) -> list[DataFile]:
        """The delete files to apply to ``data_file`` (data sequence number given).

        A deletion vector replaces the file's position delete files (a writer
        merged them into it), so those are not returned with it.
        """
        key = partition_key(data_file.spec_id, data_file.partition)
        equality = self._global_equality.newer_than(sequence_number, inclusive=False)
        if key in self._equality:
            equality = equality + self._equality[key].newer_than(sequence_number, inclusive=False)
        relevant = [d for d in equality if equality_deletes_may_apply(data_file, d, self._schema, self._key_stats)]
        vector = self._vectors.get(data_file.file_path)
        if vector is not None and vector[0] >= sequence_number:
            return [vector[1], *relevant]
        position = []
        if key in self._position:
            scoped = self._position[key].newer_than(sequence_number, inclusive=True)
            position = [d for d in scoped if position_deletes_may_apply(d, data_file.file_path)]
        if data_file.file_path in self._position_by_path:
            scoped = self._position_by_path[data_file.file_path].newer_than(sequence_number, inclusive=True)
            position = position + [d for d in scoped if partition_key(d.spec_id, d.partition) == key]
        return position + relevant


def _check_equality_ids(delete_file: DataFile) -> None:
    if not delete_file.equality_ids:
        raise ValidationError(f"equality delete file {delete_file.file_path} has no equality_ids")


# --------------------------------------------------------------------------
# Position deletes: which data files they name
# --------------------------------------------------------------------------


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position delete file or DV refers to: its ``referenced_data_file``, or
    its ``file_path`` bounds when they are equal; None when it may refer to several."""
    if delete_file.referenced_data_file is not None:
        return delete_file.referenced_data_file
    lower = (delete_file.lower_bounds or {}).get(DELETE_FILE_PATH_ID)
    upper = (delete_file.upper_bounds or {}).get(DELETE_FILE_PATH_ID)
    if lower is None or lower != upper:
        return None
    return decode_bound(StringType(), lower, delete_file.file_path, DELETE_FILE_PATH_ID)


def position_deletes_may_apply(delete_file: DataFile, data_path: str) -> bool:
    """False when the delete file's ``file_path`` bounds exclude ``data_path``."""
    lower, upper = path_bounds(delete_file)
    return (lower is None or lower <= data_path) and (upper is None or data_path <= upper)


def path_bounds(delete_file: DataFile) -> tuple[str | None, str | None]:
    """The decoded ``file_path`` bounds of a position delete file (None when absent)."""
    fid = DELETE_FILE_PATH_ID
    lower = decode_bound(StringType(), (delete_file.lower_bounds or {}).get(fid), delete_file.file_path, fid)
    upper = decode_bound(StringType(), (delete_file.upper_bounds or {}).get(fid), delete_file.file_path, fid)
    return lower, upper


# --------------------------------------------------------------------------
# Equality deletes: whether their keys can meet a data file's
# --------------------------------------------------------------------------


class KeyStatsCache:
    """Decoded key-column stats per (file, field id), so that matching N data
    files against M equality delete files decodes N + M bounds, not N x M."""

    def __init__(self) -> None:
        self._stats: dict[tuple[str, int], _KeyStats] = {}

    def get(self, key: NestedField, f: DataFile) -> _KeyStats:
        slot = (f.file_path, key.field_id)
        stats = self._stats.get(slot)
        if stats is None:
            stats = self._stats[slot] = _KeyStats(key, f)
        return stats


def equality_deletes_may_apply(
    data_file: DataFile, delete_file: DataFile, schema: Schema, stats: KeyStatsCache | None = None
) -> bool:
    """False when metrics prove that no row of ``data_file`` has a key that
    ``delete_file`` deletes: for some equality column, null presence or value
    ranges do not overlap. Columns the schema no longer has are not checked."""
    stats = stats or KeyStatsCache()
    for field_id in delete_file.equality_ids or ():
        key_field = _primitive_field(schema, field_id)
        if key_field is not None and not _key_may_overlap(
            stats.get(key_field, data_file), stats.get(key_field, delete_file)
        ):
            return False
    return True


def _primitive_field(schema: Schema, field_id: int) -> NestedField | None:
    try:
        found = schema.find_field(field_id)
    except SchemaError:
        return None
    return found if isinstance(found.field_type, PrimitiveType) else None


def _key_may_overlap(data: _KeyStats, deletes: _KeyStats) -> bool:
    if data.may_have_null() and deletes.may_have_null():
        return True  # a null key is deleted and may occur
    if (data.all_null() and deletes.no_null()) or (deletes.all_null() and data.no_null()):
        return False  # one side has only nulls, the other none
    if None in (data.lower, data.upper, deletes.lower, deletes.upper):
        return True
    return data.lower <= deletes.upper and deletes.lower <= data.upper


class _KeyStats:
    """Null counts and bounds of one equality column in one file."""

    def __init__(self, key: NestedField, f: DataFile) -> None:
        fid = key.field_id
        self.required = key.required
        self.nulls = (f.null_value_counts or {}).get(fid)
        self.values = (f.value_counts or {}).get(fid)
        t = key.field_type
        assert isinstance(t, PrimitiveType)
        self.lower = decode_bound(t, (f.lower_bounds or {}).get(fid), f.file_path, fid)
        self.upper = decode_bound(t, (f.upper_bounds or {}).get(fid), f.file_path, fid)

    def may_have_null(self) -> bool:
        return not self.required and (self.nulls is None or self.nulls > 0)

    def no_null(self) -> bool:
        return self.required or self.nulls == 0

    def all_null(self) -> bool:
        return not self.required and self.nulls is not None and self.nulls == self.values
