"""Benchmark: Floe's main job on both Kafka sources against Iceberg's own Spark sink and the ceilings.

In one run, on one local Kafka broker and Spark in local mode, every contender
``--repeat`` times, interleaved round by round (this machine is shared and noisy):

* **Floe append** and **Floe upsert** (75% inserts, 20% updates, 5% deletes),
  each on Spark's Kafka source and on Floe's own (``kafka.reader: python``,
  whose tasks read, decode and write without the JVM): ``N`` JSON events of
  about 250 bytes, drained with an AvailableNow trigger. Reported: records per
  second from query start to the last commit, and the rate inside batches
  (Spark's ``triggerExecution`` summed). Upserts are written by their decode
  tasks (the direct upsert, :mod:`ingest.tasks.direct`); **the upsert before** it,
  on Spark's source with each key's last change chosen after an exchange by
  key (``floe.upsert.direct-write-max-records`` 0), is the upsert target's
  reference.
* **Floe append in the registry's formats**, on Floe's source: the same rows as Confluent-framed Avro and
  Protobuf (``bench/formats.py``, confluent-kafka's own serializers against the tests' schema registry),
  beside JSON (issue 33).
* **Iceberg's Spark sink** (append): the same records, parsed with Spark's
  ``from_json`` and written by ``writeStream.format("iceberg")``, in a separate
  Spark process whose classpath has the spark-kafka and iceberg-oracle jar
  sets (Floe's own runtime never mixes them).
* **Spark's Kafka source into the no-op sink**, nothing parsed: how fast
  records leave Kafka through the JVM.
* **The Python ceiling**: one process running the Python source's task code
  (confluent-kafka) over every partition, plus Floe's decode.
* **Parquet ceiling**: ``pyarrow.parquet.write_table`` of the already decoded
  records (and, for reference, Floe's decode alone, one core).
* **Freshness**, on both sources: a producer at ``--rate``, Floe append with a
  1 s processing-time trigger; per record, the commit time of the snapshot
  that holds it (its summary's offset ranges) minus its Kafka timestamp: p50,
  p99. Records of the first 15 s are produced but not counted: the steady
  state is measured, not the first batch, which starts the Python workers.

Targets (issue 17): Floe append on the Python source at least 2x Iceberg's
sink; Floe upsert on it at least 1.5x the upsert before (Spark's source, exchange);
freshness p99 at most 2 s at 10,000 records/s.

    .venv/bin/python bench/ingest.py [--events 1000000] [--rate 10000] [--fresh-seconds 60] [--repeat 2]

With ``--spark-master spark://host:port`` (or ``standalone``: a master and
two one-core workers started here on loopback, from pyspark's own jars) the
run compares instead Floe append and upsert on that cluster with local mode
(``local[2]``), interleaved ``--repeat`` times, each in a child process of
its own. On one 2-core machine the cluster shows that the work is spread over
both workers, not a speed-up; the per-core rates estimate a bigger cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.formats import framed  # noqa: E402
from bench.orders import ORDERS  # noqa: E402
from tests.support.schema_registry import SchemaRegistry  # noqa: E402
from commit.catalog.base import Catalog
from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_batch  # noqa: E402
from ingest.tasks.changes import OpField  # noqa: E402
from ingest.tasks.decode_records import INTERNAL_FIELDS, DecodeSpec, decode_records  # noqa: E402
from ingest.tasks.decoding import ConfluentFormat, JsonFormat  # noqa: E402
from ingest.job import CatalogSpec, IngestJob, SourceSpec, TableSpec, TriggerSpec  # noqa: E402

SCHEMA = ORDERS
SPARK_DDL = "id bigint, customer string, amount double, event_ts timestamp, status string, note string"
STATUSES = ("new", "paid", "shipped", "cancelled")
SPARK_CONF = {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "4"}
MAX_OFFSETS = 250_000
FORMATS = ("avro", "protobuf")
"""The registry formats Floe append lands beside JSON, on Floe's source."""
WARM_UP_S = 15


# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------


def value(key: int, i: int, rng: random.Random, op: Optional[str] = None) -> bytes:
    row = {"id": key, "customer": f"customer-{rng.randrange(50_000):06d}", "amount": round(rng.uniform(0, 1000), 2),
           "event_ts": f"2026-01-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}+00:00",
           "status": STATUSES[i % 4], "note": "x" * rng.randrange(100, 140)}
    if op is not None:
        row = {"op": op, **row}
    return json.dumps(row, separators=(",", ":")).encode()


