"""runtime/logging.py: JSON lines, extra fields, and secrets that never reach the output."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from runtime.logging import (
    MASK,
    RedactionFilter,
    configure_logging,
    is_secret_key,
    redact,
    redact_text,
    summarize_error,
)

SECRET = "hunter2-XYZ"


@pytest.fixture
def stream(root_logger: logging.Logger) -> io.StringIO:
    """JSON logging at DEBUG into a buffer."""
    buffer = io.StringIO()
    configure_logging("DEBUG", buffer)
    return buffer


def lines(buffer: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_one_json_object_per_line_with_standard_and_extra_fields(stream: io.StringIO) -> None:
    log = logging.getLogger("floe.test")
    log.info("batch %s committed", 7, extra={"table": "db.orders", "rows": 12, "path": Path("/w/x")})
    log.debug("multi\nline message")
    first, second = lines(stream)
    assert set(first) == {"ts", "level", "logger", "message", "table", "rows", "path"}
    assert first["message"] == "batch 7 committed"
    assert (first["level"], first["logger"], first["table"], first["rows"]) == ("INFO", "floe.test", "db.orders", 12)
    assert first["path"] == "/w/x"  # not JSON-serializable: written as str()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["ts"])
    assert second["message"] == "multi\nline message" and len(stream.getvalue().splitlines()) == 2


def test_level_filters_and_reconfiguring_does_not_duplicate(stream: io.StringIO) -> None:
    buffer = io.StringIO()
    configure_logging("warning", buffer)
    configure_logging("WARNING", buffer)
    log = logging.getLogger("floe.test")
    log.info("dropped")
    log.warning("kept")
    assert [entry["message"] for entry in lines(buffer)] == ["kept"]
    assert stream.getvalue() == ""  # the earlier Floe handler was replaced
    with pytest.raises(ValueError, match="log level: expected one of"):
        configure_logging("LOUD", buffer)


def test_extra_named_like_an_output_key_does_not_overwrite_it(stream: io.StringIO) -> None:
    logging.getLogger("floe.test").info("hello", extra={"level": "custom", "ts": 1})
    [entry] = lines(stream)
    assert entry["level"] == "INFO" and entry["extra.level"] == "custom" and entry["extra.ts"] == 1


def test_exceptions_are_logged_as_one_redacted_field(stream: io.StringIO) -> None:
    try:
        raise RuntimeError(f"cannot connect to postgresql://floe:{SECRET}@db:5432/floe")
    except RuntimeError:
        logging.getLogger("floe.test").exception("commit failed")
    [entry] = lines(stream)
    assert entry["message"] == "commit failed"
    assert "RuntimeError: cannot connect to postgresql://floe:***@db:5432/floe" in entry["exception"]
    assert SECRET not in stream.getvalue()


def test_secrets_never_reach_the_output(stream: io.StringIO) -> None:
    log = logging.getLogger("floe.test")
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="floe" password="{SECRET}";'
    log.info("connecting with %s", jaas)
    log.info("catalog at %s", f"postgresql://floe:{SECRET}@db/floe")
    log.info("config", extra={"password": SECRET, "kafka": {"sasl.jaas.config": jaas, "bootstrap": "b:9092"}})
    log.info("props", extra={"props": [{"ssl.key.password": SECRET}], "token": SECRET, "secret": SecretStr(SECRET)})
    log.info(f"inline api_key={SECRET} and Authorization: Bearer {SECRET}")
    log.info("json %s", json.dumps({"password": SECRET}))
    output = stream.getvalue()
    assert SECRET not in output
    entries = lines(stream)
    assert entries[0]["message"].endswith('username="floe" password="***";')
    assert entries[1]["message"] == "catalog at postgresql://floe:***@db/floe"
    assert entries[2]["password"] == MASK and entries[2]["kafka"] == {"sasl.jaas.config": MASK, "bootstrap": "b:9092"}
    assert entries[3]["props"] == [{"ssl.key.password": MASK}] and entries[3]["token"] == MASK
    assert entries[5]["message"] == 'json {"password": "***"}'


def test_the_filter_protects_any_handler() -> None:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(logging.Formatter("%(message)s %(password)s"))
    handler.addFilter(RedactionFilter())
    log = logging.getLogger("floe.test.plain")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("uri %s", f"s3://key:{SECRET}@bucket/x", extra={"password": SECRET})
        try:
            raise ValueError(f"password={SECRET}")
        except ValueError:
            log.exception("boom", extra={"password": SECRET})
    finally:
        log.removeHandler(handler)
        log.propagate = True
    assert SECRET not in buffer.getvalue()
    assert "uri s3://key:***@bucket/x ***" in buffer.getvalue()
    assert "ValueError: password=***" in buffer.getvalue()


def test_readable_messages_stay_readable() -> None:
    # Error messages that merely mention a secret key, and non-secret keys, are untouched.
    for text in [
        "catalog.password: expected a string, got <redacted>",
        "kafka.security.sasl.password_file: file not found: '/run/x'",
        "postgresql://floe@db:5432/floe",
        "key=order_id partition=3",
    ]:
        assert redact_text(text) == text


@pytest.mark.parametrize(
    "key, secret",
    [
        ("password", True),
        ("sasl.jaas.config", True),
        ("ssl.key.password", True),
        ("FLOE_CATALOG__PASSWORD", True),
        ("registry_password", True),
        ("access-token", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("password_file", False),
        ("key", False),
        ("bootstrap_servers", False),
        ("sasl_mechanism", False),
    ],
)
def test_is_secret_key(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_authorization_headers_and_keystore_keys_are_masked() -> None:
    assert redact_text("sent Authorization: Basic c2VjcmV0 to the registry") == "sent Authorization: Basic *** to the registry"
    assert redact_text("ssl.keystore.key=abc") == "ssl.keystore.key=***"
    assert is_secret_key("ssl.keystore.key") and is_secret_key("Authorization")


def test_redact_keeps_structure() -> None:
    value = {"a": [1, {"password": "x", "uri": "http://u:p@h"}], "password": None, "n": 3}
    assert redact(value) == {"a": [1, {"password": MASK, "uri": "http://u:***@h"}], "password": None, "n": 3}


_PASSWORDS = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"]) | st.sampled_from("!#$%^*-_+~"), min_size=6
)


@given(_PASSWORDS)
def test_any_password_in_a_uri_or_pair_is_masked(password: str) -> None:
    cases = {
        f"postgresql://floe:{password}@db:5432/floe": "postgresql://floe:***@db:5432/floe",
        f"password={password}": "password=***",
        f"ssl.key.password = {password} next=1": "ssl.key.password = *** next=1",
        f'{{"token": "{password}"}}': '{"token": "***"}',
        f"password='{password}'": "password='***'",
    }
    for text, expected in cases.items():
        assert redact_text(text) == expected


@pytest.fixture
def info_stream(root_logger: logging.Logger) -> io.StringIO:
    """Logging at INFO (no tracebacks) into a buffer."""
    buffer = io.StringIO()
    configure_logging("INFO", buffer, "json")
    return buffer


SPARK_FAILURE = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/x/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
py4j.protocol.Py4JJavaError: An error occurred while calling o123.toArrow.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/w/ingest/frame.py", line 300, in decoded_batches
    raise BadRecordError.first_of(fail_table, dead)
ingest.tasks.record_errors.BadRecordError: table shop.orders: bad record at orders6/0@50: DecodeError: invalid JSON: Expecting value: line 1 column 1 (char 0) (1 bad record(s) in this Arrow batch; bad_records policy is 'fail')
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:643)
""" + "\tat org.apache.spark.Something(Some.scala:1)\n" * 200


