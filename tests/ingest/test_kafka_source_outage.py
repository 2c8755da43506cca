"""Floe's Kafka source rides out an unreachable broker: its planner plans no batch, its tasks wait.

Each test starts a broker of its own (the session's is shared), stops or
freezes it, and waits for states: the planner's or the task's line saying it
waits, the broker back. No Spark: the planner (:class:`KafkaRangeReader`) and
a task's read (:func:`consume_ranges`) are driven as Spark drives them.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pytest

from ingest.kafka_source.consume import ConsumerPool, ConsumeSettings, consume_ranges, ranges_batch
from ingest.kafka_source.offsets import OffsetRange
from ingest.kafka_source.reader import KafkaRangeReader
from service.local_kafka import LocalKafka
from tests.ingest.e2e_support import change_events, create_topic, produce

pytestmark = pytest.mark.kafka


@pytest.fixture()
def own_kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    """A broker this test may stop, restart (same port, same data) and freeze."""
    with LocalKafka(tmp_path / "kafka") as kafka:
        yield kafka


def wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:.0f}s: {what}"
        time.sleep(0.1)


def waiting_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "floe.ingest" and "is unreachable" in r.getMessage()]


def test_the_planner_plans_no_batch_while_the_broker_is_down_and_goes_on_exactly_when_it_is_back(own_kafka, caplog):
    bootstrap = own_kafka.bootstrap
    topic = create_topic(bootstrap, "outage", partitions=2)
    produce(bootstrap, topic, change_events(40, 10, seed=1))
    planner = KafkaRangeReader({"subscribe": topic, "kafka.bootstrap.servers": bootstrap, "startingOffsets": "earliest"})
    caplog.set_level("WARNING", logger="floe.ingest")
    try:
        start = planner.initialOffset()
        end = planner.latestOffset()
        assert sum(end[topic].values()) - sum(start[topic].values()) == 40
        planner.partitions(start, end)  # batch 0 planned; the next starts at its end

        own_kafka.stop()
        wait_for("the planner says it waits for Kafka", lambda: planner.latestOffset() == end and bool(waiting_lines(caplog)))
        for _ in range(20):  # Spark's triggers meanwhile: no batch, no failure, no line per try
            assert planner.latestOffset() == end
        [line] = waiting_lines(caplog)
        assert line.startswith(f"kafka {bootstrap} is unreachable: ") and "plans no batch until it answers" in line
        assert "KafkaError{" not in line, "worded for a person"

        own_kafka.start()  # the same broker, port and data, back
        produce(bootstrap, topic, change_events(25, 10, seed=2))
        wait_for("a batch of the new records", lambda: planner.latestOffset() != end)
        later = planner.latestOffset()
        assert sum(later[topic].values()) - sum(end[topic].values()) == 25, "nothing lost, nothing twice"
    finally:
        planner.stop()


def read_all(ranges: list[OffsetRange], settings: ConsumeSettings, pool: ConsumerPool) -> pa.Table:
    return pa.Table.from_batches(list(consume_ranges(iter([ranges_batch(ranges)]), settings, pool)))


@pytest.mark.parametrize("outage", ["frozen", "stopped"])
def test_a_task_waits_out_a_broker_that_does_not_answer_past_its_stall_limit(own_kafka, caplog, outage):
    """The stall limit (3 s here) counts only silence from a Kafka that answers."""
    bootstrap = own_kafka.bootstrap
    topic = create_topic(bootstrap, "outage", partitions=1)
    delivered = produce(bootstrap, topic, change_events(30, 10, seed=3))
    settings = ConsumeSettings(client=(("bootstrap.servers", bootstrap),), poll_timeout_s=3.0, probe_after_s=1.0)
    caplog.set_level("WARNING", logger="floe.ingest")
    pool, result, failure = ConsumerPool(), [], []

    def task() -> None:
        try:
            result.append(read_all([OffsetRange(topic, 0, 0, 30)], settings, pool))
        except BaseException as error:  # noqa: BLE001 - the test reports it
            failure.append(error)

    own_kafka.freeze() if outage == "frozen" else own_kafka.stop()
    reader = threading.Thread(target=task)
    reader.start()
    try:
        wait_for("the task says it waits for Kafka", lambda: bool(waiting_lines(caplog)) or not reader.is_alive())
        assert not failure, failure
        [line] = waiting_lines(caplog)
        assert f"kafka {bootstrap} is unreachable: " in line and f"the task reading {topic}/0 at offset 0" in line
        assert "KafkaError{" not in line
        outage_began = time.monotonic()
        while time.monotonic() - outage_began < 3 * settings.poll_timeout_s:  # the outage lasts past the limit
            assert reader.is_alive() and not failure, failure
            time.sleep(0.2)
    finally:
        own_kafka.thaw() if outage == "frozen" else own_kafka.start()
        reader.join(120)
        pool.close_idle()
    assert not reader.is_alive() and not failure, failure
    [table] = result
    assert table.column("offset").to_pylist() == list(range(30)), "every record of the range, once"
    assert table.column("value").to_pylist() == [d.event.value for d in sorted(delivered, key=lambda d: d.offset)]
    assert len(waiting_lines(caplog)) == 1, "one line, not one per try"


def test_watermarks_make_their_client_anew_after_failures_in_a_row_and_answer_once_kafka_does(own_kafka):
    """A metadata client that lived through a broker outage may go on failing against a broker that
    answers new clients (seen after a 60 s freeze, on the source's planner): after REBUILD_AFTER failed
    requests in a row TopicWatermarks closes its consumer, and the next request makes a new one."""
    from confluent_kafka import KafkaException

    from ingest.kafka_source.watermarks import TopicWatermarks

    topic = create_topic(own_kafka.bootstrap, "src-anew", partitions=2)
    probe = TopicWatermarks({"bootstrap.servers": own_kafka.bootstrap}, (topic,), None, timeout_s=2.0)
    try:
        assert probe.watermarks() == {topic: {0: (0, 0), 1: (0, 0)}}
        first = probe._consumer
        own_kafka.stop()
        for failure in range(1, TopicWatermarks.REBUILD_AFTER + 1):
            with pytest.raises(KafkaException):
                probe.watermarks()
            if failure < TopicWatermarks.REBUILD_AFTER:
                assert probe._consumer is first, "a failure or two keep the client"
        assert probe._consumer is None, "closed after REBUILD_AFTER failures in a row"
        own_kafka.start()
        wait_for("the watermarks again", lambda: _answers(probe))
        assert probe._consumer is not first
    finally:
        probe.close()


def _answers(probe) -> bool:
    from confluent_kafka import KafkaException

    try:
        probe.watermarks()
        return True
    except KafkaException:
        return False
