"""Options of a data file rewrite, named and defaulted as Iceberg Java's.

Operators already know Iceberg's ``rewrite_data_files`` options, so Floe takes
the same option strings, with the same defaults and the same validation
(``RewriteDataFiles``, ``SizeBasedFileRewritePlanner``,
``BinPackRewriteFilePlanner``). Parsing is stricter than Java's in two ways
that only turn silent mistakes into errors: unknown options are rejected and a
boolean must be ``true`` or ``false``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from table import properties

TARGET_FILE_SIZE_BYTES = "target-file-size-bytes"
MIN_FILE_SIZE_BYTES = "min-file-size-bytes"
MAX_FILE_SIZE_BYTES = "max-file-size-bytes"
MIN_INPUT_FILES = "min-input-files"
DELETE_FILE_THRESHOLD = "delete-file-threshold"
DELETE_RATIO_THRESHOLD = "delete-ratio-threshold"
MAX_FILE_GROUP_SIZE_BYTES = "max-file-group-size-bytes"
MAX_CONCURRENT_FILE_GROUP_REWRITES = "max-concurrent-file-group-rewrites"
PARTIAL_PROGRESS_ENABLED = "partial-progress.enabled"
PARTIAL_PROGRESS_MAX_COMMITS = "partial-progress.max-commits"
PARTIAL_PROGRESS_MAX_FAILED_COMMITS = "partial-progress.max-failed-commits"
USE_STARTING_SEQUENCE_NUMBER = "use-starting-sequence-number"
REWRITE_JOB_ORDER = "rewrite-job-order"
REWRITE_ALL = "rewrite-all"

KNOWN_OPTIONS = frozenset(
    {
        TARGET_FILE_SIZE_BYTES,
        MIN_FILE_SIZE_BYTES,
        MAX_FILE_SIZE_BYTES,
        MIN_INPUT_FILES,
        DELETE_FILE_THRESHOLD,
        DELETE_RATIO_THRESHOLD,
        MAX_FILE_GROUP_SIZE_BYTES,
        MAX_CONCURRENT_FILE_GROUP_REWRITES,
        PARTIAL_PROGRESS_ENABLED,
        PARTIAL_PROGRESS_MAX_COMMITS,
        PARTIAL_PROGRESS_MAX_FAILED_COMMITS,
        USE_STARTING_SEQUENCE_NUMBER,
        REWRITE_JOB_ORDER,
        REWRITE_ALL,
    }
)

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

MIN_FILE_SIZE_DEFAULT_RATIO = 0.75
MAX_FILE_SIZE_DEFAULT_RATIO = 1.80
MIN_INPUT_FILES_DEFAULT = 5
DELETE_FILE_THRESHOLD_DEFAULT = INT_MAX  # Java: Integer.MAX_VALUE, i.e. off
DELETE_RATIO_THRESHOLD_DEFAULT = 0.3
MAX_FILE_GROUP_SIZE_BYTES_DEFAULT = 100 * 1024 * 1024 * 1024
MAX_CONCURRENT_FILE_GROUP_REWRITES_DEFAULT = 5
PARTIAL_PROGRESS_ENABLED_DEFAULT = False
PARTIAL_PROGRESS_MAX_COMMITS_DEFAULT = 10
USE_STARTING_SEQUENCE_NUMBER_DEFAULT = True
REWRITE_ALL_DEFAULT = False


class RewriteJobOrder(str, Enum):
    """The order in which file groups are rewritten (and committed)."""

    NONE = "none"
    BYTES_ASC = "bytes-asc"
    BYTES_DESC = "bytes-desc"
    FILES_ASC = "files-asc"
    FILES_DESC = "files-desc"


class InvalidRewriteOption(ValueError):
    """A rewrite option (or the table property behind one) has an unusable value.

    ``option`` is the option or property name, ``value`` what was given and
    ``expected`` what would have been accepted.
    """

    def __init__(self, option: str, value: Any, expected: str) -> None:
        self.option = option
        self.value = value
        self.expected = expected
        super().__init__(self._message())

    def _message(self) -> str:
        return f"invalid value {self.value!r} for {self.option!r}: expected {self.expected}"


class UnknownRewriteOption(InvalidRewriteOption):
    """An option name that neither Floe nor Iceberg's rewrite knows (a typo, usually)."""

    def __init__(self, option: str, value: Any) -> None:
        super().__init__(option, value, f"one of {sorted(KNOWN_OPTIONS)}")

    def _message(self) -> str:
        return f"unknown rewrite option {self.option!r} (value {self.value!r}): expected {self.expected}"


