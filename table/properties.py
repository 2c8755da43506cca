"""Table properties: every key Floe reads, with its default and its parser.

Iceberg keeps a table's tunables as string properties in its metadata
(spec: "Table Metadata", Java's ``TableProperties``). Floe reads them in one
place so that a key is spelled once, has one default (Iceberg Java's unless
noted) and is parsed one way: a malformed value is a
:class:`PropertyError` that names the key, the value and the rule.

Callers ask a :class:`Property` for its value: ``TARGET_FILE_SIZE.read(props)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from table.errors import ValidationError

T = TypeVar("T")
Parser = Callable[[str, str], T]


class PropertyError(ValidationError):
    """A table property whose value breaks its rule."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"table property {key!r}: {value!r} {reason}")
        self.key = key
        self.value = value
        self.reason = reason


_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_RANGE = (-(2**63), 2**63 - 1)


def parse_int(key: str, raw: str) -> int:
    """A decimal integer in Java's ``long`` range, as Iceberg Java parses it (no ``1_000``)."""
    text = raw.strip()
    if not _LONG.fullmatch(text):
        raise PropertyError(key, raw, "is not an integer")
    value = int(text)
    if not _LONG_RANGE[0] <= value <= _LONG_RANGE[1]:
        raise PropertyError(key, raw, "is out of the range of a 64-bit integer")
    return value


def parse_non_negative_int(key: str, raw: str) -> int:
    value = parse_int(key, raw)
    if value < 0:
        raise PropertyError(key, raw, "must be >= 0")
    return value


def parse_positive_int(key: str, raw: str) -> int:
    value = parse_int(key, raw)
    if value <= 0:
        raise PropertyError(key, raw, "must be > 0")
    return value


def parse_flag(key: str, raw: str) -> bool:
    """Java's ``Boolean.parseBoolean``: ``true`` in any case; anything else is false.

    For properties Iceberg Java reads leniently, where an error would be a
    difference from every other engine."""
    return raw.strip().lower() == "true"


def parse_text(key: str, raw: str) -> str:
    return raw


def parse_metadata_codec(key: str, raw: str) -> str:
    """``none`` or ``gzip`` in any case, as Java's ``TableMetadataParser.Codec.fromName`` accepts."""
    codec = raw.strip().lower()
    if codec not in METADATA_CODECS:
        raise PropertyError(key, raw, f"is not one of {sorted(METADATA_CODECS)}")
    return codec


def parse_location(key: str, raw: str) -> str | None:
    """A directory, its trailing slashes dropped so that joins add exactly one; blank is unset."""
    stripped = raw.strip().rstrip("/")
    return stripped or None


def parse_parquet_codec(key: str, raw: str) -> str:
    """Iceberg's codec name as pyarrow spells it (``uncompressed`` is pyarrow's ``none``)."""
    codec = raw.strip().lower()
    codec = _PYARROW_CODECS.get(codec, codec)
    if codec not in PARQUET_CODECS:
        raise PropertyError(key, raw, f"is not one of {sorted(PARQUET_CODECS | set(_PYARROW_CODECS))}")
    return codec


def parse_distribution_mode(key: str, raw: str) -> str:
    mode = raw.strip().lower()
    if mode not in DISTRIBUTION_MODES:
        raise PropertyError(key, raw, f"is not one of {sorted(DISTRIBUTION_MODES)}")
    return mode


def parse_delete_strategy(key: str, raw: str) -> str:
    strategy = raw.strip().lower()
    if strategy not in DELETE_STRATEGIES:
        raise PropertyError(key, raw, f"is not one of {sorted(DELETE_STRATEGIES)}")
    return strategy


_PYARROW_CODECS = {"uncompressed": "none"}
PARQUET_CODECS = frozenset({"none", "snappy", "gzip", "brotli", "lz4", "zstd"})
DISTRIBUTION_MODES = frozenset({"none", "hash", "range"})
METADATA_CODECS = frozenset({"none", "gzip"})
DELETE_STRATEGIES = frozenset({"position", "equality"})


@dataclass(frozen=True)
class Property(Generic[T]):
    """One table property: its key, its default when unset, and how its text is parsed."""

    key: str
    default: T
    parse: Parser[T]

    def read(self, properties: Mapping[str, str]) -> T:
        raw = properties.get(self.key)
        return self.default if raw is None else self.parse(self.key, raw)

    def is_set(self, properties: Mapping[str, str]) -> bool:
        return self.key in properties


MiB = 1024 * 1024

# -- locations (see table.locations) -------------------------------------------------
DATA_PATH: Property[str | None] = Property("write.data.path", None, parse_location)
METADATA_PATH: Property[str | None] = Property("write.metadata.path", None, parse_location)

