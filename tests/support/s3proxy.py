"""A real S3 API server for the tests: S3Proxy over a local directory.

S3Proxy (``org.gaul:s3proxy``, the ``s3proxy`` jar set) speaks the S3 REST
API, SigV4 included, and stores objects with jclouds' filesystem provider.
It listens on a free loopback port, runs with a parent-death signal like the
local Kafka broker, and is addressed path-style (``http://host/bucket/key``).
Given a certificate (``tls``), it serves HTTPS only, on that certificate.

:meth:`S3Proxy.environment` gives the variables that point Floe
(:mod:`table.object_store`), Hadoop's S3A and the AWS SDKs at it.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Optional

from runtime.jars import jar_set_dir
from service.local_kafka import free_port
from tests.support.certificates import Issued, keystore
from tests.support.loopback_server import LoopbackServer

ACCESS_KEY = "floe-test-access"
SECRET_KEY = "floe-test-secret-key"
REGION = "us-east-1"
KEYSTORE_PASSWORD = "floe-test-keystore"

# Without a configuration logback logs every Jetty detail at DEBUG.
_LOGBACK = """<configuration>
  <appender name="out" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d %level %logger{0}: %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="out"/></root>
  <logger name="org.gaul.s3proxy.Main" level="INFO"/>
</configuration>
"""


class S3Proxy(LoopbackServer):
    """Start with :meth:`start` (or ``with``); buckets are made with :meth:`create_bucket`."""

    name = "S3Proxy"
    log_name = "s3proxy.log"

    def __init__(self, work_dir: Path, startup_timeout_s: float = 60.0, *, tls: Optional[Issued] = None,
                 ca_file: Optional[Path] = None) -> None:
        """``tls``: serve HTTPS on this certificate, which ``ca_file`` signed."""
        super().__init__(work_dir, startup_timeout_s)
        self.port = 0
        self.tls, self.ca_file = tls, ca_file
        self.middleware: dict[str, str] = {}  # more s3proxy.* properties: a read-only store, slow uploads

    def restart(self, middleware: dict[str, str] | None = None) -> None:
        """Stop, and start again on the same port and objects, with ``middleware``: ``s3proxy.*`` properties
        such as ``{"s3proxy.read-only-blobstore": "true"}``."""
        self.stop()
        self.middleware = dict(middleware or {})
        self.start()

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def ready_context(self) -> Optional[ssl.SSLContext]:
        return None if self.ca_file is None else ssl.create_default_context(cafile=str(self.ca_file))

    def environment(self) -> dict[str, str]:
        """What a process needs to reach this server: endpoint, region, path style, credentials."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_REGION": REGION,
            "FLOE_S3_PATH_STYLE_ACCESS": "true",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }

    def __enter__(self) -> "S3Proxy":
        return self.start()

    def start(self) -> "S3Proxy":
        (self.work_dir / "blobs").mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()  # started again after kill(): the same port, the same objects
        properties = self.work_dir / "s3proxy.properties"
        properties.write_text(self._properties())
        logback = self.work_dir / "logback.xml"
        logback.write_text(_LOGBACK)
        self._launch(["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Dlogback.configurationFile={logback}", "-cp",
                      str(jar_set_dir("s3proxy") / "*"), "org.gaul.s3proxy.Main", "--properties", str(properties)])
        return self

    def ready_url(self) -> str:
        return self.endpoint

    def create_bucket(self, name: str) -> str:
        """Make a bucket through the S3 API and return ``s3://name``."""
        import pyarrow.fs as pafs

        pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{self.port}", scheme=self.endpoint.split(":")[0],
                          region=REGION, access_key=ACCESS_KEY, secret_key=SECRET_KEY, allow_bucket_creation=True,
                          tls_ca_file_path=None if self.ca_file is None else str(self.ca_file)).create_dir(name)
        return f"s3://{name}"

    def _properties(self) -> str:
        if self.tls is None:
            listener = [f"s3proxy.endpoint={self.endpoint}"]
        else:
            listener = [f"s3proxy.secure-endpoint={self.endpoint}",
                        f"s3proxy.keystore-path={keystore(self.tls, KEYSTORE_PASSWORD)}",
                        f"s3proxy.keystore-password={KEYSTORE_PASSWORD}"]
        return "\n".join([
            *listener,
            "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={ACCESS_KEY}",
            f"s3proxy.credential={SECRET_KEY}",
            "jclouds.provider=filesystem",
            f"jclouds.filesystem.basedir={self.work_dir / 'blobs'}",
            f"jclouds.identity={ACCESS_KEY}",
            f"jclouds.credential={SECRET_KEY}",
            *(f"{key}={value}" for key, value in self.middleware.items()),
            "",
        ])


def s3_file_io_properties(server: S3Proxy) -> dict[str, str]:
    """Catalog properties that point Iceberg Java's S3FileIO at ``server``."""
    return {
        "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "s3.endpoint": server.endpoint,
        "s3.path-style-access": "true",
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
        "client.region": REGION,
    }


def pyiceberg_s3_properties(server: S3Proxy) -> dict[str, str]:
    """FileIO properties that point pyiceberg at ``server``."""
    return {
        "s3.endpoint": server.endpoint,
        "s3.access-key-id": ACCESS_KEY,
        "s3.secret-access-key": SECRET_KEY,
        "s3.region": REGION,
    }