@dataclass(frozen=True)
class RewriteOptions:
    """Validated rewrite options; build them with :meth:`parse`.

    The fields have no defaults because several defaults depend on other
    values (the size bounds on the target, the failed-commit budget on the
    commit count); :meth:`parse` applies them. Construction validates, so
    ``dataclasses.replace`` cannot produce an inconsistent value either.
    """

    target_file_size_bytes: int
    min_file_size_bytes: int
    max_file_size_bytes: int
    min_input_files: int
    delete_file_threshold: int
    delete_ratio_threshold: float
    max_file_group_size_bytes: int
    max_concurrent_file_group_rewrites: int
    partial_progress_enabled: bool
    partial_progress_max_commits: int
    partial_progress_max_failed_commits: int
    use_starting_sequence_number: bool
    rewrite_job_order: RewriteJobOrder
    rewrite_all: bool
    remove_equality_deletes: bool = False
    """Not an option string: set for a table under the position delete strategy
    (:func:`compaction.planner.plan_table_rewrite`), so that any data file with
    equality deletes is rewritten whatever its size and ``main`` ends with none."""

    def __post_init__(self) -> None:
        _validate(self)

    @classmethod
    def parse(
        cls,
        options: Mapping[str, str] | None = None,
        table_properties: Mapping[str, str] | None = None,
    ) -> RewriteOptions:
        """Options from Iceberg option strings, defaulted from the table properties."""
        options = dict(options or {})
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise UnknownRewriteOption(unknown[0], options[unknown[0]])
        target = _get(options, TARGET_FILE_SIZE_BYTES, _parse_long, _default_target(table_properties or {}))
        max_commits = _get(options, PARTIAL_PROGRESS_MAX_COMMITS, _parse_int, PARTIAL_PROGRESS_MAX_COMMITS_DEFAULT)
        defaults = _defaults(target, max_commits)
        values = {name: _get(options, opt, parse, defaults[name]) for name, (opt, parse) in _FIELDS.items()}
        return cls(**values)

    @property
    def write_max_file_size(self) -> int:
        """The size at which a rewriter should roll output files.

        Halfway between target and maximum (Java's ``writeMaxFileSize``): data
        rarely compresses exactly as estimated, and rolling at the target
        would leave a small remainder file next to each full one.
        """
        target, high = self.target_file_size_bytes, self.max_file_size_bytes
        return int(target + (high - target) * 0.5)


# --------------------------------------------------------------------------
# Parsing one value
# --------------------------------------------------------------------------

_T = TypeVar("_T")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _get(options: Mapping[str, str], name: str, parse: Callable[[str, str], _T], default: _T) -> _T:
    raw = options.get(name)
    return default if raw is None else parse(name, raw)


def _parse_integer(name: str, raw: str, upper: int, kind: str) -> int:
    """An integer as Java's ``Long.parseLong``/``Integer.parseInt`` reads it."""
    if not isinstance(raw, str) or not _INTEGER.fullmatch(raw):
        raise InvalidRewriteOption(name, raw, f"a {kind} integer")
    value = int(raw)
    if not -upper - 1 <= value <= upper:
        raise InvalidRewriteOption(name, raw, f"a {kind} integer (at most {upper})")
    return value


def _parse_long(name: str, raw: str) -> int:
    return _parse_integer(name, raw, LONG_MAX, "64-bit")


def _parse_int(name: str, raw: str) -> int:
    return _parse_integer(name, raw, INT_MAX, "32-bit")


def _parse_float(name: str, raw: str) -> float:
    try:
        value = float(raw.strip())
    except (ValueError, AttributeError):
        raise InvalidRewriteOption(name, raw, "a decimal number") from None
    if not math.isfinite(value):
        raise InvalidRewriteOption(name, raw, "a finite decimal number")
    return value


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower() if isinstance(raw, str) else raw
    if lowered not in ("true", "false"):
        raise InvalidRewriteOption(name, raw, "'true' or 'false'")
    return lowered == "true"


def _parse_job_order(name: str, raw: str) -> RewriteJobOrder:
    """Case-insensitive, as Java's ``RewriteJobOrder.fromName``."""
    try:
        return RewriteJobOrder(raw.strip().lower())
    except (ValueError, AttributeError):
        raise InvalidRewriteOption(name, raw, f"one of {[o.value for o in RewriteJobOrder]}") from None


def _default_target(table_properties: Mapping[str, str]) -> int:
    """The table's write target (``write.target-file-size-bytes``), so that
    compaction aims where ingestion writes, as in Java."""
    try:
        return properties.TARGET_FILE_SIZE.read(table_properties)
    except properties.PropertyError as error:
        raise InvalidRewriteOption(error.key, error.value, "an integer > 0, at most 2^63-1") from None