# -- data and delete files ---------------------------------------------------------
TARGET_FILE_SIZE = Property("write.target-file-size-bytes", 512 * MiB, parse_positive_int)
DELETE_TARGET_FILE_SIZE = Property("write.delete.target-file-size-bytes", 64 * MiB, parse_positive_int)
PARQUET_COMPRESSION = Property("write.parquet.compression-codec", "zstd", parse_parquet_codec)
PARQUET_COMPRESSION_LEVEL: Property[int | None] = Property("write.parquet.compression-level", None, parse_int)
PARQUET_ROW_GROUP_SIZE = Property("write.parquet.row-group-size-bytes", 128 * MiB, parse_positive_int)
DISTRIBUTION_MODE: Property[str | None] = Property("write.distribution-mode", None, parse_distribution_mode)
"""Unset: ``hash`` for a partitioned table, ``none`` otherwise (Spark's Iceberg default)."""

# -- column metrics (see table.parquet.column_stats) -----------------------------------------
METRICS_DEFAULT: Property[str | None] = Property("write.metadata.metrics.default", None, parse_text)
"""Unset: ``truncate(16)``, for the first ``METRICS_MAX_INFERRED_COLUMNS`` columns only."""
METRICS_COLUMN_PREFIX = "write.metadata.metrics.column."
"""Followed by a column name: that column's metrics mode."""
METRICS_MAX_INFERRED_COLUMNS = Property(
    "write.metadata.metrics.max-inferred-column-defaults", 100, parse_non_negative_int
)

# -- metadata files --------------------------------------------------------------------
METADATA_COMPRESSION = Property("write.metadata.compression-codec", "none", parse_metadata_codec)
METADATA_PREVIOUS_VERSIONS_MAX = Property("write.metadata.previous-versions-max", 100, parse_int)
METADATA_DELETE_AFTER_COMMIT = Property("write.metadata.delete-after-commit.enabled", False, parse_flag)
SUMMARY_PARTITION_LIMIT = Property("write.summary.partition-limit", 0, parse_int)

# -- commits -------------------------------------------------------------------------------
COMMIT_NUM_RETRIES = Property("commit.retry.num-retries", 4, parse_int)
COMMIT_MIN_RETRY_WAIT_MS = Property("commit.retry.min-wait-ms", 100, parse_int)
COMMIT_MAX_RETRY_WAIT_MS = Property("commit.retry.max-wait-ms", 60_000, parse_int)
COMMIT_TOTAL_RETRY_TIME_MS = Property("commit.retry.total-timeout-ms", 1_800_000, parse_int)
COMMIT_STATUS_CHECKS_NUM_RETRIES = Property("commit.status-check.num-retries", 3, parse_int)
COMMIT_STATUS_CHECKS_MIN_WAIT_MS = Property("commit.status-check.min-wait-ms", 1_000, parse_int)
COMMIT_STATUS_CHECKS_MAX_WAIT_MS = Property("commit.status-check.max-wait-ms", 60_000, parse_int)
COMMIT_STATUS_CHECKS_TOTAL_WAIT_MS = Property("commit.status-check.total-timeout-ms", 1_800_000, parse_int)
MANIFEST_MERGE_ENABLED = Property("commit.manifest-merge.enabled", True, parse_flag)
MANIFEST_MIN_MERGE_COUNT = Property("commit.manifest.min-count-to-merge", 100, parse_int)
MANIFEST_TARGET_SIZE = Property("commit.manifest.target-size-bytes", 8 * MiB, parse_int)

# -- snapshot expiry -----------------------------------------------------------------
MAX_SNAPSHOT_AGE_MS = Property("history.expire.max-snapshot-age-ms", 5 * 24 * 60 * 60 * 1000, parse_int)
MIN_SNAPSHOTS_TO_KEEP = Property("history.expire.min-snapshots-to-keep", 1, parse_int)
MAX_REF_AGE_MS = Property("history.expire.max-ref-age-ms", 2**63 - 1, parse_int)

# -- Floe's upserts (docs/upsert-index-design.md) ----------------------------------------
UPSERT_DELETE_STRATEGY = Property("floe.upsert.delete-strategy", "equality", parse_delete_strategy)
"""How an upsert deletes a key's previous row: ``position`` (found through the key
index; Floe sets it on the tables it creates) or ``equality`` (unset: the cheapest write)."""
KEY_INDEX_BUCKETS = Property("floe.key-index.buckets", 16, parse_positive_int)
"""Buckets of a key index, read when one is (re)built."""
KEY_INDEX_MAX_DELTAS = Property("floe.key-index.max-deltas", 8, parse_positive_int)
"""Deltas a key index bucket holds before a batch merges them into a new base."""
KEY_INDEX_MAP_SIDE_MAX_BYTES = Property(
    "floe.key-index.map-side-lookup-max-bytes", 256 * 1024 * 1024, parse_non_negative_int
)
"""A key index up to this size is looked up by the decode tasks themselves, each caching all of it
(as Spark broadcasts a small join side); a bigger one is looked up bucket by bucket after an
exchange by bucket, so that no executor holds more than its buckets. 0: always by bucket."""
UPSERT_DIRECT_MAX_RECORDS = Property("floe.upsert.direct-write-max-records", 1_000_000, parse_non_negative_int)
"""An upsert batch of at most this many offsets (position strategy, small key index, a table that wants
no exchange) is reduced and written by its decode tasks, which hold its rows meanwhile (about 100-300
bytes each); a bigger one, or one whose size is not known, is reduced after an exchange by key, which
spills. 0: always after the exchange."""
