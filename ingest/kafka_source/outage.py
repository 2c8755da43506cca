"""Riding out a Kafka outage: which errors are one, when to try again, when to say so, and in what words.

A broker that is stopped, restarting or frozen is an outage, not a failure:
Floe's source plans no batch and its tasks wait while it lasts, and the lag
monitor reports it (``floe_ingest_kafka_up`` 0, ``/readyz`` not ready), as
Spark's source rides it out. The callers (:mod:`.reader`, :mod:`.consume`,
:mod:`ingest.driver.metrics`) keep one :class:`Outage` each. Pure: the clock and the
random draw are handed in, and a librdkafka error is read through its
``name()``, ``str()``, ``retriable()`` and ``fatal()``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OUTAGE_ERRORS = frozenset(
    {
        # librdkafka's own: no connection, no answer in time, or a broker not known yet
        "_TRANSPORT",
        "_ALL_BROKERS_DOWN",
        "_TIMED_OUT",
        "_TIMED_OUT_QUEUE",
        "_MSG_TIMED_OUT",
        "_RESOLVE",
        "_FAIL",
        "_WAIT_COORD",
        "_WAIT_CACHE",
        "_NODE_UPDATE",
        # the broker's, among those Kafka's Java client retries (RetriableException): a broker or a
        # leader that is shutting down, starting or moving
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "BROKER_NOT_AVAILABLE",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "REPLICA_NOT_AVAILABLE",
        "OFFSET_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "KAFKA_STORAGE_ERROR",
        "NOT_ENOUGH_REPLICAS",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        # asked of a topic the metadata had just listed: a broker shutting down or not caught up yet
        # (a deleted topic is no longer listed, so it is not asked; a task's read of it stalls, bounded);
        # the broker's answer, or librdkafka's own when its metadata has no leader for it right now
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_PARTITION",
        "_UNKNOWN_TOPIC",
    }
)
"""librdkafka's errors that mean "no broker answers now" (or not yet): waited out, never a failed query."""

_CAUSES = {
    "_TRANSPORT": "the connection was refused or lost",
    "_ALL_BROKERS_DOWN": "no broker is up",
    "_TIMED_OUT": "no answer in time",
    "_TIMED_OUT_QUEUE": "no answer in time",
    "_MSG_TIMED_OUT": "no answer in time",
    "REQUEST_TIMED_OUT": "no answer in time",
    "_RESOLVE": "its host name does not resolve",
    "NETWORK_EXCEPTION": "the connection was lost",
    "BROKER_NOT_AVAILABLE": "the broker is not available",
    "_FAIL": "the connection failed",
    "LEADER_NOT_AVAILABLE": "the partition has no leader right now",
    "OFFSET_NOT_AVAILABLE": "the partition's new leader is not ready yet",
    "KAFKA_STORAGE_ERROR": "the broker cannot read its log",
    "NOT_LEADER_FOR_PARTITION": "the partition's leader is moving",
    "_AUTHENTICATION": "authentication failed",
    "SASL_AUTHENTICATION_FAILED": "authentication failed",
    "_SSL": "the TLS handshake failed",
    "UNKNOWN_TOPIC_OR_PART": "the broker does not know the topic or partition (yet)",
    "_UNKNOWN_PARTITION": "no broker leads the partition right now",
    "_UNKNOWN_TOPIC": "no broker knows the topic right now",
    "TOPIC_AUTHORIZATION_FAILED": "not authorized to read the topic",
}
_PREFIXES = ("Local: ", "Broker: ")

REFUSAL_ERRORS = frozenset(
    {
        # the connection: the client's credentials or TLS (librdkafka reports these to the error callback
        # and goes on trying; the request that waited then fails as if no broker were up)
        "_AUTHENTICATION",
        "SASL_AUTHENTICATION_FAILED",
        "_SSL",
        # a request: an ACL denies the topic. (Not a group's: Floe joins none and needs none, though
        # librdkafka asks for its consumers' coordinator, and is denied, when no ACL grants the group.)
        "TOPIC_AUTHORIZATION_FAILED",
    }
)
"""librdkafka's errors that mean a broker answered and refused the client: trying again is futile."""

_CONNECTION_PREFIX = re.compile(r"^[a-z_]+://[^ ]+: ")
_AFTER_STATE = re.compile(r" \(after \d+ms in state [A-Z_]+\)$")


_TLS_ALERT = "SSL alert number"
"""In a transport error's text: the broker ended the handshake with a TLS alert, refusing the client's
certificate (an expired one reads ``...alert certificate unknown: SSL alert number 46``)."""


