"""The ``kafka`` section: brokers, connection security, and how each streaming query reads.

Security is written once and rendered for both Kafka clients Floe runs: the
Java client inside Spark's source, and librdkafka in the dead-letter producer.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, model_validator

from service.config.credentials import secret_source_problems, secret_value
from service.config.fields import ConfigPath, Duration, Properties, Section, UpperCased, comma_list
from service.config.problems import (
    Problem,
    invalid,
    only_used_when,
    raise_all,
    render_path,
    required_when,
    show,
)


class SaslConfig(Section):
    """SASL authentication to the brokers (Kafka's ``sasl.*`` client settings)."""

    mechanism: Annotated[Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"], UpperCased] = Field(
        "SCRAM-SHA-512", description="SASL mechanism."
    )
    username: str = Field(description="SASL user name.")
    password: SecretStr | None = Field(
        None, description="SASL password (prefer `password_file` or `FLOE_KAFKA__SECURITY__SASL__PASSWORD`)."
    )
    password_file: ConfigPath | None = Field(None, description="File holding the SASL password (a mounted Secret).")

    @model_validator(mode="after")
    def _one_password(self) -> SaslConfig:
        raise_all(secret_source_problems("password", self.password, self.password_file, required=True))
        return self

    def password_value(self) -> str:
        """The password (reads ``password_file``). Never log it."""
        password = secret_value(self.password, self.password_file)
        assert password is not None  # the validator requires one of them
        return password

    def jaas_config(self) -> str:
        """Kafka's ``sasl.jaas.config`` value. Contains the password: never log it."""
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if self.mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        user = self.username.replace("\\", "\\\\").replace('"', '\\"')
        secret = self.password_value().replace("\\", "\\\\").replace('"', '\\"')
        return f'{module} required username="{user}" password="{secret}";'


class SslConfig(Section):
    """TLS to the brokers, with PEM files (Kafka's ``ssl.*`` client settings)."""

    ca_file: ConfigPath | None = Field(
        None, description="PEM bundle of CA certificates to trust (default: the JVM's trust store)."
    )
    keystore_file: ConfigPath | None = Field(
        None, description="PEM file with the client's private key and certificate chain (mutual TLS)."
    )
    key_password: SecretStr | None = Field(
        None, description="Password of the private key in `keystore_file`, if it is encrypted."
    )
    key_password_file: ConfigPath | None = Field(None, description="File holding `key_password`.")
    check_hostname: bool = Field(True, description="Verify the broker's host name against its certificate.")

    @model_validator(mode="after")
    def _key_password_needs_keystore(self) -> SslConfig:
        problems = []
        if self.keystore_file is None and (self.key_password or self.key_password_file):
            problems.append(("key_password", "only used with keystore_file (got a password but no keystore_file)"))
        problems += secret_source_problems("key_password", self.key_password, self.key_password_file)
        raise_all(problems)
        return self

    def key_password_value(self) -> str | None:
        return secret_value(self.key_password, self.key_password_file)


_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_SSL_PROTOCOLS = ("SSL", "SASL_SSL")


class KafkaSecurity(Section):
    """How Floe connects to the brokers; used by the Spark source and the dead-letter producer."""

    protocol: Annotated[Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"], UpperCased] = Field(
        "PLAINTEXT", description="Kafka `security.protocol`."
    )
    sasl: SaslConfig | None = Field(None, description="SASL settings; required for SASL_PLAINTEXT and SASL_SSL.")
    ssl: SslConfig | None = Field(None, description="TLS settings; used with SSL and SASL_SSL.")

    @model_validator(mode="after")
    def _matches_protocol(self) -> KafkaSecurity:
        problems = []
        if self.protocol in _SASL_PROTOCOLS and self.sasl is None:
            problems.append(("sasl", required_when("protocol", self.protocol)))
        if self.protocol not in _SASL_PROTOCOLS and self.sasl is not None:
            problems.append(("sasl", only_used_when("protocol", " or ".join(_SASL_PROTOCOLS), self.protocol)))
        if self.protocol not in _SSL_PROTOCOLS and self.ssl is not None:
            problems.append(("ssl", only_used_when("protocol", " or ".join(_SSL_PROTOCOLS), self.protocol)))
        raise_all(problems)
        return self

    def java_client_properties(self) -> dict[str, str]:
        """Kafka Java client settings (for Spark's ``kafka.*`` options). Contains secrets."""
        props: dict[str, str] = {"security.protocol": self.protocol}
        if self.sasl is not None:
            props["sasl.mechanism"] = self.sasl.mechanism
            props["sasl.jaas.config"] = self.sasl.jaas_config()
        if self.ssl is not None and self.protocol in _SSL_PROTOCOLS:
            props.update(_java_ssl_properties(self.ssl))
        return props

    def librdkafka_properties(self) -> dict[str, str]:
        """librdkafka settings (for the confluent-kafka dead-letter producer). Contains secrets."""
        props = {"security.protocol": self.protocol.lower()}
        if self.sasl is not None:
            props.update(
                {
                    "sasl.mechanism": self.sasl.mechanism,
                    "sasl.username": self.sasl.username,
                    "sasl.password": self.sasl.password_value(),
                }
            )
        if self.ssl is not None and self.protocol in _SSL_PROTOCOLS:
            props.update(_librdkafka_ssl_properties(self.ssl))
        return props


def _java_ssl_properties(ssl: SslConfig) -> dict[str, str]:
    props = {"ssl.endpoint.identification.algorithm": "https" if ssl.check_hostname else ""}
    if ssl.ca_file is not None:
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ssl.ca_file)})
    if ssl.keystore_file is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(ssl.keystore_file)})
        if (password := ssl.key_password_value()) is not None:
            props["ssl.key.password"] = password
    return props


