"""``floe check``: is the configuration valid, and are Kafka, the catalog and
the warehouse reachable from here?

Each probe returns a :class:`CheckResult`; none prints a secret (the catalog
is shown by its redacted URI, Kafka by its bootstrap servers only).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable

from commit.catalog import Catalog
from service.config import FloeConfig
from service.failures import CommandError
from table.io import FileIO


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def _guarded(name: str, probe: Callable[[], str]) -> CheckResult:
    """Runs one probe; its failure is the result, reported with its type and message."""
    try:
        return CheckResult(name, True, probe())
    except Exception as exc:  # noqa: BLE001 - a failed probe is what `check` reports
        return CheckResult(name, False, f"{type(exc).__name__}: {exc}")


def check_kafka(config: FloeConfig, timeout_s: float = 10.0, *, topics: bool = True) -> CheckResult:
    """Reach the brokers (and, with ``topics``, find every configured topic)."""

    def probe() -> str:
        from confluent_kafka.admin import AdminClient

        settings = {"bootstrap.servers": ",".join(config.kafka.bootstrap_servers), "log_level": 0}
        settings.update(config.kafka.security.librdkafka_properties())
        metadata = AdminClient(settings).list_topics(timeout=timeout_s)
        wanted = sorted({t for table in config.tables for t in table.source_topics})
        missing = [t for t in wanted if t not in metadata.topics]
        if missing and topics:
            raise LookupError(f"topics not found: {', '.join(missing)} (brokers: {len(metadata.brokers)})")
        return f"{len(metadata.brokers)} broker(s); topics found: {', '.join(wanted) or 'none (pattern)'}"

    return _guarded(f"kafka {','.join(config.kafka.bootstrap_servers)}", probe)


def require_kafka(config: FloeConfig, timeout_s: float = 10.0) -> None:
    """Fail fast, with ``floe check``'s own words, when no broker answers."""
    result = check_kafka(config, timeout_s, topics=False)
    if not result.ok:
        raise CommandError(
            f"{result.name}: {result.detail}; check kafka.bootstrap_servers and that the brokers are up "
            "('floe check' runs the same probe)"
        )


def check_catalog(config: FloeConfig) -> CheckResult:
    def probe() -> str:
        catalog = Catalog(config.catalog.connection_uri(), config.catalog.warehouse, config.catalog.name)
        namespaces = catalog.list_namespaces()
        return f"reachable; {len(namespaces)} top-level namespace(s)"

    return _guarded(f"catalog {config.catalog.display_uri}", probe)


def check_warehouse(config: FloeConfig) -> CheckResult:
    def probe() -> str:
        io = FileIO.for_location(config.catalog.warehouse)
        path = f"{config.catalog.warehouse.rstrip('/')}/.floe-check-{uuid.uuid4().hex}"
        io.write_bytes(path, b"floe check")
        try:
            if io.read_bytes(path) != b"floe check":
                raise OSError(f"read back different bytes from {path}")
        finally:
            io.delete(path)
        return "writable and readable"

    return _guarded(f"warehouse {config.catalog.warehouse}", probe)


def run_checks(config: FloeConfig) -> list[CheckResult]:
    return [check_kafka(config), check_catalog(config), check_warehouse(config)]
