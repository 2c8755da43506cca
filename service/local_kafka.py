"""A real single-node Apache Kafka broker (KRaft) for the demo and the tests.

The broker and its controller share one JVM process, listen on free loopback
ports, and keep their data under a work directory. Storage is formatted with
Kafka's own storage tool. ``start()`` returns only once the broker answers
metadata requests; ``stop()`` sends SIGTERM and, after a grace period, SIGKILL.
A broker started again after ``stop()`` keeps its ports and its data (an
outage, as clients see one); ``freeze()`` and ``thaw()`` (SIGSTOP, SIGCONT)
make a broker that holds its connections but answers nothing.

The JVM is started with a parent-death signal, so a broker never outlives the
Python process that started it, even when that process is killed.
"""

from __future__ import annotations

import base64
import ctypes
import logging
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Self

from runtime.jars import jar_set_dir

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
_LOG4J2_CONFIG = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
"""


class KafkaStartError(RuntimeError):
    """The broker did not come up; the message carries the tail of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_KEPT_PORT = 10_000


def kept_port(pick: Callable[[int, int], int] = random.randrange) -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range.

    The kernel never hands such a port to a port-0 bind or to an outgoing
    connection, so while a broker is stopped no other process on the machine
    (another test, another broker's clients) takes its port by chance, and it
    starts again on the same one. Falls back to :func:`free_port` when the
    range leaves no room below it.
    """
    try:
        ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768
    for _ in range(200):
        if ephemeral_low <= LOWEST_KEPT_PORT:
            break
        port = pick(LOWEST_KEPT_PORT, ephemeral_low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return free_port()


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding.

    As Kafka's own ``Uuid.randomUuid()``, it never starts with ``-`` (the storage
    tool's argument parser would take such an id for an option) and is never
    one of Kafka's reserved ids (all zeros, or the metadata topic's 0...01).
    """
    while True:
        raw = random_bytes()
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not text.startswith("-") and raw not in _RESERVED_UUIDS:
            return text


_RESERVED_UUIDS = frozenset({bytes(16), bytes(15) + b"\x01"})


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when its parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def broker_properties(data_dir: Path, broker_port: int, controller_port: int) -> str:
    """server.properties of a combined broker+controller node with id 1."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker_port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={data_dir}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=4",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=true",
            "",
        ]
    )


class LocalKafka:
    """Starts and stops one local KRaft broker. Use as a context manager."""

    def __init__(
        self,
        work_dir: Path,
        *,
        heap: str = "512m",
        startup_timeout_s: float = 90.0,
        stop_grace_s: float = 15.0,
        log_level: str = "INFO",
    ) -> None:
        self.work_dir = Path(work_dir)
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.log_level = log_level
        self.log_file = self.work_dir / "kafka.log"
        self.bootstrap: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports: tuple[int, int] | None = None  # broker, controller: kept for a restart

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> str:
        """Formats storage, starts the broker and waits until it answers.

        Started again after :meth:`stop`, the broker keeps its ports and data: clients
        see the same broker come back, as after an outage.
        """
        if self._proc is not None:
            raise RuntimeError("local Kafka broker already started")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        first = self._ports is None
        if self._ports is None:
            broker, controller = kept_port(), kept_port()
            while controller == broker:
                controller = kept_port()
            self._ports = broker, controller
        broker_port, controller_port = self._ports
        config = self._write_config(broker_port, controller_port)
        if first:
            self._format_storage(config)
        self._proc = self._launch(config)
        self.bootstrap = f"127.0.0.1:{broker_port}"
        log.info("local kafka starting", extra={"bootstrap": self.bootstrap, "pid": self._proc.pid})
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after the grace period. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGCONT)  # a frozen broker would hold SIGTERM until the kill
        proc.terminate()
        try:
            proc.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            log.warning("local kafka ignored SIGTERM; killing", extra={"pid": proc.pid})
            proc.kill()
            proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill ends the broker: nothing flushed, no goodbye to clients."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP: the broker keeps its sockets open and answers nothing, as a hung host does."""
        self._running().send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: a frozen broker goes on where it stopped."""
        self._running().send_signal(signal.SIGCONT)

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            raise RuntimeError("local Kafka broker is not running")
        return self._proc

    def _write_config(self, broker_port: int, controller_port: int) -> Path:
        config = self.work_dir / "server.properties"
        config.write_text(broker_properties(self.work_dir / "data", broker_port, controller_port))
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_CONFIG.format(log_file=self.log_file, level=self.log_level))
        return config

    def _java(self, main_class: str, *args: str) -> list[str]:
        classpath = str(jar_set_dir("kafka-broker") / "*")
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    def _format_storage(self, config: Path) -> None:
        cmd = self._java(
            "kafka.tools.StorageTool", "format", "-t", new_cluster_id(), "-c", str(config), *self._format_options()
        )
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise KafkaStartError(
                f"kafka storage format failed (exit {done.returncode}): {done.stderr[-2000:] or done.stdout[-2000:]}"
            )

    def _format_options(self) -> list[str]:
        """More ``kafka-storage format`` options: none here (a secured broker adds its SCRAM users)."""
        return []

    def _launch(self, config: Path) -> subprocess.Popen[bytes]:
        out = open(self.work_dir / "kafka.stdout", "ab")  # noqa: SIM115 - the child keeps its own copy
        try:
            return subprocess.Popen(
                self._java("kafka.Kafka", str(config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        finally:
            out.close()

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout_s
        admin = AdminClient({"bootstrap.servers": str(self.bootstrap), "log_level": 0})
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                raise KafkaStartError(f"local kafka exited during start-up:\n{self._log_tail()}")
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception as exc:  # noqa: BLE001 - not ready yet; retried until the deadline
                log.debug("local kafka not ready yet: %s", exc)
            time.sleep(0.5)
        raise KafkaStartError(f"local kafka did not answer within {self.startup_timeout_s}s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 40) -> str:
        chunks = []
        for path in (self.work_dir / "kafka.stdout", self.log_file):
            if path.exists():
                chunks.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(chunks)


def main() -> None:
    """Run a local broker until interrupted (``python -m service.local_kafka DIR``)."""
    import sys
    import tempfile

    logging.basicConfig(level=logging.INFO)
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="floe-kafka-"))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    with LocalKafka(work) as kafka:
        print(f"local kafka ready at {kafka.bootstrap} (logs: {kafka.log_file})", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})


if __name__ == "__main__":
    main()
