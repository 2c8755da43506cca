"""One query, many tables (``ingest.query: shared``): the pure parts alone, then real runs of
``floe ingest`` on a real broker, Spark and a SQLite catalog.

The runs check every row of every table: append tables written by one fan-out
job, an upsert table on its own plan, a table by topic pattern; and that a lost
checkpoint, a restart and a table added on restart neither drop nor repeat a
record, because each table lands only what lies past its own committed offsets.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client import CollectorRegistry

from commit.catalog.sql.catalog import SqlCatalog
from commit.exactly_once import committed_offsets
from ingest.driver.batch import floors_of
from ingest.driver.catch_up import catch_up_ranges
from ingest.driver.commit_clock import CommitClock
from ingest.driver.offset_accounting import BatchStats, covering_every_partition
from ingest.driver.shared_batch import _moved_topics
from ingest.driver.shared_query import lowest
from ingest.job import SharedIngestJob
from ingest.kafka_source.offsets import OffsetRange
from ingest.kafka_source.table_ranges import TableRanges
from service.config import ConfigError, parse_config
from service.ingest_command import EXIT_OK, EXIT_STOPPED, run_ingest_service
from service.jobs import build_shared_job
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import T0, Event, change_events, expected_table, normalized, produce
from tests.service.test_ingest_command import EVENT_COLUMNS, events_config

# ---------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------


def _ranges(*rows: tuple[str, int, int, int]) -> pa.RecordBatch:
    names = ["topic", "partition", "start_offset", "until_offset"]
    types = [pa.string(), pa.int32(), pa.int64(), pa.int64()]
    columns = list(zip(*rows))
    return pa.record_batch([pa.array(c, t) for c, t in zip(columns, types)], names=names)


def test_a_table_takes_its_topics_from_its_floors_on():
    ranges = TableRanges(("a",), r"logs\..*").with_floors({"a": {0: 15, 1: 40}, "b": {0: 3}, "logs.x": {0: 7}})
    assert ranges.floors == (("a", 0, 15), ("a", 1, 40), ("logs.x", 0, 7)), "floors of other tables' topics drop"
    batch = _ranges(("a", 0, 10, 20), ("a", 1, 30, 40), ("b", 0, 0, 9), ("logs.x", 0, 0, 5), ("logs.y", 0, 2, 4))
    out = pa.Table.from_batches(list(ranges.clamp(iter([batch])))).to_pylist()
    assert [(r["topic"], r["partition"], r["start_offset"], r["until_offset"]) for r in out] == [
        ("a", 0, 15, 20),  # from the floor
        ("logs.y", 0, 2, 4),  # no floor: the whole range
    ], "a range below the floor, and other tables' topics, are not read"


def test_records_below_a_floor_are_left_out():
    ranges = TableRanges(("a",)).with_floors({"a": {0: 12}})
    records = pa.record_batch({"topic": ["a"] * 4, "partition": pa.array([0] * 4, pa.int32()), "offset": [10, 11, 12, 13]})
    assert ranges.records_from_floor(records).column("offset").to_pylist() == [12, 13]
    assert ranges.records_from_floor(records.slice(2)).num_rows == 2


def test_a_new_checkpoint_starts_each_partition_at_the_lowest_table_start():
    assert lowest([{"a": {"0": 5, "1": 9}}, {"a": {"0": 3}, "b": {"0": 1}}]) == {"a": {"0": 3, "1": 9}, "b": {"0": 1}}


def test_a_tables_floor_is_its_committed_offset_or_its_start_if_later():
    assert floors_of({"a": {0: 40, 1: 5}}, {"a": {0: 30, 1: 9}, "b": {0: 2}}) == {"a": {0: 40, 1: 9}, "b": {0: 2}}


def test_only_topics_that_moved_call_on_their_tables():
    starts = {"a": {0: 5, 1: 9}, "b": {0: 4}}
    ends = {"a": {0: 5, 1: 10}, "b": {0: 4}, "new": {0: 0}}
    assert _moved_topics(starts, ends) == {"a", "new"}, "a partition new to the offset log counts as moved"


def test_a_shared_query_needs_floes_source(tmp_path):
    config = _config(tmp_path, "localhost:9092", {"x": "t1"})
    config["kafka"]["reader"] = "spark"
    with pytest.raises(ConfigError, match=r"ingest\.query.*kafka\.reader: python"):
        parse_config(config)


def test_a_template_table_becomes_a_table_per_topic_of_its_pattern(tmp_path):
    config = _config(tmp_path, "localhost:9092", {"x": "t1"}, pattern={"{topic}": r"logs\..*"})
    config["tables"][1]["identifier"] = "raw.{topic}"
    parsed = parse_config(config)
    tables = parsed.with_tables_per_topic(["logs.web-1", "logs.app", "other", "t1"]).tables
    assert [(t.identifier, t.topics, t.topic_pattern) for t in tables] == [
        ("db.x", ["t1"], None),
        ("raw.logs_app", ["logs.app"], None),
        ("raw.logs_web_1", ["logs.web-1"], None),
    ]
    assert parsed.with_tables_per_topic(["t1"]).tables[0].identifier == "db.x", "a pattern may match nothing yet"
    config["tables"].append({"identifier": "raw.logs_app", "topics": ["other"], "schema": EVENT_COLUMNS})
    with pytest.raises(ConfigError, match=r"'raw\.logs_app' is already used"):
        parse_config(config).with_tables_per_topic(["logs.app"])
    config["tables"][1].pop("topic_pattern")
    config["tables"][1]["topics"] = ["logs.app"]
    with pytest.raises(ConfigError, match=r"tables\[1\]\.identifier: \{topic\} names a table per topic"):
        parse_config(config)


def test_the_shared_query_reads_the_union_of_the_tables_topics(tmp_path):
    config = _config(tmp_path, "localhost:9092", {"x": "t1", "y": "t2"}, pattern={"z": r"logs\..*"})
    shared = build_shared_job(parse_config(config))
    assert isinstance(shared, SharedIngestJob)
    assert shared.source.topic_pattern == r"(?:logs\..*)|t1|t2"
    assert {job.checkpoint_location for job in shared.jobs} == {f"{tmp_path}/checkpoints/shared-query"}
    assert shared.table_ids == ("db.x", "db.y", "db.z")


def test_a_table_with_an_interval_waits_until_due_then_lands_what_waited():
    clock = CommitClock({"db.slow": 30.0, "db.fast": None}, {"db.slow": 1_000.0})
    assert not clock.waits("db.fast", 1_001.0), "no interval: every batch"
    assert clock.waits("db.slow", 1_029.0) and not clock.waits("db.slow", 1_030.0)
    assert clock.next_due() is None, "nothing waits yet"
    clock.waited("db.slow", 7)
    clock.waited("db.slow", 8)
    assert clock.next_due() == (1_030.0, 8, ["db.slow"]), "due 30 s after its last commit, up to the last batch"
    clock.landed(["db.slow"], 1_031.0)
    assert clock.next_due() is None and not clock.waiting("db.slow")
    assert not CommitClock({"db.new": 30.0}, {}).waits("db.new", 0.0), "a table that never committed is due"


def test_tables_due_close_together_land_together_never_early():
    """A table due within the grace before another waits for it, so the two land in one Spark job; once
    landed together they stay together. None lands before its interval is up."""
    clock = CommitClock({"db.a": 30.0, "db.b": 30.0, "db.c": 30.0}, {"db.a": 1_000.0, "db.b": 1_003.0,
                                                                      "db.c": 1_020.0}, grace=5.0)
    assert clock.sitting_out(["db.a", "db.b", "db.c"], 1_030.0) == {"db.a", "db.b", "db.c"}, "a waits for b"
    assert clock.sitting_out(["db.a", "db.b", "db.c"], 1_033.0) == {"db.c"}, "a lands 3 s late, with b"
    for table in ("db.a", "db.b", "db.c"):
        clock.waited(table, 4)
    assert clock.next_due() == (1_033.0, 4, ["db.a", "db.b"]), "the due timer lands a and b at once"
    clock.landed(["db.a", "db.b"], 1_034.0)
    assert not clock.waits("db.a", 1_064.0) and clock.waits("db.a", 1_063.9), "one landing time: due together"
    assert clock.next_due() == (1_050.0, 4, ["db.c"]), "c is due more than the grace from the others"


def test_ranges_reach_back_to_the_lowest_floor_behind_the_batch():
    starts, ends = {"a": {0: 100, 1: 50}, "b": {0: 9}}, {"a": {0: 120, 1: 50}, "b": {0: 12}}
    level = TableRanges(("a",)).with_floors({"a": {0: 100, 1: 50}})
    assert catch_up_ranges(starts, ends, [level]) == [], "no floor behind the batch: its own ranges do"
    behind = TableRanges(("a",)).with_floors({"a": {0: 60, 1: 50}})
    assert catch_up_ranges(starts, ends, [level, behind]) == [
        OffsetRange("a", 0, 60, 120),
        OffsetRange("b", 0, 9, 12),
    ], "a partition from the lowest floor; others as planned; an empty one left out"
    assert catch_up_ranges(ends, ends, [behind]) == [OffsetRange("a", 0, 60, 120)], "a due commit: floors to ends"


def test_a_table_under_an_interval_stands_in_every_partition_from_its_first_commit():
    stats = BatchStats(records=3, offsets={"a": {0: (5, 8)}})
    covered = covering_every_partition(stats, {"a": {0: 8, 1: 4, 2: -1}}, {"a": {0: 5, 1: 4, 2: -1}})
    assert covered.offsets == {"a": {0: (5, 8), 1: (4, 4)}}, "an empty partition too; an unresolved one not"


# ---------------------------------------------------------------------------
# Real runs
# ---------------------------------------------------------------------------


def _config(
    tmp: Path,
    bootstrap: str,
    appends: dict[str, str],
    *,
    upserts: dict[str, str] | None = None,
    pattern: dict[str, str] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A shared query over append tables (one topic each), upsert tables (bucketed: their own plan) and
    tables by pattern; name -> topic (or pattern), each table ``db.<name>``."""
    tables: list[dict[str, Any]] = [
        {"identifier": f"db.{name}", "topics": [topic], "schema": EVENT_COLUMNS} for name, topic in appends.items()
    ]
    tables += [
        {**events_config(tmp, bootstrap, topic)["tables"][0], "identifier": f"db.{name}"}
        for name, topic in (upserts or {}).items()
    ]
    tables += [
        {"identifier": f"db.{name}", "topic_pattern": regex, "schema": EVENT_COLUMNS}
        for name, regex in (pattern or {}).items()
    ]
    config: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "reader": "python", "max_offsets_per_trigger": 700},
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")},
        "checkpoint_location": str(tmp / "checkpoints"),
        "trigger": {"available_now": True},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "ingest": {"query": "shared", "commit_threads": 3},
        "tables": tables,
    }
    config.update(overrides)
    return config


