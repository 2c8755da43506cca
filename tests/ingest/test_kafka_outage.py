"""Riding out a Kafka outage, the pure rules: which errors are one, the backoff, when a line is due, the words."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from ingest.kafka_source.outage import (
    Backoff,
    Outage,
    in_words,
    is_outage,
    is_refusal,
    kafka_error,
    principal_of,
    refusal_in_words,
)


def test_the_backoff_doubles_to_its_cap_and_is_jittered_within_the_upper_half_of_each_step():
    backoff = Backoff(first_s=1.0, cap_s=30.0)
    assert [backoff.delay_s(n, 0.999999) for n in range(1, 8)] == pytest.approx([1, 2, 4, 8, 16, 30, 30], rel=1e-5)
    assert [backoff.delay_s(n, 0.0) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 15, 15]
    assert backoff.delay_s(1000, 0.5) == 22.5, "bounded: no wait past the cap, however long the outage"


def test_an_outage_is_one_line_when_it_begins_then_one_per_report_interval_whatever_the_tries():
    outage = Outage(Backoff(1.0, 30.0), report_every_s=60.0)
    assert outage.may_try(0.0) and outage.answered(0.0) is None, "no outage yet"
    tries, lines = [], []
    for now in range(0, 150, 2):  # a caller asking every 2 s
        if outage.may_try(now):
            tries.append(now)
            if outage.failed(now, 0.0):
                lines.append(now)
    assert tries == [0, 2, 4, 6, 10, 18, 34, 50, 66, 82, 98, 114, 130, 146], "waits double to the cap (15 s drawn)"
    assert lines == [0, 66, 130], "a line when it begins, then at the first try a minute after the last line"
    assert outage.down_for_s(150.0) == 150.0
    assert not outage.may_try(outage.next_try - 0.01) and outage.may_try(outage.next_try)
    assert outage.answered(151.0) == 151.0, "how long it lasted"
    assert outage.down_since is None and outage.may_try(151.0)
    assert outage.failed(152.0, 0.0), "a new outage is reported at once"
    assert outage.wait_s(152.0) == 0.5, "and its backoff starts again from the first step"


def test_the_errors_of_an_unreachable_broker_are_an_outage_and_a_refusal_is_not():
    assert is_outage(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure"))
    assert is_outage(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out"))
    assert is_outage(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert is_outage(KafkaError(KafkaError.UNKNOWN, "something retriable", retriable=True))
    # a broker shutting down or starting, a leader moving: what Kafka's Java client retries
    for code in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
                 KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.REPLICA_NOT_AVAILABLE, KafkaError._FAIL):
        assert is_outage(KafkaError(code)), KafkaError(code).name()
    # a partition the metadata had just listed, whose leader librdkafka does not know right now (seen on the
    # planner's watermark request while a broker was stopped or frozen: it ended the query)
    for code in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
        assert is_outage(KafkaError(code)), KafkaError(code).name()
    assert in_words(KafkaError(KafkaError._UNKNOWN_PARTITION, "Failed to get watermark offsets: Local: Unknown partition")) \
        == "no broker leads the partition right now (failed to get watermark offsets)"
    assert not is_outage(KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))
    assert not is_outage(KafkaError(KafkaError._TRANSPORT, "fatal", fatal=True))
    assert not is_outage(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))


def test_librdkafka_errors_are_worded_for_a_person():
    transport = KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")
    assert in_words(transport) == "the connection was refused or lost (failed to get metadata)"
    assert in_words(KafkaError(KafkaError._TIMED_OUT, "Local: Timed out")) == "no answer in time"
    assert in_words(KafkaError(KafkaError.INVALID_CONFIG, "Broker: Invalid config")) == "invalid config"
    assert "KafkaError{" not in in_words(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert kafka_error(KafkaException(transport)) is transport
    assert kafka_error(RuntimeError("not kafka")) is None


def test_a_refusal_is_told_from_an_outage_and_read_without_librdkafka_decorations():
    sasl = KafkaError(KafkaError._AUTHENTICATION, "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: "
                      "Authentication failed due to invalid credentials with SASL mechanism SCRAM-SHA-512 (after "
                      "312ms in state AUTH_REQ)")
    assert is_refusal(sasl) and is_refusal(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not is_refusal(KafkaError(KafkaError._TRANSPORT)), "an outage is waited out"
    assert is_refusal(KafkaError(KafkaError._TRANSPORT, "ssl://h:9094/bootstrap: Receive failed: error:0A000416:SSL "
                                 "routines::ssl/tls alert certificate unknown: SSL alert number 46")), \
        "the broker's TLS alert: it refused the client's certificate"
    assert not is_refusal(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)), "Floe needs no group"
    assert refusal_in_words(sasl) == \
        "SASL authentication error: Authentication failed due to invalid credentials with SASL mechanism SCRAM-SHA-512"


def test_the_principal_is_named_and_the_secret_never():
    assert principal_of({"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "floe",
                         "sasl.password": "s3cret-pw"}) == "SASL user 'floe' (PLAIN over SASL_SSL)"
    assert principal_of({"security.protocol": "ssl", "ssl.certificate.location": "/etc/floe/client.pem"}) == \
        "the certificate in /etc/floe/client.pem (SSL)"
    assert principal_of({"bootstrap.servers": "k:9092"}) == "an unauthenticated client (PLAINTEXT)"
