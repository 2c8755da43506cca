"""Benchmark: what many tables cost `floe ingest`, one shared query against one query per table.

In one run, on one local Kafka broker: for each table count N, ``floe ingest``
(a process of its own, Spark in local mode, a SQLite catalog) lands N append
tables of 5 JSON columns, one one-partition topic each, while a producer in
this process writes ``--rate`` records a second in all, spread evenly over the
N topics. After ``--warm-up`` seconds, ``--seconds`` are measured:

* CPU per record: CPU seconds of the whole process tree (driver, JVM, Python
  workers) over the window, divided by the records produced in it;
* peak RSS of the process tree (sampled every 0.5 s), over the whole run;
* start-up: from the process start to its last "started (id" line;
* snapshots per table per minute, in the window;
* freshness p99 per table: per record produced in the window, the commit time
  of the snapshot holding it (its summary's offset range) minus its Kafka
  timestamp; the worst table's p99, and the median table's.

Modes: ``shared`` (``ingest.query: shared``, Floe's source), ``shared-upsert`` (the same with upsert
tables keyed by ``id``, every record a new key), ``per-table``
(one query per table on Floe's source) and ``spark`` (one query per table on
Spark's Kafka source); the last two only up to ``--per-table-max`` tables.
Every row uses the same configuration apart from the mode; ``--commit-interval``
(e.g. ``30s``) sets every table's ``commit_interval`` in the shared rows (a
query per table commits every batch: it has no commit interval).

    .venv/bin/python bench/many_tables.py [--tables 1,10,30,100,300] [--modes shared,shared-upsert,per-table,spark]
        [--upsert-tables 100] [--rate 2000] [--trigger 5s] [--seconds 60] [--warm-up 20] [--per-table-max 30]
        [--commit-interval 30s] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from commit.catalog.sql.catalog import SqlCatalog  # noqa: E402
from commit.exactly_once import committed_batch  # noqa: E402
from service.local_kafka import LocalKafka  # noqa: E402

COLUMNS = [
    {"name": "id", "type": "long", "required": True},
    {"name": "name", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "event_ts", "type": "timestamptz"},
    {"name": "version", "type": "long"},
]
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for start in range(0, len(names), 100):
        chunk = names[start : start + 100]
        futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in chunk])
        for future in futures.values():
            future.result(timeout=60)
    deadline = time.monotonic() + 60
    while not set(names) <= set(admin.list_topics(timeout=30).topics):  # created is not yet listed everywhere
        if time.monotonic() > deadline:
            raise SystemExit(f"topics not listed 60 s after their creation: {len(names)} asked")
        time.sleep(0.2)


class PacedProducer(threading.Thread):
    """``rate`` records a second over ``topics`` in turn; keeps each record's Kafka timestamp by offset."""

    def __init__(self, bootstrap: str, topics: list[str], rate: int) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
        self._topics = topics
        self._rate = rate
        self.stop = threading.Event()
        self.times: dict[str, dict[int, float]] = {t: {} for t in topics}  # topic -> offset -> seconds
        self.errors: list[str] = []

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.times[msg.topic()][msg.offset()] = msg.timestamp()[1] / 1000

    def run(self) -> None:
        started, sent = time.monotonic(), 0
        while not self.stop.is_set():
            due = int((time.monotonic() - started) * self._rate)
            while sent < due:
                topic = self._topics[sent % len(self._topics)]
                value = {"id": sent, "name": f"n{sent}", "amount": sent / 4, "event_ts": "2026-01-01T00:00:00Z",
                         "version": 1}
                self._producer.produce(topic, json.dumps(value).encode(), str(sent).encode(),
                                       on_delivery=self._delivered)
                sent += 1
            self._producer.poll(0)
            time.sleep(0.01)
        self._producer.flush(60)


