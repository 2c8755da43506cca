"""Skipping a poison record (README: 'A poison record'): exactly the named record is lost, nothing else.

The end-to-end tests follow the README as an operator would, with the real
``floe`` command in a child process, on both Kafka sources: one partition,
good records at offsets 0-49, a bad one at 50, good ones after (updates of
keys landed before it among them). ``floe ingest`` under ``bad_records:
fail`` stops at ``topic/0@50`` and commits nothing; run again with the
``--skip`` its message names, it lands every record but that one in an
append and an upsert table reading the topic, and the snapshot summary lists
the skip. The old recipe (a new checkpoint starting at offset 51) would have
left offsets 0-49 out of both tables.

The configuration and command-line checks (malformed refs, topics no table
reads) are fast, without Kafka or Spark.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from commit.catalog.sql.catalog import SqlCatalog
from ingest.skips import SKIPPED_RECORDS, RecordRef
from service.cli import EXIT_CONFIG, EXIT_FAILED, EXIT_OK, main
from service.config import load_config
from service.jobs import build_jobs, command_line_skips
from table.io import FileIO
from table.scan import TableScan
from tests.ingest.e2e_support import Event, produce
from tests.service.test_config import changed, minimal, problems_of, write
from tests.service.test_ingest_failures import STACK_TRACE, floe

POISON_OFFSET = 50
RECORDS = 100
UPDATES_FROM = 90  # offsets 90-99 update keys 0-9, produced before the poison record
COLUMNS = [{"name": "id", "type": "long", "required": True}, {"name": "name", "type": "string"}]


# ----------------------------------------------------------------------------- configuration (fast)


def test_skip_records_must_be_refs_of_topics_the_table_reads(tmp_path: Path) -> None:
    data = changed(lambda d: d["tables"][0].update(skip_records=["events/0@50", "events/0", "payments/1@3"]))
    assert problems_of(data, tmp_path) == [
        "tables[0].skip_records[1]: expected TOPIC/PARTITION@OFFSET (e.g. orders/0@50), got 'events/0'",
        "tables[0].skip_records[2]: 'payments/1@3' names topic 'payments', which table db.events does not read "
        "(topics: events)",
    ]


def test_skip_records_reach_the_decode_spec_of_their_table_only(tmp_path: Path) -> None:
    data = minimal()
    other = {**data["tables"][0], "identifier": "db.payments", "topic_pattern": "pay.*"}
    other.pop("topics")
    data["tables"][0]["skip_records"] = "events/0@50, events/2@7"  # a comma list, as an environment override gives it
    data["tables"].append(other)
    config = load_config(write(tmp_path, data), {})
    events, payments = build_jobs(config, command_line_skips(config, ["payments-eu/3@9", "events/0@50"]))
    assert events.table.decode.skip_records == (RecordRef("events", 0, 50), RecordRef("events", 2, 7))
    assert payments.table.decode.skip_records == (RecordRef("payments-eu", 3, 9),)
    with pytest.raises(ValueError, match=r"^--skip 'refunds/0@1': no table reads topic 'refunds' \(db\.events reads "
                                         r"events, db\.payments reads 'pay\.\*'\)$"):
        command_line_skips(config, ["refunds/0@1"])


@pytest.mark.parametrize(("value", "reason"), [
    ("events/0", "--skip: expected TOPIC/PARTITION@OFFSET (e.g. orders/0@50), got 'events/0'"),
    ("other/0@5", "--skip 'other/0@5': no table reads topic 'other' (db.events reads events)"),
])
def test_a_bad_skip_option_is_one_line_naming_the_option_and_value_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, reason: str) -> None:
    config = write(tmp_path, minimal())
    assert main(["ingest", "--config", str(config), "--skip", value]) == EXIT_CONFIG
    assert capsys.readouterr().err.splitlines() == [f"floe ingest: {reason}"]


# ----------------------------------------------------------------------------- the recipe, end to end


def record(offset: int) -> tuple[int, str]:
    """(id, name) of the good record at ``offset``: ids 0-89 new, then offsets 90-99 update ids 0-9."""
    return (offset, f"n{offset}") if offset < UPDATES_FROM else (offset - UPDATES_FROM, f"v2-{offset - UPDATES_FROM}")


def poisoned_records() -> list[Event]:
    """Offsets 0-99 of one partition; offset 50 is not JSON."""
    events = []
    for offset in range(RECORDS):
        key, name = record(offset)
        value = b"{not json" if offset == POISON_OFFSET else json.dumps({"id": key, "name": name}).encode()
        events.append(Event(json.dumps(key).encode(), value))
    return events


def skip_config(tmp: Path, bootstrap: str, topic: str, reader: str) -> Path:
    """An append and an upsert table reading the topic, under ``bad_records: fail``; one batch holds it all."""
    strategy = "position" if reader == "python" else "equality"  # the direct upsert, and the exchange
    tables = [
        {"identifier": "db.appended", "topics": [topic], "share_topics": True, "schema": COLUMNS},
        {"identifier": "db.upserted", "topics": [topic], "share_topics": True, "schema": COLUMNS, "mode": "upsert",
         "key": ["id"], "properties": {"floe.upsert.delete-strategy": strategy}},
    ]
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "reader": reader, "max_offsets_per_trigger": 1000},
        "catalog": {"uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": str(tmp / "warehouse")},
        "checkpoint_location": str(tmp / "checkpoints"),
        "trigger": {"available_now": True},
        "http": {"host": "127.0.0.1", "ingest_port": 0, "compact_port": 0},
        "log_format": "text",
        "tables": tables,
    }
    path = tmp / "floe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def table_state(tmp: Path, identifier: str) -> tuple[list[tuple[int, str]], list[dict[str, str]]]:
    """The table's rows (id, name), sorted, and its snapshots' summaries, oldest first."""
    with SqlCatalog(f"sqlite:///{tmp / 'catalog.db'}", str(tmp / "warehouse")) as catalog:
        loaded = catalog.load_table(identifier)
    metadata = loaded.metadata
    rows = TableScan(FileIO.for_location(loaded.metadata_location), metadata).to_arrow().to_pylist()
    return sorted((row["id"], row["name"]) for row in rows), [dict(s.summary) for s in metadata.snapshots]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.parametrize("reader", ["spark", "python"])
def test_skipping_the_poison_record_lands_every_record_before_and_after_it(tmp_path, kafka_bootstrap, new_topic,
                                                                          reader):
    topic = new_topic("poison", partitions=1)
    delivered = produce(kafka_bootstrap, topic, poisoned_records())
    assert sorted((d.partition, d.offset) for d in delivered) == [(0, o) for o in range(RECORDS)]
    config = skip_config(tmp_path, kafka_bootstrap, topic, reader)

    stopped = floe("ingest", "--config", str(config))
    assert stopped.returncode == EXIT_FAILED, stopped.stderr[-3000:]
    assert not STACK_TRACE.search(stopped.stderr), stopped.stderr[-5000:]
    hints = set(re.findall(rf"bad record at {topic}/0@{POISON_OFFSET}: DecodeError: .*floe ingest --skip (\S+),",
                           stopped.stderr))
    assert hints == {f"{topic}/0@{POISON_OFFSET}"}, stopped.stderr[-5000:]
    for identifier in ("db.appended", "db.upserted"):
        assert table_state(tmp_path, identifier) == ([], []), "nothing of the failed batch is committed"

    skipped = floe("ingest", "--config", str(config), "--skip", hints.pop())  # the command the message names
    assert skipped.returncode == EXIT_OK, skipped.stderr[-5000:]
    assert skipped.stderr.count(f"skipped {topic}/0@{POISON_OFFSET}, as skip_records asked") == 2, skipped.stderr

    good = [record(o) for o in range(RECORDS) if o != POISON_OFFSET]
    latest = sorted(dict(good).items())  # each id's last record: 89 ids, 0-9 updated after the poison record
    for identifier, expected in (("db.appended", sorted(good)), ("db.upserted", latest)):
        rows, snapshots = table_state(tmp_path, identifier)
        assert rows == expected, f"{identifier}: {len(rows)} rows, {len(expected)} expected"
        assert [s.get(SKIPPED_RECORDS) for s in snapshots] == [f"{topic}/0@{POISON_OFFSET}"], identifier
        assert json.loads(snapshots[0]["floe.kafka.offsets"]) == {topic: {"0": [0, RECORDS]}}, identifier
    history = floe("table", "history", "db.appended", "--config", str(config), timeout=120)
    assert history.returncode == EXIT_OK, history.stderr
    assert f"{SKIPPED_RECORDS}={topic}/0@{POISON_OFFSET}" in history.stdout, history.stdout