def _librdkafka_ssl_properties(ssl: SslConfig) -> dict[str, str]:
    props = {"ssl.endpoint.identification.algorithm": "https" if ssl.check_hostname else "none"}
    if ssl.ca_file is not None:
        props["ssl.ca.location"] = str(ssl.ca_file)
    if ssl.keystore_file is not None:
        props["ssl.certificate.location"] = str(ssl.keystore_file)
        props["ssl.key.location"] = str(ssl.keystore_file)
        if (password := ssl.key_password_value()) is not None:
            props["ssl.key.password"] = password
    return props


# Set by Floe itself, or refused by Spark's Kafka source.
_MANAGED_PROPERTIES = {
    "bootstrap.servers": "kafka.bootstrap_servers",
    "security.protocol": "kafka.security.protocol",
    "sasl.mechanism": "kafka.security.sasl",
    "sasl.jaas.config": "kafka.security.sasl",
    "ssl.truststore.location": "kafka.security.ssl",
    "ssl.keystore.location": "kafka.security.ssl",
    "ssl.key.password": "kafka.security.ssl",
    "auto.offset.reset": "kafka.starting_offsets",
    "enable.auto.commit": "nothing: Floe keeps offsets in the table",
    "key.deserializer": "nothing: Spark reads raw bytes",
    "value.deserializer": "nothing: Spark reads raw bytes",
    "interceptor.classes": "nothing: Spark's Kafka source refuses it",
}
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._\-]+):(\d{1,5})$")
_EARLIEST = -2  # Spark's per-partition marker in startingOffsets JSON (-1 is latest)


def _bootstrap(value: Any) -> Any:
    servers = comma_list(value)
    if isinstance(servers, list):
        for i, server in enumerate(servers):
            if not isinstance(server, str) or not _HOST_PORT.match(server):
                raise invalid((f"[{i}]", f"expected host:port, got {show(server)}"))
    return servers


def _starting_offsets(value: Any) -> Any:
    """``earliest``, ``latest``, or ``{topic: {partition: offset}}`` (-2 earliest, -1 latest)."""
    if isinstance(value, str) and value.lower() in ("earliest", "latest"):
        return value.lower()
    if not isinstance(value, dict):
        raise invalid(
            ("", f"expected 'earliest', 'latest' or a mapping topic -> partition -> offset, got {show(value)}")
        )
    offsets: dict[str, dict[int, int]] = {}
    problems: list[Problem] = []
    for topic, partitions in value.items():
        offsets[str(topic)], found = _topic_offsets(str(topic), partitions)
        problems += found
    raise_all(problems)
    return offsets