def three_tables(
    tmp: Path, bootstrap: str, new_topic: Any, max_commit_age: str, **overrides: Any
) -> tuple[tuple[str, str, str], dict[str, Any]]:
    """New topics clicks (2 partitions), views and orders (2), and a shared query on a 1 s trigger over
    db.clicks and db.views (appends: the fan-out job) and db.orders (an upsert: its own plan)."""
    clicks, views, orders = new_topic("clicks", 2), new_topic("views"), new_topic("orders", 2)
    config = _config(
        tmp,
        bootstrap,
        {"clicks": clicks, "views": views},
        upserts={"orders": orders},
        trigger={"processing_time": "1s"},
        readiness={"max_commit_age": max_commit_age},
        **overrides,
    )
    return (clicks, views, orders), config


def _appends(first: int, count: int) -> list[Event]:
    """Append records with ids ``first``.. (each lands as one row)."""
    return [
        Event(
            json.dumps(i).encode(),
            json.dumps(
                {"id": i, "name": f"n{i}", "amount": i / 4, "event_ts": T0.isoformat(), "version": 1}
            ).encode(),
        )
        for i in range(first, first + count)
    ]


def _rows(tmp: Path, identifier: str) -> pa.Table:
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        loaded = catalog.load_table(identifier)
    return TableScan(FileIO.for_location(loaded.metadata_location), loaded.metadata).to_arrow()


