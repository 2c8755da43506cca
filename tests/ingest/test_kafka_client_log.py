"""librdkafka's own lines through Floe's log: each kind at most once a minute, with the count held back."""

from __future__ import annotations

import logging

import pytest

from ingest.kafka_source.client_log import LibrdkafkaLog

REFUSED = ("127.0.0.1:{port}/bootstrap: Connect to ipv4#127.0.0.1:{port} failed: Connection refused "
           "(after {ms}ms in state CONNECT)")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def quiet_log(clock: Clock) -> LibrdkafkaLog:
    return LibrdkafkaLog(every_s=60.0, clock=clock, logger=logging.getLogger("test.librdkafka"), configure=lambda: None)


def test_a_connection_failure_repeated_at_every_reconnect_is_one_line_a_minute_with_the_count(caplog):
    caplog.set_level(logging.DEBUG, logger="test.librdkafka")
    clock = Clock()
    log = quiet_log(clock)
    for second in range(0, 130):  # librdkafka reconnecting every second for two minutes
        clock.now = float(second)
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                REFUSED.format(port=46153, ms=second % 7))
    lines = caplog.messages
    assert len(lines) == 3, lines
    assert lines[0].startswith("FAIL [rdkafka#consumer-1] 127.0.0.1:46153/bootstrap: Connect to")
    assert lines[1].endswith("(59 more like it in the last 60s)") and lines[2].endswith("(59 more like it in the last 60s)")


def test_lines_of_different_kinds_and_levels_are_each_kept(caplog):
    caplog.set_level(logging.DEBUG, logger="test.librdkafka")
    clock = Clock()
    log = quiet_log(clock)
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(port=1, ms=0))
    log.log(logging.ERROR, "%s [%s] %s", "SSL", "rdkafka#consumer-1", "handshake failed: certificate verify failed")
    log.log(logging.WARNING, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(port=1, ms=0))
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(port=2, ms=5))
    assert len(caplog.messages) == 3, "a repeat with other numbers is the same kind; another facility or level is not"
    clock.now = 60.0
    log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", REFUSED.format(port=1, ms=0))
    assert caplog.messages[-1].endswith("(1 more like it in the last 60s)")