def append_events(n: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(1)
    return [(str(i).encode(), value(i, i, rng)) for i in range(n)]


def upsert_events(n: int) -> list[tuple[bytes, bytes]]:
    """75% inserts of new keys, 20% updates and 5% deletes of live keys."""
    rng = random.Random(2)
    alive: list[int] = []
    events = []
    next_key = 0
    for i in range(n):
        roll = rng.random()
        if alive and roll < 0.05:
            slot = rng.randrange(len(alive))
            key = alive[slot]
            alive[slot] = alive[-1]
            alive.pop()
            events.append((str(key).encode(), json.dumps({"op": "d", "id": key}).encode()))
        elif alive and roll < 0.25:
            key = alive[rng.randrange(len(alive))]
            events.append((str(key).encode(), value(key, i, rng, "u")))
        else:
            key, next_key = next_key, next_key + 1
            alive.append(key)
            events.append((str(key).encode(), value(key, i, rng, "c")))
    return events


def produce(bootstrap: str, topic: str, events: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000,
                         "compression.type": "lz4", "queue.buffering.max.messages": 500_000})
    for n, (key, val) in enumerate(events):
        while True:
            try:
                producer.produce(topic, key=key, value=val)
                break
            except BufferError:
                producer.poll(0.1)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def create_topic(bootstrap: str, name: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(30)
    return name


# ---------------------------------------------------------------------------
# Floe
# ---------------------------------------------------------------------------


def floe_job(bootstrap: str, topic: str, work: Path, mode: str, *, trigger: TriggerSpec,
             max_offsets: Optional[int] = MAX_OFFSETS, reader: str = "spark", tag: str = "",
             direct: bool = True, registry_url: Optional[str] = None) -> IngestJob:
    """Floe's job on ``topic``; ``direct`` False: upserts always take the exchange by key (the upsert
    before issue 17's direct upsert); ``registry_url``: values are Confluent-framed."""
    fmt = JsonFormat() if registry_url is None else ConfluentFormat(registry_url=registry_url)
    decode = DecodeSpec(SCHEMA, format=fmt, mode=mode,  # type: ignore[arg-type]
                        op_field=OpField() if mode == "upsert" else None)
    name = f"{topic.replace('-', '_')}{tag}"
    properties = {} if direct else {"floe.upsert.direct-write-max-records": "0"}
    return IngestJob(
        source=SourceSpec(bootstrap, topics=(topic,), max_offsets_per_trigger=max_offsets, reader=reader),
        table=TableSpec(f"bench.{mode}_{name}", decode, properties=properties),
        catalog=CatalogSpec(f"sqlite:///{work / 'catalog.db'}", str(work / "warehouse")),
        checkpoint_location=str(work / f"checkpoint-{topic}{tag}"),
        trigger=trigger,
    )


def run_floe(spark: Any, job: IngestJob, records: Optional[int] = None) -> dict[str, float]:
    """Floe's job drained; ``records``: the count to report when the progress counts ranges (Floe's source)."""
    from ingest.driver.stream import run_ingest

    started = time.monotonic()
    query = run_ingest(job, spark, lag_monitor=False)
    query.await_termination()
    wall = time.monotonic() - started
    figures = progress_figures(query.recent_progress, wall)
    if records is not None:
        figures["records"] = records
    return figures


def progress_figures(progress: list[dict], wall: float) -> dict[str, float]:
    batches = [p for p in progress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    in_batch = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return {"records": rows, "wall_s": wall, "batch_s": in_batch, "batches": len(batches)}


# ---------------------------------------------------------------------------
# Iceberg's own Spark sink, in a child process
# ---------------------------------------------------------------------------


def run_iceberg_sink(bootstrap: str, topic: str, work: Path) -> dict[str, float]:
    args = [sys.executable, __file__, "--iceberg-sink", bootstrap, topic, str(work)]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def iceberg_sink_child(bootstrap: str, topic: str, work: str) -> None:
    from pyspark.sql import SparkSession

    from runtime.jars import jar_paths
    from runtime.spark_session import local_spark_conf

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.appName("iceberg-sink-bench").config(
        "spark.jars", ",".join(jar_paths("spark-kafka") + jar_paths("iceberg-oracle")))
    conf = {**local_spark_conf(), **SPARK_CONF,
            "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            "spark.sql.catalog.bench": "org.apache.iceberg.spark.SparkCatalog",
            "spark.sql.catalog.bench.type": "hadoop",
            "spark.sql.catalog.bench.warehouse": f"{work}/iceberg-warehouse"}
    for key, val in conf.items():
        builder = builder.config(key, val)
    spark = builder.getOrCreate()
    sink_into(spark, bootstrap, "bench-warmup", "bench.db.warmup", f"{work}/iceberg-warmup-checkpoint")
    started = time.monotonic()
    query = sink_into(spark, bootstrap, topic, "bench.db.events", f"{work}/iceberg-checkpoint")
    figures = progress_figures(query.recentProgress, time.monotonic() - started)
    figures["rows_in_table"] = spark.table("bench.db.events").count()
    print(json.dumps(figures), flush=True)
    spark.stop()


def sink_into(spark: Any, bootstrap: str, topic: str, table: str, checkpoint: str) -> Any:
    """Drain ``topic`` into ``table`` with Iceberg's streaming sink; the finished query."""
    from pyspark.sql import functions as F

    spark.sql(f"CREATE TABLE {table} ({SPARK_DDL}) USING iceberg TBLPROPERTIES ('format-version'='2')")
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", MAX_OFFSETS).load())
    rows = source.select(F.from_json(F.col("value").cast("string"), SPARK_DDL).alias("r")).select("r.*")
    query = (rows.writeStream.format("iceberg").outputMode("append").trigger(availableNow=True)
             .option("checkpointLocation", checkpoint).toTable(table))
    query.awaitTermination()
    return query


# ---------------------------------------------------------------------------
# The ceiling: decode once, then a bare Parquet write
# ---------------------------------------------------------------------------


def ceiling(events: list[tuple[bytes, bytes]], work: Path) -> dict[str, float]:
    spec = DecodeSpec(SCHEMA)
    batches = []
    started = time.monotonic()
    for start in range(0, len(events), 10_000):
        chunk = events[start:start + 10_000]
        kafka = pa.record_batch({
            "key": pa.array([k for k, _ in chunk], pa.binary()), "value": pa.array([v for _, v in chunk], pa.binary()),
            "topic": pa.array(["t"] * len(chunk)), "partition": pa.array([0] * len(chunk), pa.int32()),
            "offset": pa.array(range(start, start + len(chunk)), pa.int64()),
            "timestamp": pa.array([0] * len(chunk), pa.timestamp("us", tz="UTC")),
        })
        rows = decode_records(kafka, spec).rows
        batches.append(rows.drop_columns([f.name for f in INTERNAL_FIELDS]))
    decode_s = time.monotonic() - started
    table = pa.Table.from_batches(batches)
    started = time.monotonic()
    pq.write_table(table, work / "ceiling.parquet", compression="zstd")
    return {"records": table.num_rows, "write_s": time.monotonic() - started, "decode_s": decode_s}


# ---------------------------------------------------------------------------
# Freshness
# ---------------------------------------------------------------------------


def freshness(spark: Any, bootstrap: str, work: Path, rate: int, seconds: float,
              reader: str = "spark") -> dict[str, float]:
    from confluent_kafka import Producer

    from ingest.driver.stream import run_ingest

    topic = create_topic(bootstrap, f"bench-fresh-{reader}", 2)
    job = floe_job(bootstrap, topic, work, "append", trigger=TriggerSpec(1.0), max_offsets=None, reader=reader)
    stop = threading.Event()
    query = run_ingest(job, spark, stop, lag_monitor=False)
    delivered: list[tuple[int, int, int]] = []  # partition, offset, Kafka timestamp (ms)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    rng = random.Random(3)
    # the first WARM_UP_S seconds of records are produced but not counted: the query's steady state, not
    # its start (the first batch starts the Python workers and the consumers), is what freshness measures
    started, sent, tick = time.monotonic(), 0, 0.01
    counted_from_ms = (time.time() + WARM_UP_S) * 1000
    while time.monotonic() - started < WARM_UP_S + seconds:
        due = int((time.monotonic() - started) * rate)
        for i in range(sent, due):
            producer.produce(topic, key=str(i).encode(), value=value(i, i, rng),
                             on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset(), msg.timestamp()[1])))
        sent = max(sent, due)
        producer.poll(0)
        time.sleep(tick)
    producer.flush(60)
    deadline = time.monotonic() + 120
    with SqlCatalog(job.catalog.uri, job.catalog.warehouse) as catalog:
        while time.monotonic() < deadline:
            metadata = catalog.load_table(job.table.identifier).metadata
            covered = sum(end - start for s in metadata.snapshots for r in committed_batch(s).offsets.values()  # type: ignore[union-attr]
                          for start, end in r.values())
            if covered >= len(delivered):
                break
            time.sleep(0.5)
    stop.set()
    query.await_termination(120)
    commits = []
    for snapshot in metadata.snapshots:
        for partition, (start, end) in committed_batch(snapshot).offsets[topic].items():  # type: ignore[union-attr]
            commits.append((partition, start, end, snapshot.timestamp_ms))
    latencies = []
    for partition, offset, produced_ms in delivered:
        if produced_ms < counted_from_ms:
            continue
        commit_ms = next(ts for p, s, e, ts in commits if p == partition and s <= offset < e)
        latencies.append((commit_ms - produced_ms) / 1000)
    latencies.sort()
    return {"records": len(latencies), "rate": rate, "p50_s": statistics.median(latencies),
            "p99_s": latencies[int(0.99 * (len(latencies) - 1))], "max_s": latencies[-1]}


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def input_mb(events: list[tuple[bytes, bytes]]) -> float:
    return sum(len(k) + len(v) for k, v in events) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=10_000, help="freshness: records per second")
    parser.add_argument("--fresh-seconds", type=float, default=60.0)
    parser.add_argument("--bootstrap", help="an existing broker (default: start a local one)")
    parser.add_argument("--spark-master", help="compare Floe on this cluster (or 'standalone') with local mode")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of the interleaved contenders")
    parser.add_argument("--iceberg-sink", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--floe-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.iceberg_sink:
        iceberg_sink_child(*args.iceberg_sink)
        return
    if args.floe_child:
        floe_child(*args.floe_child)
        return
    work = Path(tempfile.mkdtemp(prefix="floe-bench-"))
    run = cluster_bench if args.spark_master else bench
    if args.bootstrap:
        run(args, args.bootstrap, work)
        return
    from service.local_kafka import LocalKafka

    with LocalKafka(work / "kafka") as kafka:
        assert kafka.bootstrap is not None
        run(args, kafka.bootstrap, work)


# ---------------------------------------------------------------------------
# Local mode against a cluster
# ---------------------------------------------------------------------------


def cluster_bench(args: argparse.Namespace, bootstrap: str, work: Path) -> None:
    n = args.events
    appends, upserts = append_events(n), upsert_events(n)
    for topic, events in (("bench-append", appends), ("bench-upsert", upserts), ("bench-warmup", append_events(20_000))):
        create_topic(bootstrap, topic, 4)
        produce(bootstrap, topic, events)
    print(f"{n:,} events per mode, {input_mb(appends) / n * 1e6:.0f} bytes each (append), work dir {work}", flush=True)
    if args.spark_master != "standalone":
        compare_masters(args.spark_master, args.repeat, bootstrap, work, {"append": appends, "upsert": upserts})
        return
    from tests.support.spark_cluster import SparkCluster, app_task_counts

    with SparkCluster(work / "cluster", workers=2) as cluster:
        compare_masters(cluster.master_url, args.repeat, bootstrap, work, {"append": appends, "upsert": upserts})
        tasks = app_task_counts(cluster, "floe-bench-spark")
        print("tasks run per worker (from the executors' logs): "
              + ", ".join(f"worker {index}: {count}" for index, count in tasks.items()))


def compare_masters(master: str, repeat: int, bootstrap: str, work: Path, events: dict[str, list]) -> None:
    figures: dict[str, list[dict[str, float]]] = {}
    for round_ in range(repeat):
        for name, url in (("local[2]", "local[2]"), ("cluster", master)):
            child = [sys.executable, __file__, "--floe-child", url, bootstrap, str(work / f"{name}-{round_}"), "x"]
            out = subprocess.run(child, check=True, capture_output=True, text=True).stdout
            result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
            for mode, r in result.items():
                figures.setdefault(f"{name} {mode}", []).append(r)
    mb = {mode: input_mb(e) for mode, e in events.items()}
    print(f"\n{'path':20} {'records':>9} {'rec/s per round':>26} {'MB/s':>6} {'rec/s per core':>15}")
    for name, rounds in figures.items():
        rates = [r["records"] / r["wall_s"] for r in rounds]
        best = max(rates)
        print(f"{name:20} {rounds[0]['records']:>9,.0f} {' '.join(f'{x:>8,.0f}' for x in rates):>26} "
              f"{mb[name.split()[-1]] * best / rounds[0]['records']:>6.1f} {best / 2:>15,.0f}")
    print(f"\n(cluster: {master}, 2 executors x 1 core; local: 2 task slots; rates are wall-clock, "
          "query start to last commit)")


def floe_child(master: str, bootstrap: str, work: str, _: str) -> None:
    """One session on ``master``: a warm-up, then Floe append and upsert; the figures as one JSON line."""
    from runtime.spark_session import build_spark_session

    conf = {**SPARK_CONF, "spark.master": master}
    if not master.startswith("local"):
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                     "spark.executor.memory": "2g", "spark.driver.memory": "2g"})
    spark = build_spark_session(f"floe-bench-{master.split(':')[0]}", conf)
    path = Path(work)
    run_floe(spark, floe_job(bootstrap, "bench-warmup", path, "append", trigger=TriggerSpec(available_now=True)))
    results = {mode: run_floe(spark, floe_job(bootstrap, f"bench-{mode}", path, mode,
                                              trigger=TriggerSpec(available_now=True)))
               for mode in ("append", "upsert")}
    spark.stop()
    print(json.dumps(results), flush=True)


