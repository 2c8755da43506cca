"""Smoke test: Spark's Kafka source reads a real broker exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

MESSAGES = 10_000
PARTITIONS = 3


def produce_keyed_json(bootstrap: str, topic: str, count: int) -> dict[str, tuple[int, int, dict]]:
    """Produces ``count`` keyed JSON messages; returns key -> (partition, offset, value)."""
    delivered: dict[str, tuple[int, int, dict]] = {}
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        key = msg.key().decode()
        delivered[key] = (msg.partition(), msg.offset(), json.loads(msg.value()))

    for i in range(count):
        value = {"id": i, "name": f"user-{i}", "amount": i * 0.5}
        producer.produce(topic, key=f"k{i}".encode(), value=json.dumps(value).encode(), on_delivery=on_delivery)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "producer could not deliver every message"
    assert not errors, errors[:5]
    return delivered


def test_spark_reads_every_kafka_message_exactly_once(spark, kafka_bootstrap, new_topic, tmp_path: Path):
    topic = new_topic("smoke", partitions=PARTITIONS)
    expected = produce_keyed_json(kafka_bootstrap, topic, MESSAGES)
    assert len(expected) == MESSAGES
    assert {p for p, _, _ in expected.values()} == set(range(PARTITIONS)), "keys should spread over partitions"

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 4000)
        .load()
        .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value", "partition", "offset", "topic")
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(tmp_path / "sink"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert not query.isActive, "the AvailableNow query did not finish"
    assert query.exception() is None
    batches = query.recentProgress
    assert len(batches) >= 3, "maxOffsetsPerTrigger should have split the input into several micro-batches"

    rows = spark.read.parquet(str(tmp_path / "sink")).toArrow().to_pylist()
    assert len(rows) == MESSAGES
    assert len({(r["partition"], r["offset"]) for r in rows}) == MESSAGES, "a message arrived twice"
    for row in rows:
        partition, offset, value = expected[row["key"]]
        assert (row["topic"], row["partition"], row["offset"]) == (topic, partition, offset)
        assert json.loads(row["value"]) == value