def _ids(tmp: Path, identifier: str) -> Counter[int]:
    return Counter(_rows(tmp, identifier).column("id").to_pylist())


def _offsets(tmp: Path, identifier: str) -> dict[str, dict[int, int]]:
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        return committed_offsets(catalog.load_table(identifier).metadata)


@pytest.mark.kafka
@pytest.mark.spark
def test_one_query_lands_every_table_exactly_once_across_restarts(
    spark, kafka_bootstrap, new_topic, tmp_path, caplog
):
    caplog.set_level("INFO", logger="floe.ingest")
    clicks, views, orders = new_topic("clicks", 2), new_topic("views"), new_topic("orders", 2)
    prefix = new_topic("logs")  # the pattern's tables: <prefix>.a and <prefix>.b
    logs_a, logs_b = new_topic(f"{prefix}.a"), new_topic(f"{prefix}.b")
    produce(kafka_bootstrap, clicks, _appends(0, 1_500))
    produce(kafka_bootstrap, views, _appends(10_000, 400))
    delivered = produce(kafka_bootstrap, orders, change_events(1_200, 150, seed=5))
    produce(kafka_bootstrap, logs_a, _appends(20_000, 300))
    produce(kafka_bootstrap, logs_b, _appends(30_000, 200))
    config = _config(
        tmp_path,
        kafka_bootstrap,
        {"clicks": clicks, "views": views},
        upserts={"orders": orders},
        pattern={"logs": rf"{prefix}\..*"},
    )
    config["tables"][-1]["share_topics"] = True  # and a table per topic of the same pattern:
    config["tables"].append(
        {"identifier": "raw.{topic}", "topic_pattern": rf"{prefix}\..*", "schema": EVENT_COLUMNS, "share_topics": True}
    )

    assert run_ingest_service(parse_config(config), port=0, spark=spark) == EXIT_OK
    per_topic = {t: f"raw.{t.replace('-', '_').replace('.', '_')}" for t in (logs_a, logs_b)}
    assert _ids(tmp_path, per_topic[logs_a]) == Counter(range(20_000, 20_300))
    assert _ids(tmp_path, per_topic[logs_b]) == Counter(range(30_000, 30_200))
    assert _ids(tmp_path, "db.clicks") == Counter(range(1_500))
    assert _ids(tmp_path, "db.views") == Counter(range(10_000, 10_400))
    assert _ids(tmp_path, "db.logs") == Counter([*range(20_000, 20_300), *range(30_000, 30_200)])
    assert normalized(_rows(tmp_path, "db.orders")) == expected_table(delivered)
    assert _offsets(tmp_path, "db.views") == {views: {0: 400}}, "each table records its own topics only"

    fanned = {r.table for r in caplog.records if getattr(r, "write", None) == "fan-out"}
    assert fanned == {"db.clicks", "db.views", "db.logs", *per_topic.values()}, "the appends share one write job"
    assert {r.table for r in caplog.records if getattr(r, "write", None) == "exchange"} == {"db.orders"}

    # More records; the checkpoint lost, and a second table on the views topic, from its start: the
    # new checkpoint reads views from offset 0 for it, and db.views lands nothing it holds already.
    produce(kafka_bootstrap, clicks, _appends(1_500, 500))
    delivered += produce(kafka_bootstrap, orders, change_events(400, 150, seed=6))
    shutil.rmtree(tmp_path / "checkpoints")
    config["tables"][1]["share_topics"] = True
    config["tables"].append(
        {"identifier": "db.all_views", "topics": [views], "schema": EVENT_COLUMNS, "share_topics": True}
    )
    assert run_ingest_service(parse_config(config), port=0, spark=spark) == EXIT_OK
    assert _ids(tmp_path, "db.clicks") == Counter(range(2_000)), "no click twice, none lost"
    assert _ids(tmp_path, "db.views") == Counter(range(10_000, 10_400)), "nothing below its own offsets"
    assert _ids(tmp_path, "db.all_views") == Counter(range(10_000, 10_400))
    assert normalized(_rows(tmp_path, "db.orders")) == expected_table(delivered)

    # Tables added on restart start where they are configured to: on a topic new to the checkpoint, and
    # on one it has read far past their start (their first batch reaches back to it).
    fresh = new_topic("fresh")
    produce(kafka_bootstrap, fresh, _appends(40_000, 250))
    produce(kafka_bootstrap, views, _appends(10_400, 100))
    config["tables"].append({"identifier": "db.fresh", "topics": [fresh], "schema": EVENT_COLUMNS})
    config["tables"].append(
        {"identifier": "db.views_again", "topics": [views], "schema": EVENT_COLUMNS, "share_topics": True}
    )
    assert run_ingest_service(parse_config(config), port=0, spark=spark) == EXIT_OK
    assert _ids(tmp_path, "db.fresh") == Counter(range(40_000, 40_250))
    assert _ids(tmp_path, "db.views_again") == Counter(range(10_000, 10_500)), "from the topic's start"
    assert _ids(tmp_path, "db.views") == Counter(range(10_000, 10_500))
    assert _ids(tmp_path, "db.all_views") == Counter(range(10_000, 10_500))
    assert _ids(tmp_path, "db.clicks") == Counter(range(2_000)), "a quiet table is left alone"