def test_a_failure_is_one_line_without_a_traceback_below_debug(info_stream: io.StringIO) -> None:
    try:
        raise RuntimeError(SPARK_FAILURE)
    except RuntimeError:
        logging.getLogger("floe.ingest").exception("batch 3 failed", extra={"table": "shop.orders"})
    [entry] = lines(info_stream)
    assert "exception" not in entry and len(info_stream.getvalue().splitlines()) == 1
    assert entry["error"].startswith("BadRecordError: table shop.orders: bad record at orders6/0@50: DecodeError")


def test_summaries_name_the_cause_and_stay_short() -> None:
    assert summarize_error(RuntimeError(SPARK_FAILURE)).startswith("BadRecordError: table shop.orders")
    assert summarize_error(ValueError("plain\nsecond line")) == "ValueError: plain"
    py4j = RuntimeError("An error occurred while calling o48.sql.\n: org.apache.spark.sql.AnalysisException: "
                        "[TABLE_OR_VIEW_NOT_FOUND] nope\n\tat org.apache.Foo(Foo.scala:1)")
    assert summarize_error(py4j) == "AnalysisException: [TABLE_OR_VIEW_NOT_FOUND] nope"
    assert len(summarize_error(ValueError("x" * 5000))) <= 500
    kafka = RuntimeError('Traceback ...\nconfluent_kafka.error.KafkaException: KafkaError{code=_UNKNOWN_PARTITION,'
                         'val=-190,str="Failed to get watermark offsets: Local: Unknown partition"}')
    assert summarize_error(kafka) == \
        "KafkaException: Failed to get watermark offsets: Local: Unknown partition (_UNKNOWN_PARTITION)"
    denied = RuntimeError("An error occurred while calling o218.getResult.\n: java.util.concurrent.ExecutionException:"
                          " boom\n\tat x.y(Z.java:1)\nCaused by: org.apache.spark.SparkException: Job aborted due "
                          "to stage failure\nCaused by: org.apache.kafka.common.errors.TopicAuthorizationException: "
                          "Not authorized to access topics: [t]\n\tat a.b(C.java:2)")
    assert summarize_error(denied) == "TopicAuthorizationException: Not authorized to access topics: [t]", \
        "a Java cause below its wrappers"


def test_text_format_is_one_readable_line_per_record(root_logger: logging.Logger) -> None:
    buffer = io.StringIO()
    configure_logging("INFO", buffer, "text")
    log = logging.getLogger("floe.ingest")
    log.info("batch 3 committed", extra={"table": "shop.orders", "files": 2, "note": "two words",
                                         "password": SECRET})
    try:
        raise OSError("disk full")
    except OSError:
        log.exception("batch 4 failed")
    first, second = buffer.getvalue().splitlines()
    assert re.fullmatch(r"\S+Z INFO    floe\.ingest: batch 3 committed  table=shop\.orders files=2 "
                        r'note="two words" password=\*\*\*', first), first
    assert second.endswith("floe.ingest: batch 4 failed  error: OSError: disk full"), second
    assert SECRET not in buffer.getvalue()


def test_auto_format_is_text_on_a_terminal_and_json_elsewhere(root_logger: logging.Logger) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, pipe = Terminal(), io.StringIO()
    configure_logging("INFO", tty)
    logging.getLogger("floe.t").info("hello")
    configure_logging("INFO", pipe)
    logging.getLogger("floe.t").info("hello")
    with pytest.raises(ValueError, match="log format"):
        configure_logging("INFO", pipe, "yaml")
    assert "INFO    floe.t: hello" in tty.getvalue()
    assert json.loads(pipe.getvalue())["message"] == "hello"
