"""The ``compaction`` section: the sidecar compactor's schedule, file rewrites and table maintenance.

Rewrite options are Iceberg's own names, checked here because Iceberg would
otherwise ignore a misspelt one and compact with its defaults.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, model_validator

from service.config.fields import Duration, NonNegativeDuration, Properties, Section, format_duration
from service.config.problems import invalid, raise_all, render_path
from service.config.spark import SparkConfig

# Iceberg's rewrite_data_files options (RewriteDataFiles, SizeBasedFileRewriter), by value kind.
_REWRITE_OPTIONS = {
    "target-file-size-bytes": "int",
    "min-file-size-bytes": "int",
    "max-file-size-bytes": "int",
    "min-input-files": "int",
    "max-file-group-size-bytes": "int",
    "max-concurrent-file-group-rewrites": "int",
    "delete-file-threshold": "int",
    "delete-ratio-threshold": "float",
    "rewrite-all": "bool",
    "use-starting-sequence-number": "bool",
    "rewrite-job-order": "none|bytes-asc|bytes-desc|files-asc|files-desc",
}
_REWRITE_ELSEWHERE = {
    "partial-progress.enabled": "compaction.partial_progress.enabled",
    "partial-progress.max-commits": "compaction.partial_progress.max_commits",
    "remove-dangling-deletes": "compaction.remove_dangling_deletes",
}


def _rewrite_option_problem(key: str, value: str) -> str | None:
    if key in _REWRITE_ELSEWHERE:
        return f"set by {_REWRITE_ELSEWHERE[key]}, not in rewrite_options"
    kind = _REWRITE_OPTIONS.get(key)
    if kind is None:
        return f"unknown rewrite option (expected one of: {', '.join(sorted(_REWRITE_OPTIONS))})"
    if kind == "int" and not re.fullmatch(r"\d+", value):
        return f"expected a non-negative integer, got {value!r}"
    if kind == "float" and not re.fullmatch(r"\d+(\.\d+)?", value):
        return f"expected a number, got {value!r}"
    if kind == "bool" and value not in ("true", "false"):
        return f"expected true or false, got {value!r}"
    if "|" in kind and value not in kind.split("|"):
        return f"expected one of {', '.join(kind.split('|'))}, got {value!r}"
    return None


class PartialProgressConfig(Section):
    """Commit file groups as they finish, so one failing group does not lose a whole run."""

    enabled: bool = Field(True, description="Commit finished file groups during the run.")
    max_commits: int = Field(10, gt=0, description="Most commits one run may make.")


class ExpireSnapshotsConfig(Section):
    """Snapshot expiry after each compaction run."""

    enabled: bool = Field(True, description="Expire old snapshots.")
    older_than: Duration = Field(timedelta(days=5), description="Expire snapshots older than this.")
    retain_last: int = Field(1, gt=0, description="Always keep at least this many snapshots.")


_ORPHAN_MINIMUM = timedelta(days=1)


class RemoveOrphansConfig(Section):
    """Deletion of files that no snapshot references (failed writes)."""

    enabled: bool = Field(
        True,
        description=(
            "Remove orphan files under the table location (a `write.data.path` or `write.metadata.path` "
            "outside it may be shared, and is not listed)."
        ),
    )
    older_than: Duration = Field(
        timedelta(days=3),
        description="Safety window: only files older than this are removed "
        "(at least 1d, so in-flight writes are never deleted).",
    )

    @model_validator(mode="after")
    def _safe_window(self) -> RemoveOrphansConfig:
        if self.older_than < _ORPHAN_MINIMUM:
            raise invalid(
                (
                    "older_than",
                    "must be at least 1d, so that files of in-flight commits survive, "
                    f"got {format_duration(self.older_than)!r}",
                )
            )
        return self


class CompactionConfig(Section):
    """The sidecar compactor: rewrite small files, then table maintenance."""

    interval: Duration = Field(timedelta(hours=1), description="Time between compaction runs of a table.")
    jitter: NonNegativeDuration = Field(
        timedelta(minutes=5), description="Random extra delay per run, so replicas and tables do not run in lockstep."
    )
    executor: Literal["in-process", "spark"] = Field(
        "in-process",
        description="Where file groups are rewritten: `in-process`, one after another in the compactor "
        "(smallest footprint), or `spark`, as tasks of a Spark session (the `spark` section, or "
        "`compaction.spark`), up to `max-concurrent-file-group-rewrites` at a time.",
    )
    spark: SparkConfig | None = Field(
        None,
        description="The compactor's own Spark session settings, replacing the top-level `spark` "
        "section for `floe compact` (e.g. local mode beside an ingest on a cluster).",
    )
    rewrite_options: Properties = Field(
        default_factory=dict,
        description="Iceberg `rewrite_data_files` options, e.g. `target-file-size-bytes`, `min-input-files`.",
    )
    partial_progress: PartialProgressConfig = Field(
        default_factory=PartialProgressConfig, description="Partial-progress commits."
    )
    remove_dangling_deletes: bool = Field(True, description="Drop delete files that no longer apply to any data file.")
    expire_snapshots: ExpireSnapshotsConfig = Field(
        default_factory=ExpireSnapshotsConfig, description="Snapshot expiry."
    )
    remove_orphans: RemoveOrphansConfig = Field(default_factory=RemoveOrphansConfig, description="Orphan file removal.")
    lease_ttl: Duration = Field(
        timedelta(minutes=10),
        description="How long a table's compaction lease lasts unrenewed (a run renews it every third of this): "
        "a compactor that dies mid-run holds its tables this long, then another replica takes them over.",
    )

    @model_validator(mode="after")
    def _coherent(self) -> CompactionConfig:
        problems = [
            (render_path(("rewrite_options", key)), problem)
            for key, value in self.rewrite_options.items()
            if (problem := _rewrite_option_problem(key, value)) is not None
        ]
        if self.jitter >= self.interval:
            problems.append(
                (
                    "jitter",
                    f"must be shorter than interval ({format_duration(self.interval)}), "
                    f"got {format_duration(self.jitter)!r}",
                )
            )
        raise_all(problems)
        return self
