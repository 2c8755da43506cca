"""Spark's Python workers: a per-task cost that Floe's tasks switch off.

Before every task, a Python worker calls ``importlib.invalidate_caches()``
(``pyspark.worker_util.setup_spark_files``). On Python 3.11 that makes every
``zipimporter`` re-read the whole directory of its archive, and a worker's
``sys.path`` holds three archives, put there by Spark: ``pyspark.zip`` (1,328
entries), py4j's zip and spark-core's jar. There is one importer per package
imported from them, 16 in a Floe task, so the same directories are read again
and again.

It is paid in each Python worker of the task, and a task of Floe's Kafka
source has two: the source's reader and the Arrow map. That was more than the
whole work of a small task (docs/performance.md).

An archive's directory can only be stale if the archive changed on disk.
:func:`skip_unchanged_archive_rereads` makes each importer re-read only then,
when its size or modification time differs from its last read. The patch is
per process and idempotent, and costs one ``stat`` per importer per task.
Where Python already re-reads lazily, the original method still runs whenever
an archive changes.
"""

from __future__ import annotations

import os
import zipimport
from collections.abc import Callable
from typing import Any

_ORIGINAL: Callable[[Any], None] = zipimport.zipimporter.invalidate_caches
_STAMP = "_floe_archive_stamp"


def skip_unchanged_archive_rereads() -> None:
    """Let zip importers skip the re-read when their archive is unchanged (once per process)."""
    if zipimport.zipimporter.invalidate_caches is not _invalidate_if_changed:
        zipimport.zipimporter.invalidate_caches = _invalidate_if_changed  # type: ignore[method-assign,assignment]  # patched once per process, on purpose


def _invalidate_if_changed(importer: Any) -> None:
    stamp = archive_stamp(importer.archive)
    if stamp is None or getattr(importer, _STAMP, None) != stamp:
        _ORIGINAL(importer)
        setattr(importer, _STAMP, stamp)


def archive_stamp(path: str) -> tuple[int, int] | None:
    """(modification time in ns, size) of the archive, or None when it cannot be read."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_mtime_ns, status.st_size
