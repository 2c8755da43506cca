"""Floe on a Kafka that demands authentication and authorizes by ACL (issue 35).

One broker (:class:`tests.support.secured_kafka.SecuredKafka`) for the module: SASL_SSL with SCRAM-SHA-512
and PLAIN, TLS from a CA made at run time, ``StandardAuthorizer`` with nothing allowed unless granted. Floe's
principal gets exactly :data:`FLOE_GRANTS` (docs/security.md lists them): read and describe its tables'
topics, write and describe its dead-letter topic. Nothing on a consumer group, nothing on the cluster.

Each test runs ``floe ingest`` as an operator would (``trigger.available_now``, so it ends when Kafka's
records are in), then checks the rows, the dead letters, and that no secret appears in anything Floe put
out (:mod:`tests.support.secret_scan`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import threading
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AclOperation, ResourceType

from tests.faults.rig import FLOE, STACK_TRACE
from tests.ingest.e2e_support import (
    REPO,
    Event,
    change_events,
    consume_all,
    create_topic,
    expected_table,
    json_log_records,
    produce,
)
from tests.service.test_ingest_command import events_config, read_rows
from tests.support.certificates import CertificateAuthority
from tests.support.postgres import free_port
from tests.support.secret_scan import assert_no_secret, findings
from tests.support.secured_kafka import Grant, SecuredKafka

PASSWORD = f"floe-{uuid.uuid4().hex}"  # the principal's password: a fresh one per run, scanned for
BAD_RECORDS = [Event(json.dumps(900_000 + i).encode(), b"{not json " + str(i).encode()) for i in range(5)]


def floe_grants(topic: str, dead_letters: str) -> list[Grant]:
    """Least privilege for ``floe ingest``: its topic to read, its dead-letter topic to write."""
    return [
        Grant("floe", ResourceType.TOPIC, topic, AclOperation.READ),
        Grant("floe", ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
        Grant("floe", ResourceType.TOPIC, dead_letters, AclOperation.WRITE),
        Grant("floe", ResourceType.TOPIC, dead_letters, AclOperation.DESCRIBE),
    ]


@pytest.fixture(scope="module")
def secured_kafka(tmp_path_factory: pytest.TempPathFactory):
    with SecuredKafka(tmp_path_factory.mktemp("secured-kafka"), users={"floe": PASSWORD}) as kafka:
        yield kafka


def secured_config(home: Path, kafka: SecuredKafka, topic: str, dead_letters: str, reader: str,
                   sasl: dict[str, Any]) -> Path:
    raw = events_config(home, kafka.sasl_bootstrap, topic, trigger={"available_now": True},
                        table={"bad_records": "dead-letter", "dead_letter_topic": dead_letters})
    raw["kafka"]["reader"] = reader
    raw["kafka"]["security"] = {"protocol": "SASL_SSL", "sasl": sasl, "ssl": {"ca_file": str(kafka.ca.ca_file)}}
    raw["log_format"] = "json"
    raw["http"] = {"host": "127.0.0.1", "ingest_port": free_port()}
    path = home / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


class MetricsScraper:
    """Reads ``/metrics`` every half second while ``floe ingest`` runs: what a Prometheus would have stored,
    for the secret scan."""

    def __init__(self, config: Path) -> None:
        port = yaml.safe_load(config.read_text())["http"]["ingest_port"]
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.pages: list[str] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._scrape, daemon=True)

    def __enter__(self) -> MetricsScraper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(10)

    def _scrape(self) -> None:
        while not self.done.wait(0.5):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as answer:
                    self.pages.append(answer.read().decode())
            except OSError:  # not listening yet, or gone
                continue


def run_floe(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*FLOE, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def land_exactly(kafka: SecuredKafka, home: Path, config: Path, delivered: list, dead_letters: str,
                 env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list]:
    """``floe ingest`` to the end of its topic: it exits 0, every record landed once, every bad record is a
    dead letter once. The run, and the dead letters."""
    with MetricsScraper(config) as metrics:
        landed = run_floe("ingest", "--config", str(config), env=env)
    assert landed.returncode == 0, landed.stdout[-3000:] + landed.stderr[-3000:]
    assert read_rows(home)[0] == expected_table(delivered), "every record landed exactly once"
    letters = consume_all(kafka.bootstrap, dead_letters, expected=len(BAD_RECORDS))
    assert sorted(m.value() for m in letters) == sorted(e.value for e in BAD_RECORDS), "each bad record, once"
    assert any("floe_ingest_" in page for page in metrics.pages), "/metrics was read while it ran"
    assert_no_secret({"/metrics": "".join(metrics.pages)}, {"the SASL password": PASSWORD})
    return landed, letters


# Each source with its own mechanism and its own way of being given the password: a file (a mounted
# Secret), the environment. Inline in the YAML is how every other test here gives it, and the denied
# dead-letter test lands end to end that way, secret scan included.
SOURCES = [
    pytest.param("python", "SCRAM-SHA-512", "file", id="floe-source-scram-password-file"),
    pytest.param("spark", "PLAIN", "environment", id="spark-source-plain-password-from-environment"),
]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.parametrize("reader, mechanism, given", SOURCES)
def test_upserts_and_dead_letters_land_exactly_on_sasl_ssl_with_least_privilege(
        secured_kafka, tmp_path, reader, mechanism, given):
    kafka = secured_kafka
    topic = create_topic(kafka.bootstrap, "secured", partitions=2)
    dead_letters = create_topic(kafka.bootstrap, "secured-dlq")
    kafka.grant(*floe_grants(topic, dead_letters))
    delivered = produce(kafka.bootstrap, topic, change_events(2000, 120, seed=35))
    produce(kafka.bootstrap, topic, BAD_RECORDS)
    delivered += produce(kafka.bootstrap, topic, change_events(500, 120, seed=36))

    sasl: dict[str, Any] = {"mechanism": mechanism, "username": "floe"}
    env = {}
    if given == "file":
        (tmp_path / "kafka-password").write_text(PASSWORD + "\n")
        sasl["password_file"] = str(tmp_path / "kafka-password")
    elif given == "inline":
        sasl["password"] = PASSWORD
    else:
        env["FLOE_KAFKA__SECURITY__SASL__PASSWORD"] = PASSWORD
    config = secured_config(tmp_path, kafka, topic, dead_letters, reader, sasl)

    ingest, letters = land_exactly(kafka, tmp_path, config, delivered, dead_letters, env)

    check = run_floe("check", "--config", str(config), "--show-config", env=env, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    compact = run_floe("compact", "--once", "--config", str(config), env=env, timeout=300)
    assert compact.returncode == 0, compact.stdout[-3000:] + compact.stderr[-3000:]
    assert read_rows(tmp_path)[0] == expected_table(delivered), "the compactor beside it keeps every row"
    outputs = {"floe ingest": ingest.stdout + ingest.stderr, "floe check --show-config": check.stdout + check.stderr,
               "floe compact --once": compact.stdout + compact.stderr,
               "dead letters": b"".join(m.value() + b"".join(v or b"" for _, v in (m.headers() or [])) for m in letters)}
    assert_no_secret(outputs, {"the SASL password": PASSWORD})
    assert not STACK_TRACE.search(ingest.stdout + ingest.stderr), ingest.stderr[-3000:]


def test_the_secret_scan_finds_a_planted_secret():
    """The scan can fail: a password in a log line, base64'd in a header, or a private key, each found."""
    secret = "planted-" + uuid.uuid4().hex
    import base64

    outputs = {"log": f'{{"message": "connecting with password={secret}"}}',
               "header": b"x" + base64.b64encode(secret.encode()),
               "clean": "nothing here", "key dump": "-----BEGIN PRIVATE KEY-----\nMIIE"}
    assert findings(outputs, {"the password": secret}) == ["log: the password", "header: the password",
                                                            "key dump: a private key"]



