"""runtime/signals.py: a stop signal sets the event and is announced once, outside the handler."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Iterator

import pytest

from runtime.signals import install_stop_signals


@pytest.fixture
def restored_signal_handlers() -> Iterator[None]:
    saved = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    yield
    for number, handler in saved.items():
        signal.signal(number, handler)


def test_sigterm_sets_the_event_and_is_logged_by_the_announcer(restored_signal_handlers, caplog):
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="floe.test.signals")
    install_stop_signals(stop, logging.getLogger("floe.test.signals"))
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.wait(5)
    deadline = time.monotonic() + 5
    while not caplog.records and time.monotonic() < deadline:
        time.sleep(0.01)
    [record] = caplog.records
    assert (record.getMessage(), record.signal, record.threadName) == ("stop requested", "SIGTERM", "floe-stop-announcer")


def test_a_stop_without_a_signal_is_not_announced(restored_signal_handlers, caplog):
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="floe.test.signals")
    install_stop_signals(stop, logging.getLogger("floe.test.signals"))
    stop.set()
    time.sleep(0.2)
    assert caplog.records == []