CONTENDERS = (("floe append", "append", "spark", True), ("floe append, python source", "append", "python", True),
              ("floe upsert, exchange (before)", "upsert", "spark", False),
              ("floe upsert", "upsert", "spark", True), ("floe upsert, python source", "upsert", "python", True))
"""Name, mode, reader, direct. The upsert "before" is the upsert as issue 17 found it (Spark's source, each
key's last change chosen after an exchange by key); the others write upserts from their decode tasks."""


def bench(args: argparse.Namespace, bootstrap: str, work: Path) -> None:
    """Every contender ``--repeat`` times, interleaved round by round; then freshness on both sources."""
    from runtime.spark_session import build_spark_session

    n = args.events
    appends, upserts = append_events(n), upsert_events(n)
    for topic, events in (("bench-append", appends), ("bench-upsert", upserts)):
        create_topic(bootstrap, topic, 4)
        produce(bootstrap, topic, events)
    print(f"{n:,} events per mode, {input_mb(appends) / n * 1e6:.0f} bytes each (append), work dir {work}", flush=True)

    registry = SchemaRegistry()
    registry_url = registry.serve()
    format_mb = {}
    for kind in FORMATS:
        events = framed(appends, kind, registry_url, f"bench-append-{kind}")
        create_topic(bootstrap, f"bench-append-{kind}", 4)
        produce(bootstrap, f"bench-append-{kind}", events)
        format_mb[f"floe append {kind}, python source"] = input_mb(events)
        print(f"{kind}: {format_mb[f'floe append {kind}, python source'] / n * 1e6:.0f} bytes per event", flush=True)
    spark = build_spark_session("floe-bench", SPARK_CONF)
    warm = create_topic(bootstrap, "bench-warmup", 4)
    produce(bootstrap, warm, append_events(20_000))
    for reader in ("spark", "python"):
        run_floe(spark, floe_job(bootstrap, warm, work, "append", trigger=TriggerSpec(available_now=True),
                                 reader=reader, tag=f"_{reader}"))
    results: dict[str, list[dict[str, float]]] = {}
    for round_ in range(args.repeat):
        for name, mode, reader, direct in CONTENDERS:
            job = floe_job(bootstrap, f"bench-{mode}", work, mode, trigger=TriggerSpec(available_now=True),
                           reader=reader, tag=f"_{reader}_{direct}_{round_}", direct=direct)
            results.setdefault(name, []).append(run_floe(spark, job, n))
            print(f"round {round_ + 1}: {name}: {n / results[name][-1]['wall_s']:,.0f} rec/s", flush=True)
        for kind in FORMATS:
            name = f"floe append {kind}, python source"
            job = floe_job(bootstrap, f"bench-append-{kind}", work, "append", trigger=TriggerSpec(available_now=True),
                           reader="python", tag=f"_{kind}_{round_}", registry_url=registry_url)
            results.setdefault(name, []).append(run_floe(spark, job, n))
            print(f"round {round_ + 1}: {name}: {n / results[name][-1]['wall_s']:,.0f} rec/s", flush=True)
        results.setdefault("spark kafka source, noop sink", []).append(noop_sink(spark, bootstrap, work, round_))
        results.setdefault("iceberg spark sink append", []).append(
            run_iceberg_sink(bootstrap, "bench-append", work / f"iceberg-{round_}"))
        results.setdefault("python consume + decode, 1 process", []).append(python_ceiling(bootstrap, "bench-append"))
    fresh = {reader: freshness(spark, bootstrap, work, args.rate, args.fresh_seconds, reader)
             for reader in ("spark", "python")}
    spark.stop()
    registry.close()
    top = ceiling(appends, work)
    mb = {name: format_mb.get(name) or input_mb(upserts if "upsert" in name else appends) for name in results}
    report(results, top, fresh, mb)