def start_refused(kafka: SecuredKafka, tmp_path: Path, reader: str, grants: list[Grant] | None = None,
                  **security: Any) -> tuple[subprocess.CompletedProcess, str]:
    """``floe ingest`` on a fresh topic with ``security`` in place of the principal's own; its result and
    the topic."""
    topic = create_topic(kafka.bootstrap, "refused")
    dead_letters = create_topic(kafka.bootstrap, "refused-dlq")
    kafka.grant(*(floe_grants(topic, dead_letters) if grants is None else grants))
    produce(kafka.bootstrap, topic, change_events(50, 10, seed=1))
    sasl = {"mechanism": "SCRAM-SHA-512", "username": "floe", "password": PASSWORD, **security.pop("sasl", {})}
    config = secured_config(tmp_path, kafka, topic, dead_letters, reader, sasl)
    if security:
        raw = yaml.safe_load(config.read_text())
        raw["kafka"]["security"].update(security)
        config.write_text(yaml.safe_dump(raw))
    return run_floe("ingest", "--config", str(config), timeout=300), topic


def assert_refused_in_one_line(done: subprocess.CompletedProcess, tmp_path: Path, line: str) -> None:
    """Exit 1 (Floe refused to start), the one line on stderr, nothing created, no secret anywhere."""
    assert (done.returncode, done.stderr.strip().splitlines()) == (1, [line]), done.stdout[-2000:] + done.stderr
    assert not (tmp_path / "catalog.db").exists(), "nothing was created"
    assert_no_secret({"floe ingest": done.stdout + done.stderr}, {"the SASL password": PASSWORD})