class TreeSampler(threading.Thread):
    """CPU seconds and RSS of a process group, every ``every_s``."""

    def __init__(self, group: int, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self._group = group
        self._every = every_s
        self.stop = threading.Event()
        self.peak_rss = 0
        self.cpu_s = 0.0
        self.by_kind: dict[str, float] = {}  # process kind -> its CPU seconds so far
        self._lock = threading.Lock()

    def cpu_now(self) -> float:
        with self._lock:
            return self.cpu_s

    def kinds_now(self) -> dict[str, float]:
        with self._lock:
            return dict(self.by_kind)

    def run(self) -> None:
        seen: dict[int, float] = {}  # pid -> its latest CPU seconds (ended processes keep their last)
        kinds: dict[int, str] = {}
        while not self.stop.wait(self._every):
            rss = 0
            for pid in self._members():
                stat = _stat(pid)
                if stat is None:
                    continue
                cpu, pages = stat
                seen[pid] = cpu
                if kinds.get(pid, "other") != "jvm":  # spark-submit's launcher becomes the JVM: ask until it has
                    kinds[pid] = _kind(pid)
                rss += pages * PAGE
            with self._lock:
                self.cpu_s = sum(seen.values())
                self.by_kind = {}
                for pid, cpu in seen.items():
                    self.by_kind[kinds[pid]] = self.by_kind.get(kinds[pid], 0.0) + cpu
            self.peak_rss = max(self.peak_rss, rss)

    def _members(self) -> list[int]:
        members = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self._group:
                        members.append(int(entry.name))
                except ProcessLookupError:
                    continue
        return members


def _kind(pid: int) -> str:
    """Which part of ``floe ingest`` a process is: the Spark JVM, the driver, or Python workers."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError):
        return "other"
    if argv and argv[0].endswith(b"java"):
        return "jvm"
    if b"service.cli" in argv:
        return "driver"
    return "workers" if any(a.startswith(b"pyspark") for a in argv) else "other"


def _stat(pid: int) -> tuple[float, int] | None:
    """(utime + stime in seconds, resident pages) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, int(fields[21])


def write_config(
    work: Path, bootstrap: str, topics: list[str], mode: str, trigger: str, commit_interval: str | None
) -> Path:
    tables: list[dict[str, Any]] = [
        {"identifier": f"db.t{i:03d}", "topics": [t], "schema": COLUMNS} for i, t in enumerate(topics)
    ]
    if mode == "shared-upsert":  # every record a new key: an upsert's whole path (key index, its own plan)
        for table in tables:
            table.update(mode="upsert", key=["id"])
    if commit_interval is not None and mode.startswith("shared"):  # a query per table commits every batch
        for table in tables:
            table["commit_interval"] = commit_interval
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "reader": "spark" if mode == "spark" else "python"},
        "catalog": {"uri": f"sqlite:///{work / 'catalog.db'}", "warehouse": str(work / "warehouse")},
        "checkpoint_location": str(work / "checkpoints"),
        "trigger": {"processing_time": trigger},
        "readiness": {"max_commit_age": "10m"},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "ingest": {"query": "shared" if mode.startswith("shared") else "per-table", "commit_threads": 8},
        "log_format": "json",
        "tables": tables,
    }
    path = work / "floe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def one_row(bootstrap: str, n: int, mode: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"{mode}-{n}-", dir=root))
    topics = [f"mt-{work.name}-{i:03d}" for i in range(n)]
    create_topics(bootstrap, topics)
    config = write_config(work, bootstrap, topics, mode, args.trigger, args.commit_interval)
    log = work / "floe.log"
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "ingest", "--config", str(config)], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    sampler = TreeSampler(proc.pid)
    sampler.start()
    queries = 1 if mode.startswith("shared") else n
    while _started(log) < queries:
        if proc.poll() is not None:
            raise SystemExit(f"{mode} {n}: floe ingest ended: {log.read_text()[-3000:]}")
        time.sleep(0.2)
    start_up = time.monotonic() - started
    producer = PacedProducer(bootstrap, topics, args.rate)
    producer.start()
    time.sleep(args.warm_up)
    window_start, cpu_start, kinds_start = time.time(), sampler.cpu_now(), sampler.kinds_now()
    time.sleep(args.seconds)
    window_end, cpu_end, kinds_end = time.time(), sampler.cpu_now(), sampler.kinds_now()
    producer.stop.set()
    producer.join()
    settle = _seconds(args.commit_interval or "0s") + _seconds(args.trigger) * 2 + 5
    time.sleep(settle)  # the window's last records commit
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=300)
    sampler.stop.set()
    sampler.join()
    produced = sum(1 for times in producer.times.values() for t in times.values() if window_start <= t < window_end)
    fresh, snapshots = freshness(work, n, topics, producer.times, window_start, window_end)
    return {
        "mode": mode,
        "tables": n,
        "cpu_us_per_record": (cpu_end - cpu_start) / max(produced, 1) * 1e6,
        "cpu_cores": (cpu_end - cpu_start) / (window_end - window_start),
        "cpu_cores_by_process": {
            kind: round((cpu - kinds_start.get(kind, 0.0)) / (window_end - window_start), 3)
            for kind, cpu in sorted(kinds_end.items())
        },
        "peak_rss_gb": sampler.peak_rss / 1e9,
        "start_up_s": start_up,
        "snapshots_per_table_min": snapshots,
        "freshness_p99_worst_s": max(fresh) if fresh else float("nan"),
        "freshness_p99_median_s": statistics.median(fresh) if fresh else float("nan"),
        "records": produced,
        "producer_errors": len(producer.errors),
    }


