"""Floe's Kafka source reading real Kafka: exact ranges, aborted transactions, deleted offsets.

The tasks' side (:func:`ingest.kafka_source.consume.consume_ranges`) is
called as a Spark task calls it, on range rows, against the session's broker.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ingest.kafka_source.consume import ConsumeSettings, DataLossError, consume_many, consume_ranges, ranges_batch
from ingest.kafka_source.offsets import EARLIEST, OffsetRange

pytestmark = [pytest.mark.kafka]


def _settings(bootstrap: str, **options) -> ConsumeSettings:
    return ConsumeSettings((("bootstrap.servers", bootstrap),), **options)


def _read(bootstrap: str, ranges: list[OffsetRange], **options) -> list[dict]:
    batches = consume_ranges(iter([ranges_batch(ranges)]), _settings(bootstrap, **options))
    return [row for batch in batches for row in batch.to_pylist()]


def _produce(bootstrap: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value, key=value, partition=partition, headers=[("h", b"x")])
    assert producer.flush(30) == 0


def test_a_range_is_read_exactly_with_the_columns_of_sparks_source(kafka_bootstrap, new_topic):
    topic = new_topic("src-range", partitions=2)
    _produce(kafka_bootstrap, topic, [b"%d" % i for i in range(100)], partition=0)
    _produce(kafka_bootstrap, topic, [b"p1-%d" % i for i in range(10)], partition=1)
    rows = _read(kafka_bootstrap, [OffsetRange(topic, 0, 17, 60), OffsetRange(topic, 1, EARLIEST, 10)],
                 rows_per_batch=7)
    assert [r["offset"] for r in rows if r["partition"] == 0] == list(range(17, 60))
    assert [r["value"] for r in rows if r["partition"] == 0] == [b"%d" % i for i in range(17, 60)]
    assert [r["offset"] for r in rows if r["partition"] == 1] == list(range(10))
    first = rows[0]
    assert first["key"] == b"17" and first["topic"] == topic and first["timestampType"] == 0
    assert first["headers"] == [{"key": "h", "value": b"x"}]
    assert first["timestamp"] is not None
    without = _read(kafka_bootstrap, [OffsetRange(topic, 0, 0, 5)], with_headers=False)
    assert len(without) == 5 and "headers" not in without[0]


def test_aborted_transactions_and_their_markers_are_skipped(kafka_bootstrap, new_topic):
    """read_committed (librdkafka's default): a range over committed, aborted and marker offsets
    returns the committed records only, and ends although its last offsets are not records."""
    topic = new_topic("src-txn")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"floe-test-{topic}"})
    producer.init_transactions(30)
    for n, commit in enumerate((True, False, True, False)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=b"%d-%d" % (n, i), partition=0)
        producer.flush(30)  # aborted records too reach the log (an abort would otherwise purge them unsent)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    until = 4 * 6  # 4 transactions of 5 records and a marker each
    probe = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "probe"})
    assert probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, until)
    probe.close()
    rows = _read(kafka_bootstrap, [OffsetRange(topic, 0, 0, until)], poll_timeout_s=20)
    assert [r["value"] for r in rows] == [b"0-%d" % i for i in range(5)] + [b"2-%d" % i for i in range(5)]


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_offsets_deleted_by_retention(kafka_bootstrap, new_topic, fail_on_data_loss):
    topic = new_topic("src-loss")
    _produce(kafka_bootstrap, topic, [b"%d" % i for i in range(50)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 30)]).values():
        future.result(timeout=30)
    wanted = [OffsetRange(topic, 0, 10, 50)]
    if fail_on_data_loss:
        with pytest.raises(DataLossError, match=r"offsets 10\.\.29 were deleted"):
            _read(kafka_bootstrap, wanted)
    else:
        assert [r["offset"] for r in _read(kafka_bootstrap, wanted, fail_on_data_loss=False)] == list(range(30, 50))


def test_many_ranges_read_together_hand_on_each_range_apart(kafka_bootstrap, new_topic):
    """consume_many, a shared query's fan-out read: every range exactly, a batch per range at a time, a
    range whose start retention deleted read on its own, a range past the partition's records ended by its
    marker, however many ranges share the consumer."""
    a, b = new_topic("many-a", partitions=3), new_topic("many-b")
    for p in range(3):
        _produce(kafka_bootstrap, a, [b"a%d-%d" % (p, i) for i in range(40)], partition=p)
    _produce(kafka_bootstrap, b, [b"b-%d" % i for i in range(50)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(b, 0, 20)]).values():
        future.result(timeout=30)
    wanted = [OffsetRange(a, 0, 5, 40), OffsetRange(a, 1, EARLIEST, 12), OffsetRange(a, 2, 39, 40),
              OffsetRange(b, 0, 10, 50), OffsetRange(a, 2, 40, 40)]
    batches = list(consume_many(wanted, _settings(kafka_bootstrap, rows_per_batch=8, fail_on_data_loss=False)))
    for batch in batches:
        assert len(set(zip(batch.column("topic").to_pylist(), batch.column("partition").to_pylist()))) == 1
    rows = [r for batch in batches for r in batch.to_pylist()]
    got = {(t, p): [r["offset"] for r in rows if (r["topic"], r["partition"]) == (t, p)]
           for t, p in [(a, 0), (a, 1), (a, 2), (b, 0)]}
    assert got == {(a, 0): list(range(5, 40)), (a, 1): list(range(12)), (a, 2): [39], (b, 0): list(range(20, 50))}
    assert [r["value"] for r in rows if r["topic"] == b][:2] == [b"b-20", b"b-21"]


def test_starting_offsets_are_resolved_once_per_checkpoint(kafka_bootstrap, new_topic, tmp_path):
    """``latest`` is pinned to offsets when a checkpoint begins: a batch 0 replayed after a crash
    starts where the first attempt did, although records arrived in between."""
    from ingest.kafka_source.watermarks import TopicWatermarks
    from ingest.driver.stream import pinned_starting_offsets

    topic = new_topic("src-pin", partitions=2)
    _produce(kafka_bootstrap, topic, [b"a", b"b", b"c"])
    kafka = TopicWatermarks({"bootstrap.servers": kafka_bootstrap}, (topic,), None)
    try:
        first = pinned_starting_offsets(str(tmp_path / "checkpoint"), "latest", kafka)
        assert json.loads(first) == {topic: {"0": 3, "1": 0}}
        _produce(kafka_bootstrap, topic, [b"d"])
        assert pinned_starting_offsets(str(tmp_path / "checkpoint"), "latest", kafka) == first
        assert json.loads(pinned_starting_offsets(str(tmp_path / "other"), "earliest", kafka)) == \
            {topic: {"0": 0, "1": 0}}
    finally:
        kafka.close()


def test_watermarks_of_topics_just_created_ride_out_a_moving_leader(kafka_bootstrap, new_topic):
    """Right after a topic is created, a partition may answer "not leader" for a moment (seen
    starting a query on a new topic): the start waits it out instead of failing."""
    from ingest.kafka_source.watermarks import TopicWatermarks

    for _ in range(8):
        topic = new_topic("src-fresh", partitions=4)
        probe = TopicWatermarks({"bootstrap.servers": kafka_bootstrap}, (topic,), None)
        try:
            assert probe.watermarks() == {topic: {p: (0, 0) for p in range(4)}}
        finally:
            probe.close()


def test_librdkafka_lines_of_a_tasks_consumer_are_floes_log_lines_not_raw_stderr(caplog, capfd):
    """A broker that cannot be reached: librdkafka's complaint reaches Python logging (floe.librdkafka), as
    the lag probe's and the dead-letter producer's do, instead of being printed raw by its own threads."""
    import logging
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = ConsumeSettings((("bootstrap.servers", f"127.0.0.1:{port}"),))
    consumer = Consumer(settings.consumer_config())
    try:
        with caplog.at_level(logging.DEBUG, logger="floe.librdkafka"):
            for _ in range(10):
                consumer.consume(num_messages=1, timeout=0.3)
                if any("refused" in r.getMessage() for r in caplog.records):
                    break
    finally:
        consumer.close()
    assert any(r.name == "floe.librdkafka" and "refused" in r.getMessage() for r in caplog.records)
    refused = [line for line in capfd.readouterr().err.splitlines() if "refused" in line]
    assert all(line.startswith("{") and json.loads(line)["logger"] == "floe.librdkafka" for line in refused), \
        f"on stderr only as Floe's log lines (a worker configures Floe's format for them), never raw: {refused}"


def test_watermarks_of_many_partitions_in_one_request_match_each_partitions_own(kafka_bootstrap, new_topic):
    """One ListOffsets request for every partition gives what asking each partition does: the log start
    after deleted records, and under read_committed the last stable offset below an open transaction."""
    from confluent_kafka.admin import AdminClient

    from ingest.kafka_source.watermarks import TopicWatermarks

    topic, other = new_topic("src-marks", partitions=3), new_topic("src-marks-b", partitions=1)
    _produce(kafka_bootstrap, topic, [b"a%d" % i for i in range(7)], partition=0)
    _produce(kafka_bootstrap, topic, [b"b%d" % i for i in range(3)], partition=2)
    _produce(kafka_bootstrap, other, [b"c%d" % i for i in range(5)])
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(30)
    open_tx = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"floe-test-{other}"})
    open_tx.init_transactions(30)
    open_tx.begin_transaction()
    open_tx.produce(other, value=b"open", partition=0)
    assert open_tx.flush(30) == 0
    try:
        for isolation, other_high in (("read_committed", 5), ("read_uncommitted", 6)):
            client = {"bootstrap.servers": kafka_bootstrap, "isolation.level": isolation}
            probe = TopicWatermarks(client, (topic, other), None)
            own = Consumer({**client, "group.id": "floe-test-marks"})
            try:
                marks = probe.watermarks()
                each = {t: {p: own.get_watermark_offsets(TopicPartition(t, p), timeout=30, cached=False)
                            for p in marks[t]} for t in (topic, other)}
            finally:
                probe.close()
                own.close()
            assert marks == each, isolation
            assert marks == {topic: {0: (4, 7), 1: (0, 0), 2: (0, 3)}, other: {0: (0, other_high)}}, isolation
    finally:
        open_tx.abort_transaction(30)