@pytest.mark.kafka
@pytest.mark.parametrize("reader", ["python", "spark"])
def test_a_wrong_password_is_refused_in_one_line_naming_the_listener_and_principal(secured_kafka, tmp_path, reader):
    kafka = secured_kafka
    done, _ = start_refused(kafka, tmp_path, reader, sasl={"password": "not-the-password"})
    assert_refused_in_one_line(done, tmp_path, (
        f"floe ingest: kafka {kafka.sasl_bootstrap}: connecting as SASL user 'floe' (SCRAM-SHA-512 over SASL_SSL) "
        "failed: SASL authentication error: Authentication failed during authentication due to invalid credentials "
        "with SASL mechanism SCRAM-SHA-512; check kafka.security: the credentials, the CA and the client "
        "certificate ('floe check' runs the same probe)"))
    assert "not-the-password" not in done.stdout + done.stderr


@pytest.mark.kafka
def test_an_untrusted_broker_certificate_is_refused_in_one_line(secured_kafka, tmp_path):
    other = CertificateAuthority(tmp_path / "other-ca", "Some other CA")
    done, _ = start_refused(secured_kafka, tmp_path, "python", ssl={"ca_file": str(other.ca_file)})
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith(
        f"floe ingest: kafka {secured_kafka.sasl_bootstrap}: connecting as SASL user 'floe' (SCRAM-SHA-512 over "
        "SASL_SSL) failed: SSL handshake failed:"), done.stderr
    assert "certificate verify failed" in done.stderr
    assert_no_secret({"floe ingest": done.stdout + done.stderr}, {"the SASL password": PASSWORD})


@pytest.mark.kafka
@pytest.mark.parametrize("reader", ["python", "spark"])
def test_a_topic_the_acls_deny_is_refused_in_one_line(secured_kafka, tmp_path, reader):
    done, topic = start_refused(secured_kafka, tmp_path, reader, grants=[])
    assert_refused_in_one_line(done, tmp_path, (
        f"floe ingest: kafka {secured_kafka.sasl_bootstrap}: SASL user 'floe' (SCRAM-SHA-512 over SASL_SSL) is not "
        f"authorized to describe topics: {topic}; grant the principal READ and DESCRIBE on them (docs/security.md) "
        "('floe check' runs the same probe)"))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.parametrize("reader", ["python"])
def test_a_denied_dead_letter_topic_fails_the_batch_and_drops_no_record(secured_kafka, tmp_path, reader):
    """The batch with bad records fails (exit 1, one line naming the topic and the refusal) and commits
    nothing; once WRITE is granted the same command lands every record and every dead letter, once.
    (Dead letters are written by Floe's decode tasks whichever source reads, so one source is tried.)"""
    kafka = secured_kafka
    topic = create_topic(kafka.bootstrap, "denied-dlq-src", partitions=2)
    dead_letters = create_topic(kafka.bootstrap, "denied-dlq")
    grants = floe_grants(topic, dead_letters)
    kafka.grant(*grants[:2], grants[3])  # the dead-letter topic may be described, not written
    delivered = produce(kafka.bootstrap, topic, change_events(400, 40, seed=37))
    produce(kafka.bootstrap, topic, BAD_RECORDS)
    config = secured_config(tmp_path, kafka, topic, dead_letters, reader,
                            {"mechanism": "SCRAM-SHA-512", "username": "floe", "password": PASSWORD})

    refused = run_floe("ingest", "--config", str(config))
    assert refused.returncode == 1, refused.stdout[-3000:] + refused.stderr[-3000:]
    failed = [r for r in json_log_records(refused.stdout + refused.stderr) if r.get("message") == "batch 0 failed"]
    assert len(failed) == 1 and re.fullmatch(
        rf"DeadLetterDeliveryError: (\d) of \1 dead letters failed on topic '{dead_letters}' \(written as SASL "
        r"user 'floe' \(SCRAM-SHA-512 over SASL_SSL\)\): Broker: Topic authorization failed "
        r"\(TOPIC_AUTHORIZATION_FAILED\)", failed[0]["error"]), failed  # each task's dead letters fail alone
    rows, metadata = read_rows(tmp_path)
    assert rows == {} and metadata.current_snapshot_id is None, "the failed batch committed nothing"

    kafka.grant(grants[2])
    landed, _ = land_exactly(kafka, tmp_path, config, delivered, dead_letters)
    assert_no_secret({"refused": refused.stdout + refused.stderr, "landed": landed.stdout + landed.stderr},
                     {"the SASL password": PASSWORD})