@pytest.mark.kafka
@pytest.mark.spark
def test_a_commit_interval_commits_once_per_interval_and_lands_a_quiet_tail(
    spark, kafka_bootstrap, new_topic, paced_producer, tmp_path, caplog
):
    caplog.set_level("INFO", logger="floe.ingest")
    (clicks, views, orders), config = three_tables(tmp_path, kafka_bootstrap, new_topic, "1m")
    config["tables"][0]["commit_interval"] = "6s"  # db.clicks: the fan-out job
    config["tables"][2]["commit_interval"] = "6s"  # db.orders: its own plan
    producers = [
        paced_producer(kafka_bootstrap, clicks, _appends(0, 200_000), chunk=40, pause_s=0.2),
        paced_producer(kafka_bootstrap, views, _appends(500_000, 200_000), chunk=20, pause_s=0.2),
        paced_producer(kafka_bootstrap, orders, change_events(100_000, 300, seed=9), chunk=40, pause_s=0.2),
    ]
    stop, result = threading.Event(), {}
    service = threading.Thread(
        target=lambda: result.update(code=run_ingest_service(parse_config(config), stop=stop, port=0, spark=spark))
    )
    service.start()
    try:
        _wait(lambda: len(_snapshots(tmp_path, "db.clicks")) >= 3, service, "three commits of db.clicks")
        delivered = [p.stop() for p in producers]
        sent_clicks, sent_views = Counter(d.event.key for d in delivered[0]), len(delivered[1])
        _wait(
            lambda: _ids(tmp_path, "db.clicks") == Counter(int(k) for k in sent_clicks)
            and normalized(_rows(tmp_path, "db.orders")) == expected_table(delivered[2]),
            service,
            "the quiet tail of the waiting tables landed without a batch",
        )
    finally:
        stop.set()
        service.join(180)
    assert result == {"code": EXIT_STOPPED}
    assert _ids(tmp_path, "db.views") == Counter(range(500_000, 500_000 + sent_views))
    for table in ("db.clicks", "db.orders"):
        times = _snapshots(tmp_path, table)
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= 6.0, f"{table}: at most one commit per 6 s, got gaps {gaps}"
    assert len(_snapshots(tmp_path, "db.views")) > 2 * len(_snapshots(tmp_path, "db.clicks")), "views: every batch"
    assert any("between batches" in r.getMessage() for r in caplog.records), "the due timer landed the tail"