def noop_sink(spark: Any, bootstrap: str, work: Path, round_: int) -> dict[str, float]:
    """Spark's Kafka source into the no-op sink, nothing parsed: how fast records leave Kafka through the JVM."""
    source = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", "bench-append").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", MAX_OFFSETS).load())
    started = time.monotonic()
    query = (source.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(work / f"noop-checkpoint-{round_}")).start())
    query.awaitTermination()
    return progress_figures(query.recentProgress, time.monotonic() - started)


def python_ceiling(bootstrap: str, topic: str) -> dict[str, float]:
    """One Python process: Floe's source's task code (consume every partition) plus Floe's decode."""
    from confluent_kafka import Consumer, TopicPartition

    from ingest.kafka_source.consume import ConsumeSettings, consume_ranges, ranges_batch
    from ingest.kafka_source.offsets import OffsetRange

    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-probe"})
    ranges = []
    for p in range(4):
        low, high = probe.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ranges.append(OffsetRange(topic, p, low, high))
    probe.close()
    spec = DecodeSpec(SCHEMA)
    started, records = time.monotonic(), 0
    for batch in consume_ranges(iter([ranges_batch(ranges)]), ConsumeSettings((("bootstrap.servers", bootstrap),),
                                                                               with_headers=False)):
        records += decode_records(batch, spec).rows.num_rows
    return {"records": records, "wall_s": time.monotonic() - started, "batch_s": time.monotonic() - started,
            "batches": 1}


