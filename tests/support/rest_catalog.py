"""A real Iceberg REST catalog for the tests: Iceberg's own ``RESTCatalogServer``.

It runs from the ``rest-catalog`` jar set (deploy/pom.xml), over a JDBC
catalog in a SQLite file (or a PostgreSQL database), on a free port with a
parent-death signal, and is configured as Iceberg's own test image
configures it: ``CATALOG_*`` variables become catalog properties
(``CATALOG_URI`` → ``uri``, ``CATALOG_IO__IMPL`` → ``io-impl``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from runtime.jars import jar_set_dir
from service.local_kafka import free_port
from tests.support.loopback_server import LoopbackServer


class RestCatalogServer(LoopbackServer):
    """``with RestCatalogServer(dir, warehouse) as server: server.uri``."""

    name = "the REST catalog server"
    log_name = "rest-server.log"

    def __init__(self, work_dir: Path, warehouse: str, *, jdbc_uri: Optional[str] = None,
                 properties: Optional[Mapping[str, str]] = None, startup_timeout_s: float = 60.0) -> None:
        super().__init__(work_dir, startup_timeout_s)
        self.warehouse = warehouse
        self.jdbc_uri = jdbc_uri or f"jdbc:sqlite:{self.work_dir / 'rest-catalog.db'}"
        self.properties = dict(properties or {})
        self.port = 0

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "RestCatalogServer":
        return self.start()

    def start(self) -> "RestCatalogServer":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        catalog = {"rest.port": str(self.port), "uri": self.jdbc_uri, "warehouse": self.warehouse,
                   "jdbc.strict-mode": "true", **self.properties}
        env = {**os.environ, **{_variable(key): value for key, value in catalog.items()}}
        self._launch(["java", "-Xmx384m", "-XX:+UseSerialGC", "-cp", str(jar_set_dir("rest-catalog") / "*"),
                      "org.apache.iceberg.rest.RESTCatalogServer"], env)
        return self

    def ready_url(self) -> str:
        return f"{self.uri}/v1/config"


def _variable(key: str) -> str:
    """The ``CATALOG_*`` variable that the server turns back into ``key`` ('-' → '__', '.' → '_')."""
    return "CATALOG_" + key.replace("-", "__").replace(".", "_").upper()
