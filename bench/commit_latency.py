"""Benchmark: commit latency as a table grows (``commit_batch``, the ingest path).

Each commit is one streaming batch of ``--files-per-commit`` data files
(default 10), committed by ``commit.batch_commit.commit_batch`` to a SQLite
catalog on local disk, ``--commits`` times per configuration. Latency is the
wall time of the whole commit: refresh, exactly-once check, manifests,
manifest list, metadata file, compare-and-swap. The data files are written
once (tiny, real Parquet with real metrics); each commit reuses their
``DataFile`` records under new paths, since a commit never reads data files.

Without expiry a commit costs time linear in the number of snapshots (the
metadata file holds them all), so a run costs quadratic time: the default of
2,000 commits (20,000 data files) per configuration finishes in about 7
minutes on two cores; ``--commits 10000`` grows the table to 10,000
snapshots and 100,000 data files (about 1.5 hours).

Configurations, run one after another in the same process:

* ``merge``: manifest merging on (Iceberg's defaults: min 100 manifests, 8 MiB);
* ``no-merge``: ``commit.manifest-merge.enabled=false`` (one new manifest per commit);
* ``merge+expire``: merging, and ``ExpireSnapshots`` keeping the last
  ``--retain`` snapshots every ``--expire-every`` commits (timed apart).

Metadata files that leave the metadata log are deleted after each commit,
outside the timing, as ``write.metadata.delete-after-commit.enabled`` would
(otherwise 10,000 multi-MB metadata files fill the disk).

    .venv/bin/python bench/commit_latency.py [--commits 2000] [--window 1000] [--only merge+expire]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.orders import ORDERS  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.batch_commit import commit_batch  # noqa: E402
from commit.operations.expire_snapshots import ExpireSnapshots  # noqa: E402
from table.arrow_schema import cast_to_schema  # noqa: E402
from table.io import FileIO  # noqa: E402
from table.manifest import DataFile  # noqa: E402
from table.parquet.partitioned import write_partitioned  # noqa: E402
from table.partitioning import build_partition_spec  # noqa: E402

SCHEMA = ORDERS
PARTITION = [("identity", "status")]
STATUSES = ("new", "paid", "packed", "shipped", "cancelled")
TOPIC = "orders"


@dataclass(frozen=True)
class Config:
    name: str
    properties: dict[str, str]
    expire_every: Optional[int] = None


@dataclass
class Run:
    config: Config
    latencies_ms: list[float] = field(default_factory=list)
    expiry_ms: list[tuple[int, float]] = field(default_factory=list)  # (after commit n, ms)
    retries: int = 0
    seconds: float = 0.0


def template_files(io: FileIO, location: str, files: int) -> list[DataFile]:
    """``files`` tiny data files, one per status in turn, written for real (for their metrics)."""
    spec = build_partition_spec(SCHEMA, PARTITION)
    written: list[DataFile] = []
    for i in range(files):
        n = 20
        rows = pa.table({
            "id": pa.array(range(i * n, (i + 1) * n), pa.int64()),
            "customer": [f"customer-{j:05d}" for j in range(n)],
            "event_ts": pa.array([1_767_225_600_000_000 + j for j in range(n)], pa.timestamp("us", tz="UTC")),
            "status": [STATUSES[i % len(STATUSES)]] * n,
        })
        written += write_partitioned(io, location, SCHEMA, spec, [cast_to_schema(rows, SCHEMA)])
    return written


def batch_files(templates: list[DataFile], location: str, commit: int) -> list[DataFile]:
    """The templates' records under paths no other commit uses."""
    return [
        replace(t, file_path=f"{location}/data/status={STATUSES[i % len(STATUSES)]}/b{commit:06d}-{i:02d}.parquet")
        for i, t in enumerate(templates)
    ]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class MetadataCleaner:
    """Deletes metadata files once ``write.metadata.previous-versions-max`` (100) newer ones
    exist, as ``write.metadata.delete-after-commit.enabled`` would; only reads the pointer."""

    def __init__(self, catalog: Catalog, io: FileIO, first: str, keep: int = 100) -> None:
        self.catalog, self.io, self.keep = catalog, io, keep
        self.versions: deque[str] = deque([first])

    def after_commit(self) -> None:
        self.versions.append(self.catalog.load_pointer("bench.events").metadata_location)
        while len(self.versions) > self.keep + 1:
            self.io.delete(self.versions.popleft())


