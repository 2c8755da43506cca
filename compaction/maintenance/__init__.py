"""Table maintenance after a compaction run, one module per step, each switchable.

* :mod:`~compaction.maintenance.dangling_deletes`: delete files that apply to no live data file;
* :mod:`~compaction.maintenance.expire_snapshots`: snapshot retention that keeps what exactly-once ingest reads;
* :mod:`~compaction.maintenance.orphan_files`: files nothing references, past a safety window;
* :mod:`~compaction.maintenance.position_deletes_to_vectors`: an upgraded v3 table's position delete
  files folded into deletion vectors (run on demand: ``floe table rewrite-position-deletes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from compaction.maintenance.orphan_files import MIN_ORPHAN_AGE_MS

DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class MaintenanceOptions:
    """Which steps run after the rewrite, and their windows (defaults as the service's ``compaction`` configuration)."""

    remove_dangling_deletes: bool = True
    expire_snapshots: bool = True
    expire_older_than_ms: int = 5 * DAY_MS
    retain_last: int = 1
    remove_orphans: bool = True
    orphan_older_than_ms: int = 3 * DAY_MS

    def __post_init__(self) -> None:
        if self.expire_older_than_ms < 0 or self.retain_last < 1:
            raise ValueError(f"expiry needs expire_older_than_ms >= 0 and retain_last >= 1, got {self}")
        if self.orphan_older_than_ms < MIN_ORPHAN_AGE_MS:
            raise ValueError(f"orphan_older_than_ms must be at least {MIN_ORPHAN_AGE_MS} (a day), got {self}")