def _topic_offsets(topic: str, partitions: Any) -> tuple[dict[int, int], list[Problem]]:
    """One topic's ``{partition: offset}``, and what is wrong with it."""
    if not isinstance(partitions, dict):
        return {}, [(render_path((topic,)), f"expected a mapping partition -> offset, got {show(partitions)}")]
    offsets: dict[int, int] = {}
    problems: list[Problem] = []
    for partition, offset in partitions.items():
        at = render_path((topic, str(partition)))
        if not str(partition).isdigit():
            problems.append((at, f"expected a partition number as key, got {show(partition)}"))
        elif isinstance(offset, bool) or not isinstance(offset, int) or offset < _EARLIEST:
            problems.append((at, f"expected an offset >= 0, or -2 (earliest) or -1 (latest), got {show(offset)}"))
        else:
            offsets[int(partition)] = offset
    return offsets, problems


class KafkaConfig(Section):
    """The Kafka cluster, and how each streaming query reads it."""

    bootstrap_servers: Annotated[list[str], BeforeValidator(_bootstrap), Field(min_length=1)] = Field(
        description="Brokers as host:port, a list or a comma-separated string."
    )
    security: KafkaSecurity = Field(default_factory=KafkaSecurity, description="Connection security.")
    properties: Properties = Field(
        default_factory=dict,
        repr=False,
        description="Extra Kafka client properties passed through to the Spark source (e.g. `fetch.max.bytes`).",
    )
    starting_offsets: Annotated[str | dict[str, dict[int, int]], BeforeValidator(_starting_offsets)] = Field(
        "earliest",
        description="Where a new query starts: `earliest`, `latest`, or topic -> partition -> offset. "
        "Ignored once a checkpoint exists.",
        json_schema_extra={"type_name": "'earliest' | 'latest' | map"},
    )
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Upper bound of records per micro-batch, over all partitions."
    )
    min_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Wait for at least this many records (up to `max_trigger_delay`) before a batch."
    )
    max_trigger_delay: Duration | None = Field(
        None, description="Longest wait for `min_offsets_per_trigger` (Spark's default: 15m)."
    )
    fail_on_data_loss: bool = Field(
        True, description="Fail the query when offsets were deleted by retention before they were read."
    )
    max_tasks_per_batch: int | None = Field(
        None,
        gt=0,
        description="With `reader: python`: at most this many tasks per micro-batch, each reading whole offset "
        "ranges of several partitions (a task has a fixed cost and writes its own files). Unset: one task per "
        "task slot in local mode, one per partition range on a cluster (as Spark's source, which dynamic "
        "allocation scales by).",
    )
    reader: Literal["spark", "python"] = Field(
        "python",
        description="What reads the topics: `python`, Floe's own source, whose tasks read, decode and write the "
        "records without passing them through the JVM (librdkafka settings from `security`; `read_committed`), "
        "and which a shared query (`ingest.query: shared`) needs; or `spark`, Spark's Kafka source. "
        'See docs/ingest-design.md, "Floe\'s Kafka source".',
    )

    @model_validator(mode="after")
    def _coherent(self) -> KafkaConfig:
        problems = [
            (render_path(("properties", key)), f"set by {where}, not in properties")
            for key, where in _MANAGED_PROPERTIES.items()
            if key in self.properties
        ]
        low, high = self.min_offsets_per_trigger, self.max_offsets_per_trigger
        if low is not None and high is not None and low > high:
            problems.append(("min_offsets_per_trigger", f"must not exceed max_offsets_per_trigger ({high}), got {low}"))
        if self.max_tasks_per_batch is not None and self.reader != "python":
            problems.append(("max_tasks_per_batch", f"only used with reader: python (got reader: {self.reader})"))
        if self.max_trigger_delay is not None and low is None:
            problems.append(
                ("max_trigger_delay", "only used with min_offsets_per_trigger (got no min_offsets_per_trigger)")
            )
        raise_all(problems)
        return self

    def java_client_properties(self) -> dict[str, str]:
        """Every Kafka Java client property of the source. Contains secrets: never log it."""
        return {
            **self.properties,
            "bootstrap.servers": ",".join(self.bootstrap_servers),
            **self.security.java_client_properties(),
        }

    def starting_offsets_option(self) -> str:
        """Spark's ``startingOffsets`` option value."""
        if isinstance(self.starting_offsets, str):
            return self.starting_offsets
        return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in self.starting_offsets.items()})
