"""Stopping a Floe process cleanly on SIGTERM or SIGINT.

Kubernetes sends SIGTERM before it kills a pod; Floe finishes the work in
progress (the micro-batch, the file group) and exits with the documented
code. The signal only sets an event that the long-running loops watch, and
the line saying so comes from the logger of the component that stops.
"""

from __future__ import annotations

import logging
import signal
import threading


def install_stop_signals(stop: threading.Event, log: logging.Logger) -> None:
    """SIGTERM and SIGINT set ``stop``, logged once on ``log``; the work in progress ends cleanly.

    The handler itself only records the signal and sets the event: it runs
    between two bytecodes of the main thread, which may be in the middle of
    writing a log line to the same stream. A daemon thread says it instead.
    """
    received: list[str] = []

    def request_stop(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    def announce() -> None:
        stop.wait()
        if received:
            log.info("stop requested", extra={"signal": received[0]})

    threading.Thread(target=announce, name="floe-stop-announcer", daemon=True).start()
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)


def ignore_stop_signals() -> None:
    """SIGTERM and SIGINT ignored: run in a child (``preexec_fn``) that a stop must not reach.

    A signal sent to Floe's process group (``timeout``, a terminal's Ctrl-C)
    reaches every process in it. Spark's JVM would die of SIGTERM before
    Floe's graceful stop could use it. An ignored signal stays ignored across
    ``exec`` and in the JVM's own children (it installs no handler for a
    shutdown signal it finds ignored); SIGKILL still ends them all.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