def _snapshots(tmp: Path, identifier: str) -> list[float]:
    """Commit times (seconds) of the table's snapshots, oldest first; none before it exists."""
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        if not catalog.table_exists(identifier):
            return []
        return sorted(s.timestamp_ms / 1000 for s in catalog.load_table(identifier).metadata.snapshots)


def _wait(reached: Any, service: threading.Thread, what: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not reached():
        assert service.is_alive(), f"floe ingest ended before {what}"
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f}s: {what}"
        time.sleep(0.5)


def test_a_commit_interval_needs_the_shared_query_and_a_longer_readiness_age(tmp_path):
    config = _config(tmp_path, "localhost:9092", {"x": "t1"}, readiness={"max_commit_age": "1m"})
    config["tables"][0]["commit_interval"] = "2m"
    with pytest.raises(ConfigError, match=r"tables\[0\]\.commit_interval.*shorter than readiness\.max_commit_age"):
        parse_config(config)
    config["tables"][0]["commit_interval"] = "30s"
    assert build_shared_job(parse_config(config)).jobs[0].commit_interval_seconds == 30.0
    config["ingest"]["query"] = "per-table"
    with pytest.raises(ConfigError, match=r"tables\[0\]\.commit_interval: only a shared query"):
        parse_config(config)


@pytest.mark.kafka
@pytest.mark.spark
def test_a_failing_table_is_held_while_the_others_go_on_and_lands_exactly_after(
    spark, kafka_bootstrap, new_topic, paced_producer, tmp_path, caplog
):
    """db.orders is dropped from the catalog by hand mid-run, then registered again: meanwhile its batches
    fail, it is held (metric, /readyz), the other tables keep committing, and afterwards it is exact."""
    caplog.set_level("INFO", logger="floe.ingest")
    clicks, orders = new_topic("clicks", 2), new_topic("orders", 2)
    config = _config(
        tmp_path,
        kafka_bootstrap,
        {"clicks": clicks},
        upserts={"orders": orders},
        trigger={"processing_time": "1s"},
        readiness={"max_commit_age": "1m"},
    )
    producers = [
        paced_producer(kafka_bootstrap, clicks, _appends(0, 200_000), chunk=40, pause_s=0.2),
        paced_producer(kafka_bootstrap, orders, change_events(100_000, 300, seed=12), chunk=40, pause_s=0.2),
    ]
    registry, stop, result = CollectorRegistry(), threading.Event(), {}
    service = threading.Thread(
        target=lambda: result.update(
            code=run_ingest_service(parse_config(config), stop=stop, registry=registry, port=0, spark=spark)
        )
    )
    service.start()
    held = {"table": "db.orders"}
    try:
        _wait(lambda: len(_snapshots(tmp_path, "db.orders")) >= 2, service, "two commits of db.orders")
        with SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")) as catalog:
            location = catalog.load_table("db.orders").metadata_location
            catalog.drop_table("db.orders")
        _wait(lambda: registry.get_sample_value("floe_ingest_table_held", held) == 1, service, "db.orders held")
        clicks_then = len(_snapshots(tmp_path, "db.clicks"))
        _wait(lambda: len(_snapshots(tmp_path, "db.clicks")) >= clicks_then + 3, service, "db.clicks going on")
        assert registry.get_sample_value("floe_ingest_table_held", held) == 1, "still held while dropped"
        assert registry.get_sample_value("floe_ingest_table_failures_total", {**held, "cause": "catalog"}) >= 1
        with SqlCatalog(f"sqlite:///{tmp_path / 'catalog.db'}", str(tmp_path / "warehouse")) as catalog:
            catalog.register_table("db.orders", location)
        delivered = [p.stop() for p in producers]
        _wait(
            lambda: _ids(tmp_path, "db.clicks") == Counter(int(d.event.key) for d in delivered[0])
            and normalized(_rows(tmp_path, "db.orders")) == expected_table(delivered[1]),
            service,
            "every table exact after db.orders came back",
        )
        assert registry.get_sample_value("floe_ingest_table_held", held) == 0, "released once it landed"
    finally:
        stop.set()
        service.join(180)
    assert result == {"code": EXIT_STOPPED}, "a held table does not end floe ingest"
    lines = [r.getMessage() for r in caplog.records if getattr(r, "table", None) == "db.orders"]
    assert any("the table is held" in line for line in lines) and any("lands again" in line for line in lines)