_FIELDS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "target_file_size_bytes": (TARGET_FILE_SIZE_BYTES, _parse_long),
    "min_file_size_bytes": (MIN_FILE_SIZE_BYTES, _parse_long),
    "max_file_size_bytes": (MAX_FILE_SIZE_BYTES, _parse_long),
    "min_input_files": (MIN_INPUT_FILES, _parse_int),
    "delete_file_threshold": (DELETE_FILE_THRESHOLD, _parse_int),
    "delete_ratio_threshold": (DELETE_RATIO_THRESHOLD, _parse_float),
    "max_file_group_size_bytes": (MAX_FILE_GROUP_SIZE_BYTES, _parse_long),
    "max_concurrent_file_group_rewrites": (MAX_CONCURRENT_FILE_GROUP_REWRITES, _parse_int),
    "partial_progress_enabled": (PARTIAL_PROGRESS_ENABLED, _parse_bool),
    "partial_progress_max_commits": (PARTIAL_PROGRESS_MAX_COMMITS, _parse_int),
    "partial_progress_max_failed_commits": (PARTIAL_PROGRESS_MAX_FAILED_COMMITS, _parse_int),
    "use_starting_sequence_number": (USE_STARTING_SEQUENCE_NUMBER, _parse_bool),
    "rewrite_job_order": (REWRITE_JOB_ORDER, _parse_job_order),
    "rewrite_all": (REWRITE_ALL, _parse_bool),
}
"""Each field of :class:`RewriteOptions` with its option string and parser."""


def _defaults(target: int, max_commits: int) -> dict[str, Any]:
    """Java's defaults; the size bounds follow the target (truncated as Java's
    ``(long) (target * ratio)``), the failed-commit budget the commit count."""
    return {
        "target_file_size_bytes": target,
        "min_file_size_bytes": int(target * MIN_FILE_SIZE_DEFAULT_RATIO),
        "max_file_size_bytes": int(target * MAX_FILE_SIZE_DEFAULT_RATIO),
        "min_input_files": MIN_INPUT_FILES_DEFAULT,
        "delete_file_threshold": DELETE_FILE_THRESHOLD_DEFAULT,
        "delete_ratio_threshold": DELETE_RATIO_THRESHOLD_DEFAULT,
        "max_file_group_size_bytes": MAX_FILE_GROUP_SIZE_BYTES_DEFAULT,
        "max_concurrent_file_group_rewrites": MAX_CONCURRENT_FILE_GROUP_REWRITES_DEFAULT,
        "partial_progress_enabled": PARTIAL_PROGRESS_ENABLED_DEFAULT,
        "partial_progress_max_commits": max_commits,
        "partial_progress_max_failed_commits": max_commits,
        "use_starting_sequence_number": USE_STARTING_SEQUENCE_NUMBER_DEFAULT,
        "rewrite_job_order": RewriteJobOrder.NONE,
        "rewrite_all": REWRITE_ALL_DEFAULT,
    }


# --------------------------------------------------------------------------
# Validation (Java's Preconditions, plus a sign check on max-failed-commits)
# --------------------------------------------------------------------------


def _validate(o: RewriteOptions) -> None:
    _check_sizes(o)
    _require(MIN_INPUT_FILES, o.min_input_files, o.min_input_files > 0, "> 0")
    _require(DELETE_FILE_THRESHOLD, o.delete_file_threshold, o.delete_file_threshold >= 0, ">= 0")
    _require(
        DELETE_RATIO_THRESHOLD,
        o.delete_ratio_threshold,
        0 < o.delete_ratio_threshold <= 1,
        "> 0 and <= 1 (a fraction of a file's rows)",
    )
    _require(MAX_FILE_GROUP_SIZE_BYTES, o.max_file_group_size_bytes, o.max_file_group_size_bytes > 0, "> 0")
    _require(
        MAX_CONCURRENT_FILE_GROUP_REWRITES,
        o.max_concurrent_file_group_rewrites,
        o.max_concurrent_file_group_rewrites >= 1,
        ">= 1",
    )
    _require(
        PARTIAL_PROGRESS_MAX_COMMITS,
        o.partial_progress_max_commits,
        o.partial_progress_max_commits > 0 or not o.partial_progress_enabled,
        f"> 0 when {PARTIAL_PROGRESS_ENABLED} is true",
    )
    _require(
        PARTIAL_PROGRESS_MAX_FAILED_COMMITS,
        o.partial_progress_max_failed_commits,
        o.partial_progress_max_failed_commits >= 0,
        ">= 0 (a negative budget fails every run)",
    )
    if not isinstance(o.rewrite_job_order, RewriteJobOrder):
        raise InvalidRewriteOption(REWRITE_JOB_ORDER, o.rewrite_job_order, "a RewriteJobOrder")


def _check_sizes(o: RewriteOptions) -> None:
    target, low, high = o.target_file_size_bytes, o.min_file_size_bytes, o.max_file_size_bytes
    _require(TARGET_FILE_SIZE_BYTES, target, target > 0, "> 0")
    _require(MIN_FILE_SIZE_BYTES, low, low >= 0, ">= 0")
    _require(
        TARGET_FILE_SIZE_BYTES,
        target,
        target > low,
        f"> {MIN_FILE_SIZE_BYTES} ({low}), or every new file would be under the minimum",
    )
    _require(
        TARGET_FILE_SIZE_BYTES,
        target,
        target < high,
        f"< {MAX_FILE_SIZE_BYTES} ({high}), or every new file would be over the maximum",
    )


def _require(option: str, value: Any, ok: bool, expected: str) -> None:
    if not ok:
        raise InvalidRewriteOption(option, value, expected)