def _started(log: Path) -> int:
    return log.read_text(errors="replace").count("started (id")


def _seconds(duration: str) -> float:
    return float(duration.rstrip("s"))


def freshness(
    work: Path, n: int, topics: list[str], times: dict[str, dict[int, float]], start: float, end: float
) -> tuple[list[float], float]:
    """Each table's freshness p99 over the window's records, and the mean snapshots per table per minute."""
    p99s, counts = [], []
    with SqlCatalog(f"sqlite:///{work / 'catalog.db'}", str(work / "warehouse")) as catalog:
        for i, topic in enumerate(topics):
            metadata = catalog.load_table(f"db.t{i:03d}").metadata
            lags, snapshots = [], 0
            for snapshot in metadata.snapshots:
                committed_s = snapshot.timestamp_ms / 1000
                if start <= committed_s < end + 60:
                    snapshots += start <= committed_s < end
                batch = committed_batch(snapshot)
                for _partition, (low, high) in (batch.offsets.get(topic, {}) if batch else {}).items():
                    for offset in range(low, high):
                        produced = times[topic].get(offset)
                        if produced is not None and start <= produced < end:
                            lags.append(committed_s - produced)
            if lags:
                p99s.append(statistics.quantiles(lags, n=100)[98] if len(lags) > 1 else lags[0])
            counts.append(snapshots)
    return p99s, statistics.mean(counts) / ((end - start) / 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="1,10,30,100,300")
    parser.add_argument("--modes", default="shared,shared-upsert,per-table,spark")
    parser.add_argument("--upsert-tables", default="100", help="the table counts of the shared-upsert rows")
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--trigger", default="5s")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warm-up", type=float, default=20)
    parser.add_argument("--per-table-max", type=int, default=30)
    parser.add_argument("--commit-interval", default=None, help="tables[].commit_interval of the shared rows")
    parser.add_argument("--keep", type=Path, default=None, help="keep each row's floe.yaml, log and tables here")
    args = parser.parse_args()
    counts = [int(c) for c in args.tables.split(",")]
    upsert_counts = [int(c) for c in args.upsert_tables.split(",")]
    modes = args.modes.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="floe-many-tables-") as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        root.mkdir(parents=True, exist_ok=True)
        with LocalKafka(root / "kafka", heap="1g") as kafka:
            assert kafka.bootstrap is not None
            for mode in modes:
                for n in upsert_counts if mode == "shared-upsert" else counts:
                    if not mode.startswith("shared") and n > args.per_table_max:
                        continue
                    row = one_row(kafka.bootstrap, n, mode, args, root)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    report(rows)


def report(rows: list[dict[str, Any]]) -> None:
    base = {r["mode"]: r for r in rows if r["tables"] == min(x["tables"] for x in rows if x["mode"] == r["mode"])}
    if "shared" in base:  # upserts are compared with the single append table, as the targets are
        base["shared-upsert"] = base["shared"]
    print()
    print("| mode | tables | CPU/record (µs) | × 1 table | cores | peak RSS (GB) | start-up (s) | snapshots/table/min "
          "| freshness p99, worst table (s) | median table (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        ratio = r["cpu_us_per_record"] / base[r["mode"]]["cpu_us_per_record"]
        print(f"| {r['mode']} | {r['tables']} | {r['cpu_us_per_record']:.0f} | {ratio:.2f} | {r['cpu_cores']:.2f} "
              f"| {r['peak_rss_gb']:.2f} | {r['start_up_s']:.0f} | {r['snapshots_per_table_min']:.1f} "
              f"| {r['freshness_p99_worst_s']:.1f} | {r['freshness_p99_median_s']:.1f} |")


if __name__ == "__main__":
    main()