def is_refusal(error: Any) -> bool:
    """Whether a librdkafka error is a broker refusing the client (not an outage: trying again is futile)."""
    return error.name() in REFUSAL_ERRORS or (error.name() == "_TRANSPORT" and _TLS_ALERT in (error.str() or ""))


def principal_of(client: Mapping[str, Any]) -> str:
    """Who a librdkafka client with settings ``client`` connects as, in words a refusal names (never a
    secret): ``SASL user 'floe' (SCRAM-SHA-512 over SASL_SSL)``."""
    protocol = str(client.get("security.protocol", "plaintext")).upper()
    if "sasl.username" in client:
        return f"SASL user '{client['sasl.username']}' ({client.get('sasl.mechanism', 'GSSAPI')} over {protocol})"
    if "ssl.certificate.location" in client:
        return f"the certificate in {client['ssl.certificate.location']} ({protocol})"
    return f"an unauthenticated client ({protocol})"


def refusal_in_words(error: Any) -> str:
    """A refusal as the broker's listener gave it, without librdkafka's connection and state decorations:
    ``sasl_ssl://h:9093/bootstrap: SASL authentication error: ... (after 312ms in state AUTH_REQ)`` reads
    ``SASL authentication error: ...``."""
    text = error.str() or error.name()
    return _AFTER_STATE.sub("", _CONNECTION_PREFIX.sub("", text))


def kafka_error(error: BaseException) -> Any | None:
    """The librdkafka error (``KafkaError``) an exception carries, if it carries one."""
    first = error.args[0] if error.args else None
    return first if all(hasattr(first, a) for a in ("name", "str", "retriable", "fatal")) else None


def is_outage(error: Any) -> bool:
    """Whether a librdkafka error means Kafka does not answer now (waited out) rather than a refusal."""
    return not error.fatal() and (error.name() in OUTAGE_ERRORS or error.retriable())


def in_words(error: Any) -> str:
    """A librdkafka error as a person reads it: the cause, then the step that met it.

    ``KafkaError{code=_TRANSPORT,val=-195,str="Failed to get metadata: Local: Broker transport failure"}``
    reads ``the connection was refused or lost (failed to get metadata)``.
    """
    text = error.str() or error.name()
    step, _, detail = text.partition(": ") if ": " in text and not text.startswith(_PREFIXES) else ("", "", text)
    cause = _CAUSES.get(error.name())
    if cause is None:
        cause = detail
        for prefix in _PREFIXES:
            cause = cause.replace(prefix, "")
        cause = cause[:1].lower() + cause[1:]
    return f"{cause} ({step[:1].lower() + step[1:]})" if step else cause


@dataclass(frozen=True)
class Backoff:
    """The wait before the next try: doubling from ``first_s`` to at most ``cap_s``, jittered."""

    first_s: float = 1.0
    cap_s: float = 30.0

    def delay_s(self, failures: int, draw: float) -> float:
        """The wait after ``failures`` failed tries in a row; ``draw`` in [0, 1) spreads it over the upper
        half of the step, so that tasks and planners that lost Kafka together do not retry in step."""
        step = min(self.cap_s, self.first_s * math.pow(2.0, max(failures - 1, 0)))
        return step * (0.5 + 0.5 * draw)


@dataclass
class Outage:
    """Kafka as one caller sees it: answering, or not since ``down_since``.

    Says when the next try is due (:class:`Backoff`) and when a log line is: when the outage is
    first seen, then at most once per ``report_every_s`` while it lasts, however often it is tried.
    """

    backoff: Backoff = field(default_factory=Backoff)
    report_every_s: float = 60.0
    down_since: float | None = None
    failures: int = 0
    next_try: float = -math.inf
    _reported: float = -math.inf

    def may_try(self, now: float) -> bool:
        return now >= self.next_try

    def wait_s(self, now: float) -> float:
        """How long until the next try is due."""
        return max(0.0, self.next_try - now)

    def failed(self, now: float, draw: float) -> bool:
        """A try failed at ``now``; True when a log line is due."""
        if self.down_since is None:
            self.down_since = now
        self.failures += 1
        self.next_try = now + self.backoff.delay_s(self.failures, draw)
        if now - self._reported < self.report_every_s:
            return False
        self._reported = now
        return True

    def down_for_s(self, now: float) -> float:
        return 0.0 if self.down_since is None else now - self.down_since

    def answered(self, now: float) -> float | None:
        """A try succeeded at ``now``: how long Kafka had not answered, or None when it had."""
        was = self.down_since
        self.down_since, self.failures, self.next_try, self._reported = None, 0, -math.inf, -math.inf
        return None if was is None else now - was
