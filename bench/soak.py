"""Soak: ``floe ingest`` (upsert and append tables, format v3) and ``floe compact`` for a given time, with
the faults of ``tests/faults`` injected at random, then every table checked in Floe and Iceberg Java.

Servers of its own, on loopback: a Kafka broker, PostgreSQL (the catalog), S3Proxy (the warehouse) and
Iceberg Java's Spark for the check. ``--tables`` upsert tables and one append table, one shared query
on Floe's source, ``--rate`` records a second into each table's topic, the append table's records into
one of its two partitions after the first minute (the other sits idle). The compactor compacts every
30 s and expires every snapshot it may. Every ``--fault-every`` seconds on average (exponential), one
fault, drawn at random:

* the broker SIGKILLed for 5 to 60 s, or frozen (SIGSTOP) for 30 to 90 s;
* a table's catalog row locked for 60 s; PostgreSQL shut down (fast) for 10 s;
* S3Proxy refusing writes for 60 s, or SIGKILLed for 30 s;
* ``floe ingest`` SIGKILLed and started again; stopped, its checkpoint deleted, and started again;
* ``floe compact`` SIGKILLed and another started.

After each fault clears, the time until every table has committed again is its recovery. At the end
the producers stop, every offset must be committed, and every table must hold exactly its records.
Printed: records, faults by kind, recoveries (median, worst), the longest gap between two commits of
a table (the worst freshness a reader saw), and the verdict.

    .venv/bin/python bench/soak.py [--minutes 30] [--rate 40] [--tables 3] [--fault-every 180]
        [--seed 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from service.local_kafka import LocalKafka  # noqa: E402
from tests.commit.test_catalog_oracles import use_jdbc_catalog  # noqa: E402
from tests.faults.rig import FLOE, FaultRig  # noqa: E402
from tests.ingest.e2e_support import REPO  # noqa: E402
from tests.support.iceberg_oracle import IcebergOracle  # noqa: E402
from tests.support.postgres import PostgresServer  # noqa: E402
from tests.support.s3proxy import S3Proxy, s3_file_io_properties  # noqa: E402

COMPACTION = {"interval": "30s", "jitter": "5s", "lease_ttl": "60s", "rewrite_options": {"min-input-files": "2"},
              "expire_snapshots": {"older_than": "1s", "retain_last": 1}}


@dataclass
class Soak:
    """The servers, the running Floe, and what happened."""

    rig: FaultRig
    kafka: LocalKafka
    postgres: PostgresServer
    catalog_uri: str
    s3: S3Proxy
    rng: random.Random
    compactor: subprocess.Popen | None = None
    compactors: int = 0
    faults: list[tuple[str, float]] = field(default_factory=list)  # kind, recovery seconds

    def start_compactor(self) -> None:
        self.compactors += 1
        log = self.rig.tmp / f"compact-{self.compactors}.log"
        with log.open("wb") as out:
            self.compactor = subprocess.Popen([*FLOE, "compact", "--config", str(self.rig.path)], cwd=REPO,
                                              stdout=out, stderr=subprocess.STDOUT, env=self.rig.env,
                                              start_new_session=True)

    # -- the faults: each injects, waits, clears --------------------------------------------------------

    def kafka_killed(self) -> str:
        seconds = self.rng.uniform(5, 60)
        self.kafka.kill()
        time.sleep(seconds)
        self.kafka.start()
        return f"broker killed {seconds:.0f}s"

    def kafka_frozen(self) -> str:
        seconds = self.rng.uniform(30, 90)  # the producers wait 120 s for a broker
        self.kafka.freeze()
        time.sleep(seconds)
        self.kafka.thaw()
        return f"broker frozen {seconds:.0f}s"

    def row_locked(self) -> str:
        table = self.rng.choice(self.rig.tables + self.rig.appends)
        with psycopg.connect(self.catalog_uri) as lock:
            lock.execute("SELECT 1 FROM iceberg_tables WHERE table_name = %s FOR UPDATE", (table.split(".")[1],))
            time.sleep(60)
            lock.rollback()
        return f"catalog row of {table} locked 60s"

    def postgres_down(self) -> str:
        self.postgres.halt()
        time.sleep(10)
        self.postgres.resume()
        return "PostgreSQL down 10s"

    def writes_refused(self) -> str:
        self.s3.restart({"s3proxy.read-only-blobstore": "true"})
        time.sleep(60)
        self.s3.restart()
        return "S3 writes refused 60s"

    def s3_killed(self) -> str:
        self.s3.kill()
        time.sleep(30)
        self.s3.restart()
        return "S3 killed 30s"

    def ingest_killed(self) -> str:
        self.rig.kill()
        self.rig.start()
        return "ingest SIGKILLed"

    def checkpoint_lost(self) -> str:
        code = self.rig.stop()
        shutil.rmtree(self.rig.tmp / "checkpoints")
        self.rig.start()
        return f"checkpoint lost (stopped with exit {code})"

    def compactor_killed(self) -> str:
        assert self.compactor is not None
        os.killpg(self.compactor.pid, signal.SIGKILL)
        self.compactor.wait(60)
        self.start_compactor()
        return "compactor SIGKILLed"

    def inject(self) -> None:
        """One fault at random, then the wait until every table commits again."""
        kinds: list[Callable[[], str]] = [self.kafka_killed, self.kafka_frozen, self.row_locked, self.postgres_down,
                                          self.writes_refused, self.s3_killed, self.ingest_killed,
                                          self.checkpoint_lost, self.compactor_killed]
        fault = self.rng.choice(kinds)
        began = time.time()
        what = fault()
        cleared = time.time()
        for table in self.rig.tables + self.rig.appends:
            self.rig.wait_for(f"{table} after {what}", lambda t=table: self.rig.committed_since(t, cleared), 900)
        recovery = time.time() - cleared
        self.faults.append((fault.__name__, recovery))
        print(f"[{time.strftime('%H:%M:%S')}] {what}: every table committed again {recovery:.1f}s after "
              f"(fault began {cleared - began:.0f}s before it cleared)", flush=True)


def longest_gap(rig: FaultRig) -> tuple[float, str]:
    """The longest time between two consecutive commits of one table, and the table."""
    worst = (0.0, "")
    for table in rig.tables + rig.appends:
        times = sorted(c.at for c in rig.commits(table))
        for earlier, later in zip(times, times[1:]):
            worst = max(worst, (later - earlier, table))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=40, help="records a second into each table's topic")
    parser.add_argument("--tables", type=int, default=3, help="upsert tables (and one append table)")
    parser.add_argument("--fault-every", type=float, default=180.0, help="mean seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="work directory to keep (default: a temporary one, removed)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="floe-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    events = int(args.rate * args.minutes * 60 * 1.5) + 10_000
    with LocalKafka(work / "kafka") as kafka, PostgresServer() as postgres, S3Proxy(work / "s3") as s3:
        catalog_uri = postgres.create_database("floe")
        bucket = s3.create_bucket("soak")
        env = {**os.environ, **s3.environment()}
        os.environ.update(s3.environment())
        catalog = {"uri": catalog_uri, "warehouse": f"{bucket}/wh", "name": "soak"}
        oracle = IcebergOracle(work / "oracle").start()
        try:
            with FaultRig(work, kafka.bootstrap, catalog, tables=args.tables, appends=1,
                          table={"format_version": 3}, env=env, extra={"compaction": COMPACTION},
                          rate=args.rate, events=events) as rig:
                soak = Soak(rig, kafka, postgres, catalog_uri, s3, rng)
                run(soak, args)
                use_jdbc_catalog(oracle, "soak", catalog_uri, work / "warehouse", **s3_file_io_properties(s3),
                                 **{"cache-enabled": "false"})
                rig.finish(lambda loaded: oracle.sql(f"SELECT * FROM soak.{table_name(loaded)}"))
                report(soak, args)
                if soak.compactor is not None:
                    soak.compactor.send_signal(signal.SIGTERM)
                    soak.compactor.wait(120)
        finally:
            oracle.stop()
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


def run(soak: Soak, args: argparse.Namespace) -> None:
    rig = soak.rig
    rig.wait_for("every table committing", lambda: all(rig.commits(t) for t in rig.tables + rig.appends), 300)
    time.sleep(60)
    rig.producers["db.a0"].one_partition.set()  # type: ignore[attr-defined]
    soak.start_compactor()
    end = time.monotonic() + args.minutes * 60
    while True:
        pause = soak.rng.expovariate(1 / args.fault_every)
        if time.monotonic() + pause >= end:
            break
        time.sleep(pause)
        assert rig.running().poll() is None, rig.tail()
        soak.inject()
    time.sleep(max(0.0, end - time.monotonic()))


def table_name(loaded) -> str:  # type: ignore[no-untyped-def]
    return ".".join(loaded.metadata.location.rstrip("/").split("/")[-2:])


def report(soak: Soak, args: argparse.Namespace) -> None:
    rig = soak.rig
    records = sum(len(p.delivered) for p in rig.producers.values())
    recoveries = [seconds for _, seconds in soak.faults]
    gap, table = longest_gap(rig)
    print(f"\nsoak: {args.minutes:.0f} min, {len(rig.topic)} tables, {args.rate} records/s per table, seed {args.seed}")
    print(f"records produced and landed exactly once (Floe and Iceberg Java): {records}")
    print(f"faults injected: {len(soak.faults)}: {dict(Counter(kind for kind, _ in soak.faults))}")
    if recoveries:
        print(f"recovered (every table committing again after the fault cleared): median "
              f"{statistics.median(recoveries):.1f}s, worst {max(recoveries):.1f}s")
    print(f"longest gap between two commits of a table: {gap:.1f}s ({table})")
    print(f"ingest runs: {rig.runs}, compactors: {soak.compactors}")


if __name__ == "__main__":
    main()