@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.parametrize("reader", ["python", "spark"])
def test_a_topic_that_may_be_described_but_not_read_fails_the_batch_in_one_line(secured_kafka, tmp_path, reader):
    """DESCRIBE granted, READ not: the start-up probe passes, the first batch's read is refused at once (no
    wait for a stall deadline), the batch fails naming the topic, and nothing is committed."""
    kafka = secured_kafka
    topic = create_topic(kafka.bootstrap, "noread")
    dead_letters = create_topic(kafka.bootstrap, "noread-dlq")
    grants = floe_grants(topic, dead_letters)
    kafka.grant(*grants[1:])
    produce(kafka.bootstrap, topic, change_events(50, 10, seed=1))
    config = secured_config(tmp_path, kafka, topic, dead_letters, reader,
                            {"mechanism": "SCRAM-SHA-512", "username": "floe", "password": PASSWORD})
    done = run_floe("ingest", "--config", str(config), timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = [r["error"] for r in json_log_records(done.stdout + done.stderr) if r.get("message") == "batch 0 failed"]
    assert failed == [{
        "python": f"KafkaReadRefusedError: kafka refused SASL user 'floe' (SCRAM-SHA-512 over SASL_SSL) reading "
                  f"{topic}/0: Fetch from broker 1 failed: Broker: Topic authorization failed",
        "spark": f"TopicAuthorizationException: Not authorized to access topics: [{topic}]",
    }[reader]], failed
    assert read_rows(tmp_path)[1].current_snapshot_id is None, "nothing committed"
    assert_no_secret({"floe ingest": done.stdout + done.stderr}, {"the SASL password": PASSWORD})


def mtls_config(home: Path, kafka: SecuredKafka, topic: str, dead_letters: str, keystore: Path) -> Path:
    raw = events_config(home, kafka.mtls_bootstrap, topic, trigger={"available_now": True},
                        table={"bad_records": "dead-letter", "dead_letter_topic": dead_letters})
    raw["kafka"]["reader"] = "python"
    raw["kafka"]["security"] = {"protocol": "SSL", "ssl": {"ca_file": str(kafka.ca.ca_file),
                                                           "keystore_file": str(keystore)}}
    raw["log_format"] = "json"
    raw["http"] = {"host": "127.0.0.1", "ingest_port": free_port()}
    path = home / "floe.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.kafka
@pytest.mark.spark
def test_mutual_tls_lands_exactly_as_the_certificates_principal_and_an_expired_one_is_refused(
        secured_kafka, tmp_path):
    """On the mutual-TLS listener the principal is the client certificate's CN: it lands everything under
    its own ACLs, and an expired certificate of the same name is refused at start in one line."""
    kafka = secured_kafka
    topic = create_topic(kafka.bootstrap, "mtls", partitions=2)
    dead_letters = create_topic(kafka.bootstrap, "mtls-dlq")
    kafka.grant(*(dataclasses.replace(g, principal="floe-mtls") for g in floe_grants(topic, dead_letters)))
    delivered = produce(kafka.bootstrap, topic, change_events(600, 60, seed=38))
    produce(kafka.bootstrap, topic, BAD_RECORDS)

    expired = kafka.ca.issue("floe-mtls", expired=True)
    (tmp_path / "expired").mkdir()
    refused = run_floe("ingest", "--config", str(mtls_config(tmp_path / "expired", kafka, topic, dead_letters,
                                                             expired.pem)), timeout=300)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(
        f"floe ingest: kafka {kafka.mtls_bootstrap}: connecting as the certificate in {expired.pem} (SSL) failed: "
    ), refused.stderr

    client = kafka.ca.issue("floe-mtls")
    config = mtls_config(tmp_path, kafka, topic, dead_letters, client.pem)
    landed, _ = land_exactly(kafka, tmp_path, config, delivered, dead_letters)
    assert_no_secret({"refused": refused.stdout + refused.stderr, "landed": landed.stdout + landed.stderr},
                     {"the SASL password": PASSWORD})