def report(results: dict[str, list[dict[str, float]]], top: dict[str, float], fresh: dict[str, dict[str, float]],
           mb: dict[str, float]) -> None:
    print(f"\n{'path':36} {'records':>9} {'rec/s per round':>20} {'best MB/s':>9} {'in-batch rec/s':>15} "
          f"{'batches':>7}")
    best = {}
    for name, rounds in results.items():
        rates = [r["records"] / r["wall_s"] for r in rounds]
        best[name] = max(rates)
        top_round = rounds[rates.index(best[name])]
        print(f"{name:36} {rounds[0]['records']:>9,.0f} {' '.join(f'{x:>9,.0f}' for x in rates):>20} "
              f"{mb[name] * best[name] / rounds[0]['records']:>9.1f} "
              f"{top_round['records'] / top_round['batch_s']:>15,.0f} {top_round['batches']:>7.0f}")
    ceiling_rate = top["records"] / top["write_s"]
    print(f"{'pyarrow parquet write':36} {top['records']:>9,.0f} {ceiling_rate:>20,.0f}")
    print(f"{'(floe decode alone, 1 core)':36} {top['records']:>9,.0f} {top['records'] / top['decode_s']:>20,.0f}")
    sink = best["iceberg spark sink append"]
    targets = (
        ("floe append, python source / iceberg spark sink", best["floe append, python source"] / sink, 2.0),
        ("floe upsert, python source / floe upsert before (spark source, exchange)",
         best["floe upsert, python source"] / best["floe upsert, exchange (before)"], 1.5),
    )
    print("\nratios (best round of each):")
    print(f"  floe append (spark source) / iceberg spark sink: {best['floe append'] / sink:.2f}")
    print(f"  floe upsert (spark source) / floe upsert before: "
          f"{best['floe upsert'] / best['floe upsert, exchange (before)']:.2f}")
    for label, ratio, target in targets:
        print(f"  {label}: {ratio:.2f} (target >= {target}: {'PASS' if ratio >= target else 'FAIL'})")
    json_rate = best["floe append, python source"]
    for kind in FORMATS:
        print(f"  floe append {kind} / json, python source: {best[f'floe append {kind}, python source'] / json_rate:.2f}")
    for reader, f in fresh.items():
        verdict = "PASS" if f["p99_s"] <= 2.0 else "FAIL"
        print(f"\nfreshness, {reader} source, at {f['rate']:.0f} rec/s, 1 s trigger, {f['records']:,.0f} records: "
              f"p50 {f['p50_s']:.2f} s, p99 {f['p99_s']:.2f} s (target <= 2 s: {verdict}), max {f['max_s']:.2f} s")


if __name__ == "__main__":
    main()
