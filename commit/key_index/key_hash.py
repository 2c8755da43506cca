"""Which bucket of the key index a key belongs to.

A bucket is Iceberg's ``bucket[N]`` hash of the key column, so that the
index can be partitioned the same way by Spark (ingest), by plain Python
(rebuild, check) and by anyone reading the spec. A key of several columns
combines the columns' hashes (``h = h * 31 + h_i`` modulo 2^31 - 1), as
Java's ``Objects.hash`` would.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from table.transforms import BucketTransform

_LARGE_PRIME = 2**31 - 1


def key_buckets(columns: Sequence[pa.Array], buckets: int) -> pa.Array:
    """The int32 bucket in ``[0, buckets)`` of each key (one array per key column, aligned)."""
    if not columns:
        raise ValueError("a key has at least one column")
    if len(columns) == 1:
        return BucketTransform(buckets).apply_arrow(_plain(columns[0]))
    hashes = BucketTransform(_LARGE_PRIME)
    combined = pa.array([0] * len(columns[0]), pa.int64())
    for column in columns:
        part = hashes.apply_arrow(_plain(column)).cast(pa.int64())
        combined = _mod(pc.add(pc.multiply(combined, 31), part), _LARGE_PRIME)
    return _mod(combined, buckets).cast(pa.int32())


def _plain(column: pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def _mod(values: pa.Array, n: int) -> pa.Array:
    """Non-negative remainder (Arrow has no modulo kernel)."""
    return pc.subtract(values, pc.multiply(pc.divide(values, n), n))