def run_config(config: Config, work: Path, commits: int, files_per_commit: int, retain: int,
               report: Callable[[Run, int], None], window: int) -> Run:
    root = work / config.name
    with SqlCatalog(f"sqlite:///{root / 'catalog.db'}", str(root / "warehouse")) as catalog:
        catalog.create_namespace("bench")
        spec = build_partition_spec(SCHEMA, PARTITION)
        loaded = catalog.create_table("bench.events", SCHEMA, spec, properties=config.properties)
        io = FileIO.for_location(loaded.metadata_location)
        location = loaded.metadata.location
        templates = template_files(io, location, files_per_commit)
        run = Run(config)
        cleaner = MetadataCleaner(catalog, io, loaded.metadata_location)
        started = time.perf_counter()
        for n in range(commits):
            files = batch_files(templates, location, n)
            t0 = time.perf_counter()
            result = commit_batch(catalog, "bench.events", "bench-query", n, {TOPIC: {0: (n * 100, n * 100 + 100)}}, files)
            run.latencies_ms.append((time.perf_counter() - t0) * 1000)
            run.retries += result.attempts - 1
            cleaner.after_commit()
            if config.expire_every and (n + 1) % config.expire_every == 0:
                t0 = time.perf_counter()
                ExpireSnapshots(catalog, "bench.events", older_than_ms=int(time.time() * 1000), retain_last=retain).commit()
                run.expiry_ms.append((n + 1, (time.perf_counter() - t0) * 1000))
                cleaner.after_commit()
            if (n + 1) % window == 0 or n + 1 == commits:
                report(run, n + 1)
        run.seconds = time.perf_counter() - started
        return run


def print_window(run: Run, done: int, window: int) -> None:
    start = ((done - 1) // window) * window
    part = run.latencies_ms[start:done]
    expiries = [ms for after, ms in run.expiry_ms if start < after <= done]
    expiry = f"  expiry max {max(expiries):7.0f} ms ({len(expiries)}x)" if expiries else ""
    print(f"{run.config.name:>13}  commits {start + 1:>6}-{done:<6}  p50 {percentile(part, 0.5):7.1f} ms  "
          f"p99 {percentile(part, 0.99):7.1f} ms  max {max(part):7.1f} ms{expiry}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=2_000, help="commits (snapshots) per configuration")
    parser.add_argument("--files-per-commit", type=int, default=10)
    parser.add_argument("--window", type=int, default=1000, help="commits per reported p50/p99 window")
    parser.add_argument("--expire-every", type=int, default=500)
    parser.add_argument("--retain", type=int, default=100, help="snapshots kept by each expiry")
    parser.add_argument("--only", choices=["merge", "no-merge", "merge+expire"], action="append")
    args = parser.parse_args()

    configs = [
        Config("merge", {"commit.manifest-merge.enabled": "true"}),
        Config("no-merge", {"commit.manifest-merge.enabled": "false"}),
        Config("merge+expire", {"commit.manifest-merge.enabled": "true"}, expire_every=args.expire_every),
    ]
    configs = [c for c in configs if not args.only or c.name in args.only]
    print(f"{args.commits} commits x {args.files_per_commit} data files per configuration; "
          f"window {args.window}; expiry every {args.expire_every} keeping {args.retain}", flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="floe-commit-bench-") as tmp:
        for config in configs:
            runs.append(run_config(config, Path(tmp), args.commits, args.files_per_commit, args.retain,
                                   lambda run, done: print_window(run, done, args.window), args.window))
    print()
    for run in runs:
        lat = run.latencies_ms
        print(f"{run.config.name:>13}  all {len(lat)} commits: p50 {percentile(lat, 0.5):.1f} ms  "
              f"p99 {percentile(lat, 0.99):.1f} ms  total {run.seconds:.0f} s  retries {run.retries}"
              + (f"  expiries {len(run.expiry_ms)} (p50 {statistics.median(ms for _, ms in run.expiry_ms):.0f} ms)"
                 if run.expiry_ms else ""))


if __name__ == "__main__":
    main()
