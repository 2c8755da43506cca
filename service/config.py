"""Floe's configuration: one validated pydantic model tree, from YAML plus environment overrides.

Both containers of a deployment (``floe ingest`` and ``floe compact``) read the
same file, so every setting lives in one tree (:class:`FloeConfig`) and every
mistake is reported before any work starts, one line per problem, naming the
key path, what was found and what is expected::

    tables[0].key: required when mode is 'upsert' (got nothing)
    kafka.max_offsets_per_trigger: expected an integer, got 'ten'

Rules:

- **Unknown keys are errors** everywhere (a typo must not silently fall back
  to a default), and so are duplicate keys in the YAML file.
- **Environment overrides.** A variable ``FLOE_<PATH>`` overrides the key at
  ``<PATH>``: the path is lower-cased, ``__`` (double underscore) separates
  levels, and a number selects a list item: ``FLOE_KAFKA__BOOTSTRAP_SERVERS``,
  ``FLOE_CATALOG__PASSWORD``, ``FLOE_TABLES__0__MODE``. Values are strings,
  converted by the model's lax rules (``"10"`` → 10, ``"true"`` → true);
  list-of-string keys accept a comma-separated string. Overrides change or
  add keys and change list items; they cannot add list items.
  A variable without ``__`` is an override only when it names a top-level
  key (``FLOE_CHECKPOINT_LOCATION``); other ``FLOE_*`` variables, like
  ``FLOE_JARS_DIR``, belong to other parts of Floe and are ignored here.
  Map keys containing dots (Kafka or table properties) cannot be set this way.
- **Secrets** are ``SecretStr`` (masked in ``repr`` and dumps) or files
  (``*_file``, read only when used); passwords inside URIs are rejected.
  :func:`redacted_dict` is the only form for display.
- Relative file paths (``*_file``, ``schema_dir``) are resolved against the
  directory of the config file; locations (warehouse, checkpoints) must be
  absolute paths or URIs.
"""

from __future__ import annotations

import copy
import json
import os
import re
import types
import typing
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Literal, Mapping, NamedTuple, Optional, Sequence, Union
from urllib.parse import quote, urlsplit, urlunsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SecretStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError, PydanticUndefined

from commit.catalog_uri import POSTGRESQL, parse_catalog_uri, redact_uri
from commit.errors import InvalidArgument
from commit.identifiers import to_table_identifier
from service.logging import is_secret_key, redact
from table.errors import SchemaError, TableError
from table.partitioning import build_partition_spec
from table.schema import Schema, assign_fresh_ids, schema_from_json
from table.transforms import parse_transform
from table.types import parse_primitive

ENV_PREFIX = "FLOE_"
ENV_NESTING = "__"


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` holds one line per problem."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid configuration ({source}):\n" + "\n".join(f"  {p}" for p in problems))


# ----------------------------------------------------------------------------- problems


def _problems(*items: tuple[str, str]) -> PydanticCustomError:
    """A validation error carrying (relative key path, message) pairs, rendered one line each."""
    summary = "; ".join(f"{path}: {message}" if path else message for path, message in items)
    return PydanticCustomError("floe", "{summary}", {"summary": summary, "problems": list(items)})


def _raise_all(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise _problems(*problems)


def _show(value: Any) -> str:
    """A short rendering of an offending value for a message."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
    elif isinstance(value, SecretStr):
        return "<redacted>"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ----------------------------------------------------------------------------- scalar types


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_HINT = "a duration like '500ms', '60s', '5m', '1h30m', '3d' or a number of seconds"


def _parse_duration(value: Any) -> timedelta:
    """``"1h30m"``, ``"60s"``, ``90`` (seconds) → timedelta; never negative."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+", value):
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value))
    elif isinstance(value, str) and re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value):
        seconds = float(value)
    else:
        raise _problems(("", f"expected {_DURATION_HINT}, got {_show(value)}"))
    if seconds < 0:
        raise _problems(("", f"expected a duration that is not negative, got {_show(value)}"))
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest exact form: ``timedelta(hours=1, minutes=30)`` → ``"1h30m"``."""
    millis = round(value.total_seconds() * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _positive_duration(value: timedelta) -> timedelta:
    if value.total_seconds() <= 0:
        raise _problems(("", f"expected a duration greater than 0, got {format_duration(value)!r}"))
    return value


_DurationBase = Annotated[
    timedelta, BeforeValidator(_parse_duration), PlainSerializer(format_duration, return_type=str)
]
Duration = Annotated[_DurationBase, AfterValidator(_positive_duration)]
"""A positive duration: ``60s``, ``5m``, ``1h30m``, ``3d``, or seconds."""
NonNegativeDuration = _DurationBase


def _comma_list(value: Any) -> Any:
    """``"a,b"`` → ``["a", "b"]`` for list-of-string keys (environment overrides are strings)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _stringify(value: Any) -> Any:
    """Property values as Iceberg and Kafka want them: strings (YAML ``true`` → ``"true"``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


StringList = Annotated[list[str], BeforeValidator(_comma_list)]
Properties = dict[str, Annotated[str, BeforeValidator(_stringify)]]


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative to the config file's directory; checked to exist when loading asks for it."""
    context = info.context or {}
    base = context.get("base_dir")
    path = value if value.is_absolute() or base is None else Path(base) / value
    if context.get("check_files") and not path.exists():
        raise _problems(("", f"file not found: {str(path)!r}"))
    return path


ConfigPath = Annotated[Path, AfterValidator(_resolve_path), PlainSerializer(str, return_type=str)]


def _location(value: str) -> str:
    """Warehouse and checkpoint locations: an absolute path or a URI, never relative."""
    if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", value) or value.startswith("/"):
        return value.rstrip("/") or "/"
    raise _problems(("", f"expected an absolute path or a URI like s3://bucket/path, got {_show(value)}"))


Location = Annotated[str, AfterValidator(_location)]

_TOPIC = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


def _topic_name(value: str) -> str:
    if not _TOPIC.match(value):
        raise _problems(("", f"expected a Kafka topic name (letters, digits, '.', '_', '-'), got {_show(value)}"))
    return value


TopicName = Annotated[str, AfterValidator(_topic_name)]


def _read_secret_file(path: Path) -> str:
    """A secret from a mounted file (Kubernetes Secret volume), without the trailing newline."""
    return path.read_text().rstrip("\r\n")


def _has_password(url: str) -> bool:
    """Whether ``url`` carries a password (user info or a ``password=`` query parameter)."""
    parts = urlsplit(url)
    return parts.password is not None or "password=" in parts.query.lower()


class _Model(BaseModel):
    """Base of every config section: unknown keys are errors, and values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


# ----------------------------------------------------------------------------- kafka


class SaslConfig(_Model):
    """SASL authentication to the brokers (Kafka's ``sasl.*`` client settings)."""

    mechanism: Annotated[
        Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
        BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v),
    ] = Field("SCRAM-SHA-512", description="SASL mechanism.")
    username: str = Field(description="SASL user name.")
    password: Optional[SecretStr] = Field(
        None, description="SASL password (prefer `password_file` or `FLOE_KAFKA__SECURITY__SASL__PASSWORD`)."
    )
    password_file: Optional[ConfigPath] = Field(None, description="File holding the SASL password (a mounted Secret).")

    @model_validator(mode="after")
    def _one_password(self) -> "SaslConfig":
        if (self.password is None) == (self.password_file is None):
            raise _problems(("password", "set exactly one of password and password_file"))
        return self

    def password_value(self) -> str:
        """The password (reads ``password_file``). Never log it."""
        if self.password is not None:
            return self.password.get_secret_value()
        assert self.password_file is not None
        return _read_secret_file(self.password_file)

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


class SslConfig(_Model):
    """TLS to the brokers, with PEM files (Kafka's ``ssl.*`` client settings)."""

    ca_file: Optional[ConfigPath] = Field(
        None, description="PEM bundle of CA certificates to trust (default: the JVM's trust store)."
    )
    keystore_file: Optional[ConfigPath] = Field(
        None, description="PEM file with the client's private key and certificate chain (mutual TLS)."
    )
    key_password: Optional[SecretStr] = Field(
        None, description="Password of the private key in `keystore_file`, if it is encrypted."
    )
    key_password_file: Optional[ConfigPath] = Field(None, description="File holding `key_password`.")
    check_hostname: bool = Field(True, description="Verify the broker's host name against its certificate.")

    @model_validator(mode="after")
    def _key_password_needs_keystore(self) -> "SslConfig":
        problems = []
        if self.keystore_file is None and (self.key_password or self.key_password_file):
            problems.append(("key_password", "only used with keystore_file (got a password but no keystore_file)"))
        if self.key_password is not None and self.key_password_file is not None:
            problems.append(("key_password", "set at most one of key_password and key_password_file"))
        _raise_all(problems)
        return self

    def key_password_value(self) -> Optional[str]:
        if self.key_password is not None:
            return self.key_password.get_secret_value()
        return _read_secret_file(self.key_password_file) if self.key_password_file else None


_SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
_SSL_PROTOCOLS = ("SSL", "SASL_SSL")


class KafkaSecurity(_Model):
    """How Floe connects to the brokers; used by the Spark source and the dead-letter producer."""

    protocol: Annotated[
        Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
        BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v),
    ] = Field("PLAINTEXT", description="Kafka `security.protocol`.")
    sasl: Optional[SaslConfig] = Field(None, description="SASL settings; required for SASL_PLAINTEXT and SASL_SSL.")
    ssl: Optional[SslConfig] = Field(None, description="TLS settings; used with SSL and SASL_SSL.")

    @model_validator(mode="after")
    def _matches_protocol(self) -> "KafkaSecurity":
        problems = []
        if self.protocol in _SASL_PROTOCOLS and self.sasl is None:
            problems.append(("sasl", f"required when protocol is {self.protocol!r} (got nothing)"))
        if self.protocol not in _SASL_PROTOCOLS and self.sasl is not None:
            problems.append(
                ("sasl", f"only used when protocol is SASL_PLAINTEXT or SASL_SSL (protocol is {self.protocol!r})")
            )
        if self.protocol not in _SSL_PROTOCOLS and self.ssl is not None:
            problems.append(("ssl", f"only used when protocol is SSL or SASL_SSL (protocol is {self.protocol!r})"))
        _raise_all(problems)
        return self

    def java_client_properties(self) -> dict[str, str]:
        """Kafka Java client settings (for Spark's ``kafka.*`` options). Contains secrets."""
        props = {"security.protocol": self.protocol}
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
    servers = _comma_list(value)
    if isinstance(servers, list):
        for i, server in enumerate(servers):
            if not isinstance(server, str) or not _HOST_PORT.match(server):
                raise _problems((f"[{i}]", f"expected host:port, got {_show(server)}"))
    return servers


def _starting_offsets(value: Any) -> Any:
    """``earliest``, ``latest``, or ``{topic: {partition: offset}}`` (-2 earliest, -1 latest)."""
    if isinstance(value, str) and value.lower() in ("earliest", "latest"):
        return value.lower()
    if not isinstance(value, dict):
        raise _problems(
            ("", f"expected 'earliest', 'latest' or a mapping topic -> partition -> offset, got {_show(value)}")
        )
    problems, out = [], {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            problems.append(
                (render_path((str(topic),)), f"expected a mapping partition -> offset, got {_show(partitions)}")
            )
            continue
        out[str(topic)] = {}
        for partition, offset in partitions.items():
            at = render_path((str(topic), str(partition)))
            if not str(partition).isdigit():
                problems.append((at, f"expected a partition number as key, got {_show(partition)}"))
            elif isinstance(offset, bool) or not isinstance(offset, int) or offset < _EARLIEST:
                problems.append((at, f"expected an offset >= 0, or -2 (earliest) or -1 (latest), got {_show(offset)}"))
            else:
                out[str(topic)][int(partition)] = offset
    _raise_all(problems)
    return out


class KafkaConfig(_Model):
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
    starting_offsets: Annotated[Union[str, dict[str, dict[int, int]]], BeforeValidator(_starting_offsets)] = Field(
        "earliest",
        description="Where a new query starts: `earliest`, `latest`, or topic -> partition -> offset. "
        "Ignored once a checkpoint exists.",
        json_schema_extra={"type_name": "'earliest' | 'latest' | map"},
    )
    max_offsets_per_trigger: Optional[int] = Field(
        None, gt=0, description="Upper bound of records per micro-batch, over all partitions."
    )
    min_offsets_per_trigger: Optional[int] = Field(
        None, gt=0, description="Wait for at least this many records (up to `max_trigger_delay`) before a batch."
    )
    max_trigger_delay: Optional[Duration] = Field(
        None, description="Longest wait for `min_offsets_per_trigger` (Spark's default: 15m)."
    )
    fail_on_data_loss: bool = Field(
        True, description="Fail the query when offsets were deleted by retention before they were read."
    )

    @model_validator(mode="after")
    def _coherent(self) -> "KafkaConfig":
        problems = [
            (render_path(("properties", key)), f"set by {where}, not in properties")
            for key, where in _MANAGED_PROPERTIES.items()
            if key in self.properties
        ]
        low, high = self.min_offsets_per_trigger, self.max_offsets_per_trigger
        if low is not None and high is not None and low > high:
            problems.append(("min_offsets_per_trigger", f"must not exceed max_offsets_per_trigger ({high}), got {low}"))
        if self.max_trigger_delay is not None and low is None:
            problems.append(
                ("max_trigger_delay", "only used with min_offsets_per_trigger (got no min_offsets_per_trigger)")
            )
        _raise_all(problems)
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


# ----------------------------------------------------------------------------- catalog


class CatalogConfig(_Model):
    """The Iceberg SQL catalog (commit/catalog.py) and where table files go."""

    uri: str = Field(
        description="`sqlite:////abs/path/catalog.db` or `postgresql://user@host:port/db` (no password in it)."
    )
    password: Optional[SecretStr] = Field(
        None, description="PostgreSQL password (prefer `FLOE_CATALOG__PASSWORD` or `password_file`)."
    )
    password_file: Optional[ConfigPath] = Field(None, description="File holding the PostgreSQL password.")
    name: str = Field(
        "floe", min_length=1, description="Catalog name (rows of several catalogs can share one database)."
    )
    warehouse: Location = Field(
        description="Root location of new tables: an absolute path or a URI (`s3://bucket/prefix`)."
    )

    @model_validator(mode="after")
    def _valid_uri(self) -> "CatalogConfig":
        try:
            target = parse_catalog_uri(self.uri)
        except InvalidArgument as exc:
            raise _problems(("uri", str(exc))) from None
        problems = []
        if target.backend != POSTGRESQL and not target.address.startswith("/"):
            problems.append(("uri", f"expected an absolute SQLite path, sqlite:////abs/path.db, got {self.uri!r}"))
        if _has_password(self.uri):
            problems.append(
                (
                    "uri",
                    "must not contain a password; use catalog.password or catalog.password_file "
                    f"(got {redact_uri(self.uri)!r})",
                )
            )
        has_password = self.password is not None or self.password_file is not None
        if has_password and target.backend != POSTGRESQL:
            problems.append(("password", "only used with a postgresql:// catalog uri"))
        if self.password is not None and self.password_file is not None:
            problems.append(("password", "set at most one of password and password_file"))
        if has_password and target.backend == POSTGRESQL and not urlsplit(self.uri).username:
            problems.append(
                (
                    "uri",
                    "needs a user name (postgresql://user@host/db) when a password is set "
                    f"(got {redact_uri(self.uri)!r})",
                )
            )
        _raise_all(problems)
        return self

    @property
    def display_uri(self) -> str:
        """The URI for messages and logs (without any password)."""
        return redact_uri(self.uri)

    def connection_uri(self) -> str:
        """The URI to open the catalog with, password included. Never log it."""
        password = self.password.get_secret_value() if self.password else None
        if self.password_file is not None:
            password = _read_secret_file(self.password_file)
        if password is None:
            return self.uri
        parts = urlsplit(self.uri)
        netloc = f"{parts.username}:{quote(password, safe='')}@{parts.netloc.rpartition('@')[2]}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


# ----------------------------------------------------------------------------- table schema


_PRIMITIVE_HINT = (
    "an Iceberg type such as long, string, decimal(10,2), timestamptz, fixed[16], or a struct/list/map object"
)
_NESTED_KEYS = {
    "struct": {"type", "fields"},
    "list": {"type", "element", "element-required"},
    "map": {"type", "key", "value", "value-required"},
}
_COLUMN_KEYS = {"name", "type", "required", "doc"}


def _check_type(value: Any, at: str = "") -> Any:
    """A column type: a primitive name, or a struct/list/map object as in Iceberg's JSON, without ids."""
    if isinstance(value, str):
        try:
            return str(parse_primitive(value.strip()))
        except SchemaError:
            raise _problems((at, f"expected {_PRIMITIVE_HINT}, got {_show(value)}")) from None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in _NESTED_KEYS:
        raise _problems((at, f"expected {_PRIMITIVE_HINT}, got {_show(value)}"))
    unknown = sorted(set(value) - _NESTED_KEYS[kind])
    if unknown:
        raise _problems(
            (_join(at, unknown[0]), f"unknown key (expected one of: {', '.join(sorted(_NESTED_KEYS[kind]))})")
        )
    return {"struct": _check_struct, "list": _check_list, "map": _check_map}[kind](value, at)


def _check_struct(value: dict, at: str) -> dict:
    fields = value.get("fields")
    if not isinstance(fields, list) or not fields:
        raise _problems((_join(at, "fields"), f"expected a non-empty list of columns, got {_show(fields)}"))
    return {"type": "struct", "fields": [_check_column(f, _join(at, f"fields[{i}]")) for i, f in enumerate(fields)]}


def _check_list(value: dict, at: str) -> dict:
    if "element" not in value:
        raise _problems((_join(at, "element"), "required for a list (got nothing)"))
    required = _check_bool(value.get("element-required", False), _join(at, "element-required"))
    return {
        "type": "list",
        "element": _check_type(value["element"], _join(at, "element")),
        "element-required": required,
    }


def _check_map(value: dict, at: str) -> dict:
    for key in ("key", "value"):
        if key not in value:
            raise _problems((_join(at, key), "required for a map (got nothing)"))
    return {
        "type": "map",
        "key": _check_type(value["key"], _join(at, "key")),
        "value": _check_type(value["value"], _join(at, "value")),
        "value-required": _check_bool(value.get("value-required", False), _join(at, "value-required")),
    }


def _check_column(value: Any, at: str) -> dict:
    if not isinstance(value, dict):
        raise _problems((at, f"expected a column mapping (name, type, required, doc), got {_show(value)}"))
    unknown = sorted(set(value) - _COLUMN_KEYS)
    if unknown:
        raise _problems((_join(at, unknown[0]), f"unknown key (expected one of: {', '.join(sorted(_COLUMN_KEYS))})"))
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise _problems((_join(at, "name"), f"expected a column name, got {_show(name)}"))
    if "type" not in value:
        raise _problems((_join(at, "type"), "required (got nothing)"))
    return {
        "name": name,
        "type": _check_type(value["type"], _join(at, "type")),
        "required": _check_bool(value.get("required", False), _join(at, "required")),
        "doc": value.get("doc"),
    }


def _check_bool(value: Any, at: str) -> bool:
    if not isinstance(value, bool):
        raise _problems((at, f"expected true or false, got {_show(value)}"))
    return value


def _join(base: str, key: str) -> str:
    return f"{base}{key}" if not base or key.startswith("[") else f"{base}.{key}"


class Column(_Model):
    """A table column; nested types are written as in Iceberg's JSON, without field ids."""

    name: str = Field(min_length=1, description="Column name.")
    type: Annotated[Any, BeforeValidator(_check_type)] = Field(
        description="Iceberg type: `long`, `decimal(10,2)`, `timestamptz`, or `{type: struct, fields: [...]}`, "
        "`{type: list, element: ..., element-required: ...}`, `{type: map, key: ..., value: ..., value-required: ...}`.",
        json_schema_extra={"type_name": "Iceberg type"},
    )
    required: bool = Field(False, description="Whether the column may not be null.")
    doc: Optional[str] = Field(None, description="Column documentation kept in the table schema.")


def _type_json(spec: Any, next_id: Callable[[], int]) -> Any:
    """Iceberg JSON of a checked type, with ids from ``next_id`` (renumbered afterwards)."""
    if isinstance(spec, str):
        return spec
    if spec["type"] == "struct":
        return {"type": "struct", "fields": [_field_json(f, next_id) for f in spec["fields"]]}
    if spec["type"] == "list":
        return {
            "type": "list",
            "element-id": next_id(),
            "element": _type_json(spec["element"], next_id),
            "element-required": spec["element-required"],
        }
    return {
        "type": "map",
        "key-id": next_id(),
        "key": _type_json(spec["key"], next_id),
        "value-id": next_id(),
        "value": _type_json(spec["value"], next_id),
        "value-required": spec["value-required"],
    }


def _field_json(column: Mapping[str, Any], next_id: Callable[[], int]) -> dict[str, Any]:
    field = {
        "id": next_id(),
        "name": column["name"],
        "required": column["required"],
        "type": _type_json(column["type"], next_id),
    }
    if column.get("doc"):
        field["doc"] = column["doc"]
    return field


def build_schema(columns: list[Column], key: list[str]) -> Schema:
    """The Iceberg schema of ``columns``, ids assigned as Iceberg does at table creation."""
    counter = iter(range(1, 1_000_000))
    fields = [_field_json(c.model_dump(), lambda: next(counter)) for c in columns]
    schema = schema_from_json({"type": "struct", "schema-id": 0, "fields": fields})
    identifiers = [schema.find_field(name).field_id for name in key]
    return assign_fresh_ids(Schema(*schema.fields, identifier_field_ids=identifiers))


# ----------------------------------------------------------------------------- partition and sort terms


class Term(NamedTuple):
    """A transform of a source column: ``bucket[16]`` of ``id``, in Iceberg's transform names."""

    transform: str
    column: str


class SortTerm(NamedTuple):
    transform: str
    column: str
    direction: str  # "asc" | "desc"
    null_order: str  # "nulls-first" | "nulls-last"


_TERM = re.compile(
    r"^\s*(?:(?P<fn>[A-Za-z_]+)\s*\(\s*(?:(?P<arg>\d+)\s*,\s*)?(?P<col>[^()\s,]+)\s*\)|(?P<bare>[^()\s,]+))\s*$"
)
_TRANSFORM_ALIASES = {"years": "year", "months": "month", "days": "day", "hours": "hour"}
_WITH_ARGUMENT = ("bucket", "truncate")
_WITHOUT_ARGUMENT = ("identity", "year", "month", "day", "hour", "void")
_TERM_HINT = (
    "'column' or 'transform(column)' with identity, year, month, day, hour, void, "
    "bucket(N, column), truncate(W, column)"
)
_SORT = re.compile(r"^(?P<term>.+?)(?:\s+(?P<dir>asc|desc))?(?:\s+nulls\s+(?P<nulls>first|last))?\s*$", re.IGNORECASE)


def parse_term(text: str) -> Term:
    """``"bucket(16, id)"`` → ``Term("bucket[16]", "id")``; ``"country"`` is identity."""
    m = _TERM.match(text)
    if not m:
        raise ValueError(f"expected {_TERM_HINT}, got {text!r}")
    if m["bare"]:
        return Term("identity", m["bare"])
    fn = _TRANSFORM_ALIASES.get(m["fn"].lower(), m["fn"].lower())
    if fn in _WITH_ARGUMENT and m["arg"] and int(m["arg"]) > 0:
        return Term(f"{fn}[{int(m['arg'])}]", m["col"])
    if fn in _WITHOUT_ARGUMENT and not m["arg"]:
        return Term(fn, m["col"])
    raise ValueError(f"expected {_TERM_HINT}, got {text!r}")


def parse_sort_term(text: str) -> SortTerm:
    """``"day(ts) desc nulls last"`` → a sort term; nulls default as in Iceberg (first when ascending)."""
    m = _SORT.match(text)
    try:
        term = parse_term(m["term"]) if m else None
    except ValueError:
        term = None
    if m is None or term is None:
        raise ValueError(f"expected '<column or transform(column)> [asc|desc] [nulls first|nulls last]', got {text!r}")
    direction = (m["dir"] or "asc").lower()
    nulls = (m["nulls"] or ("first" if direction == "asc" else "last")).lower()
    return SortTerm(term.transform, term.column, direction, f"nulls-{nulls}")


def _term_list(parse: Callable[[str], Any]) -> Callable[[list[str]], list[str]]:
    """An after-validator: every item of the list parses as a term (one problem line each)."""

    def check(value: list[str]) -> list[str]:
        problems = []
        for i, item in enumerate(value):
            try:
                parse(item)
            except ValueError as exc:
                problems.append((f"[{i}]", str(exc)))
        _raise_all(problems)
        return value

    return check


# ----------------------------------------------------------------------------- table


class FormatConfig(_Model):
    """How Kafka record values are decoded."""

    type: Literal["json", "avro", "confluent-avro"] = Field(
        "json", description="`json`, `avro` (plain binary Avro) or `confluent-avro` (schema-registry framing)."
    )
    schema_file: Optional[ConfigPath] = Field(
        None, description="Avro reader schema (.avsc); required for `avro`, optional for `confluent-avro`."
    )
    registry_url: Optional[str] = Field(
        None, description="Schema registry URL for `confluent-avro` (no credentials in it)."
    )
    registry_username: Optional[str] = Field(None, description="Schema registry basic-auth user.")
    registry_password: Optional[SecretStr] = Field(None, description="Schema registry basic-auth password.")
    schema_dir: Optional[ConfigPath] = Field(
        None, description="For `confluent-avro` without a registry: directory of writer schemas named `<id>.avsc`."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"type": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _fits_type(self) -> "FormatConfig":
        problems = [
            (key, f"only used when type is {allowed} (type is {self.type!r})") for key, allowed in self._misplaced()
        ]
        if self.type == "avro" and self.schema_file is None:
            problems.append(("schema_file", "required when type is 'avro' (got nothing)"))
        if self.type == "confluent-avro" and (self.registry_url is None) == (self.schema_dir is None):
            problems.append(
                ("registry_url", "set exactly one of registry_url and schema_dir when type is 'confluent-avro'")
            )
        if (self.registry_username is None) != (self.registry_password is None):
            problems.append(("registry_username", "set registry_username and registry_password together"))
        if self.registry_url is not None and _has_password(self.registry_url):
            problems.append(
                (
                    "registry_url",
                    "must not contain a password; use registry_username and registry_password "
                    f"(got {redact_uri(self.registry_url)!r})",
                )
            )
        _raise_all(problems)
        return self

    def _misplaced(self) -> Iterator[tuple[str, str]]:
        allowed = {
            "schema_file": ("avro", "confluent-avro"),
            "registry_url": ("confluent-avro",),
            "registry_username": ("confluent-avro",),
            "registry_password": ("confluent-avro",),
            "schema_dir": ("confluent-avro",),
        }
        for key, types_ in allowed.items():
            if getattr(self, key) is not None and self.type not in types_:
                yield key, " or ".join(repr(t) for t in types_)


class OpConfig(_Model):
    """Which value of which record field says insert, update or delete (upsert mode)."""

    field: str = Field("op", min_length=1, description="Record field holding the operation (Debezium: `op`).")
    insert: StringList = Field(
        default_factory=lambda: ["c", "r"], description="Values meaning insert (Debezium: create, snapshot read)."
    )
    update: StringList = Field(default_factory=lambda: ["u"], description="Values meaning update.")
    delete: StringList = Field(default_factory=lambda: ["d"], description="Values meaning delete.")

    @model_validator(mode="after")
    def _disjoint(self) -> "OpConfig":
        seen: dict[str, str] = {}
        problems = []
        for kind in ("insert", "update", "delete"):
            for value in getattr(self, kind):
                if value in seen:
                    problems.append((kind, f"value {value!r} is already listed under {seen[value]}"))
                seen.setdefault(value, kind)
        _raise_all(problems)
        return self


_METADATA_SOURCE = re.compile(r"^(key|timestamp|topic|partition|offset|headers\.[^\s]+)$")
_METADATA_TYPES = {
    "key": ("string", "binary"),
    "headers": ("string", "binary"),
    "timestamp": ("timestamptz", "timestamp", "long"),
    "topic": ("string",),
    "partition": ("int", "long"),
    "offset": ("long",),
}


def _metadata_sources(value: Any) -> Any:
    if isinstance(value, dict):
        problems = [
            (f"{column}", f"expected key, timestamp, topic, partition, offset or headers.<name>, got {_show(source)}")
            for column, source in value.items()
            if not isinstance(source, str) or not _METADATA_SOURCE.match(source)
        ]
        _raise_all(problems)
    return value


class TableConfig(_Model):
    """One Iceberg table fed by one streaming query."""

    identifier: str = Field(description="Table identifier `namespace.table` (namespace levels separated by dots).")
    topics: Optional[Annotated[list[TopicName], BeforeValidator(_comma_list)]] = Field(
        None, description="Source topics (a list or a comma-separated string); or use `topic_pattern`."
    )
    topic_pattern: Optional[str] = Field(
        None, description="Source topics as a Java regular expression matched against whole names."
    )
    share_topics: bool = Field(
        False, description="Allow this table's topics to be read by other tables too (each of them must set it)."
    )
    format: FormatConfig = Field(
        default_factory=FormatConfig, description="Record value format; a string is shorthand for `{type: ...}`."
    )
    columns: Optional[list[Column]] = Field(
        None,
        alias="schema",
        description="Table columns; leave out to derive them from the Avro schema (`avro`, `confluent-avro`).",
    )
    partition_spec: Annotated[list[str], AfterValidator(_term_list(parse_term))] = Field(
        default_factory=list,
        description="Partition fields: `day(event_ts)`, `bucket(16, id)`, `truncate(4, name)`, "
        "`identity(country)` or `country`.",
    )
    sort_order: Annotated[list[str], AfterValidator(_term_list(parse_sort_term))] = Field(
        default_factory=list, description="Sort fields: `id`, `event_ts desc`, `day(event_ts) asc nulls last`."
    )
    key: StringList = Field(default_factory=list, description="Identifier fields (the row key); required for upsert.")
    mode: Literal["append", "upsert"] = Field(
        "append", description="`append` adds every record; `upsert` keeps the latest row per key."
    )
    op: Optional[OpConfig] = Field(
        None,
        description="Operation field of change records (upsert only); without it every record is an upsert, "
        "a null value a delete.",
    )
    metadata_columns: Annotated[dict[str, str], BeforeValidator(_metadata_sources)] = Field(
        default_factory=dict,
        description="Column -> Kafka metadata: `key`, `timestamp`, `topic`, `partition`, `offset`, `headers.<name>`.",
    )
    bad_records: Literal["fail", "dead-letter"] = Field(
        "fail",
        description="`fail` stops the query on an undecodable record; `dead-letter` sends it to `dead_letter_topic`.",
    )
    dead_letter_topic: Optional[TopicName] = Field(
        None, description="Topic for bad records; required with `bad_records: dead-letter`."
    )
    properties: Properties = Field(
        default_factory=dict,
        description="Iceberg table properties set at creation (e.g. `write.target-file-size-bytes`).",
    )

    @property
    def namespace(self) -> tuple[str, ...]:
        return tuple(self.identifier.split(".")[:-1])

    @property
    def name(self) -> str:
        return self.identifier.split(".")[-1]

    @property
    def source_topics(self) -> list[str]:
        """The listed topics (empty when the table subscribes by pattern)."""
        return list(self.topics or [])

    def partition_terms(self) -> list[Term]:
        return [parse_term(t) for t in self.partition_spec]

    def sort_terms(self) -> list[SortTerm]:
        return [parse_sort_term(t) for t in self.sort_order]

    def iceberg_schema(self) -> Optional[Schema]:
        """The explicit schema with fresh ids and the key as identifier fields; None when derived from Avro."""
        return build_schema(self.columns, self.key) if self.columns is not None else None

    @model_validator(mode="after")
    def _coherent(self) -> "TableConfig":
        problems = [*self._identifier_problems(), *self._source_problems(), *self._mode_problems()]
        problems += self._schema_problems() if self.columns is not None else []
        _raise_all(problems)
        return self

    def _identifier_problems(self) -> list[tuple[str, str]]:
        try:
            to_table_identifier(self.identifier)
        except InvalidArgument as exc:
            return [("identifier", f"expected namespace.table: {exc}")]
        return []

    def _source_problems(self) -> list[tuple[str, str]]:
        problems = []
        if (self.topics is None) == (self.topic_pattern is None):
            problems.append(("topics", "set exactly one of topics and topic_pattern"))
        if self.topics is not None and not self.topics:
            problems.append(("topics", "expected at least one topic, got []"))
        if self.topic_pattern is not None:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                problems.append(("topic_pattern", f"expected a regular expression, {exc} (got {self.topic_pattern!r})"))
        if self.bad_records == "dead-letter" and self.dead_letter_topic is None:
            problems.append(("dead_letter_topic", "required when bad_records is 'dead-letter' (got nothing)"))
        if self.bad_records == "fail" and self.dead_letter_topic is not None:
            problems.append(
                ("dead_letter_topic", "only used when bad_records is 'dead-letter' (bad_records is 'fail')")
            )
        if self.dead_letter_topic is not None and self.dead_letter_topic in self.source_topics:
            problems.append(
                ("dead_letter_topic", f"must not be a source topic of the same table, got {self.dead_letter_topic!r}")
            )
        if self.columns is None and self.format.type == "json":
            problems.append(("schema", "required when format is 'json' (got nothing)"))
        return problems

    def _mode_problems(self) -> list[tuple[str, str]]:
        problems = []
        if self.mode == "upsert" and not self.key:
            problems.append(("key", "required when mode is 'upsert' (got nothing)"))
        if self.mode != "upsert" and self.op is not None:
            problems.append(("op", f"only used when mode is 'upsert' (mode is {self.mode!r})"))
        for i, name in enumerate(self.key):
            if name in self.key[:i]:
                problems.append((f"key[{i}]", f"duplicate key field {name!r}"))
        return problems

    def _schema_problems(self) -> list[tuple[str, str]]:
        """Checks against the explicit schema; derived schemas are checked at start-up."""
        assert self.columns is not None
        names = [c.name for c in self.columns]
        problems = [(f"schema[{i}].name", f"duplicate column {n!r}") for i, n in enumerate(names) if n in names[:i]]
        if problems:
            return problems
        try:
            schema = build_schema(self.columns, [])
        except SchemaError as exc:
            return [("schema", str(exc))]
        columns = ", ".join(names)
        for i, name in enumerate(self.key):
            if not _has_field(schema, name):
                problems.append((f"key[{i}]", f"{name!r} is not a column of the schema (columns: {columns})"))
        problems += self._terms_problems(schema, "partition_spec", self.partition_terms(), columns)
        problems += self._terms_problems(schema, "sort_order", self.sort_terms(), columns)
        problems += self._metadata_problems(schema)
        if not problems:
            problems += self._whole_problems(schema)
        return problems

    @staticmethod
    def _terms_problems(schema: Schema, key: str, terms: list[Any], columns: str) -> list[tuple[str, str]]:
        problems = []
        for i, term in enumerate(terms):
            if not _has_field(schema, term.column):
                problems.append(
                    (f"{key}[{i}]", f"source column {term.column!r} is not in the schema (columns: {columns})")
                )
                continue
            field_type = schema.find_field(term.column).field_type
            if not parse_transform(term.transform).can_transform(field_type):
                problems.append(
                    (f"{key}[{i}]", f"{term.transform} cannot apply to {term.column!r} of type {field_type}")
                )
        return problems

    def _metadata_problems(self, schema: Schema) -> list[tuple[str, str]]:
        problems = []
        for column, source in self.metadata_columns.items():
            allowed = _METADATA_TYPES[source.split(".")[0]]
            if not _has_field(schema, column):
                problems.append(
                    (
                        render_path(("metadata_columns", column)),
                        f"{column!r} must be a column of the schema, of type {' or '.join(allowed)}",
                    )
                )
            elif str(schema.find_field(column).field_type) not in allowed:
                found = schema.find_field(column).field_type
                problems.append(
                    (
                        render_path(("metadata_columns", column)),
                        f"{source} needs a column of type {' or '.join(allowed)}, got {found}",
                    )
                )
        return problems

    def _whole_problems(self, schema: Schema) -> list[tuple[str, str]]:
        """The table layer's own rules (identifier fields, redundant partitions)."""
        problems = []
        try:
            build_schema(self.columns or [], self.key)
        except TableError as exc:
            problems.append(("key", str(exc)))
        try:
            build_partition_spec(schema, [(t.transform, t.column) for t in self.partition_terms()])
        except TableError as exc:
            problems.append(("partition_spec", str(exc)))
        return problems


def _has_field(schema: Schema, name: str) -> bool:
    try:
        schema.find_field(name)
        return True
    except (SchemaError, KeyError):
        return False


# ----------------------------------------------------------------------------- service sections


class TriggerConfig(_Model):
    """When micro-batches run."""

    processing_time: Duration = Field(timedelta(seconds=60), description="Interval between micro-batch starts.")
    available_now: bool = Field(
        False, description="Process what is in Kafka now, then stop (back-fills); excludes `processing_time`."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> "TriggerConfig":
        if self.available_now and "processing_time" in self.model_fields_set:
            raise _problems(("available_now", "cannot be combined with processing_time; set one of them"))
        return self


# Iceberg's rewrite_data_files options (RewriteDataFiles, SizeBasedFileRewriter), by value kind.
_REWRITE_OPTIONS = {
    "target-file-size-bytes": "int",
    "min-file-size-bytes": "int",
    "max-file-size-bytes": "int",
    "min-input-files": "int",
    "max-file-group-size-bytes": "int",
    "max-concurrent-file-group-rewrites": "int",
    "delete-file-threshold": "int",
    "delete-ratio-threshold": "float",
    "output-spec-id": "int",
    "rewrite-all": "bool",
    "use-starting-sequence-number": "bool",
    "rewrite-job-order": "none|bytes-asc|bytes-desc|files-asc|files-desc",
}
_REWRITE_ELSEWHERE = {
    "partial-progress.enabled": "compaction.partial_progress.enabled",
    "partial-progress.max-commits": "compaction.partial_progress.max_commits",
    "remove-dangling-deletes": "compaction.remove_dangling_deletes",
}


def _rewrite_option_problem(key: str, value: str) -> Optional[str]:
    if key in _REWRITE_ELSEWHERE:
        return f"set by {_REWRITE_ELSEWHERE[key]}, not in rewrite_options"
    kind = _REWRITE_OPTIONS.get(key)
    if kind is None:
        return f"unknown rewrite option (expected one of: {', '.join(sorted(_REWRITE_OPTIONS))})"
    if kind == "int" and not re.fullmatch(r"\d+", value):
        return f"expected a non-negative integer, got {value!r}"
    if kind == "float" and not re.fullmatch(r"\d+(\.\d+)?", value):
        return f"expected a number, got {value!r}"
    if kind == "bool" and value not in ("true", "false"):
        return f"expected true or false, got {value!r}"
    if "|" in kind and value not in kind.split("|"):
        return f"expected one of {', '.join(kind.split('|'))}, got {value!r}"
    return None


class PartialProgressConfig(_Model):
    """Commit file groups as they finish, so one failing group does not lose a whole run."""

    enabled: bool = Field(True, description="Commit finished file groups during the run.")
    max_commits: int = Field(10, gt=0, description="Most commits one run may make.")


class ExpireSnapshotsConfig(_Model):
    """Snapshot expiry after each compaction run."""

    enabled: bool = Field(True, description="Expire old snapshots.")
    older_than: Duration = Field(timedelta(days=5), description="Expire snapshots older than this.")
    retain_last: int = Field(1, gt=0, description="Always keep at least this many snapshots.")


_ORPHAN_MINIMUM = timedelta(days=1)


class RemoveOrphansConfig(_Model):
    """Deletion of files that no snapshot references (failed writes)."""

    enabled: bool = Field(True, description="Remove orphan files.")
    older_than: Duration = Field(
        timedelta(days=3),
        description="Safety window: only files older than this are removed "
        "(at least 1d, so in-flight writes are never deleted).",
    )

    @model_validator(mode="after")
    def _safe_window(self) -> "RemoveOrphansConfig":
        if self.older_than < _ORPHAN_MINIMUM:
            raise _problems(
                (
                    "older_than",
                    "must be at least 1d, so that files of in-flight commits survive, "
                    f"got {format_duration(self.older_than)!r}",
                )
            )
        return self


class CompactionConfig(_Model):
    """The sidecar compactor: rewrite small files, then table maintenance."""

    interval: Duration = Field(timedelta(hours=1), description="Time between compaction runs of a table.")
    jitter: NonNegativeDuration = Field(
        timedelta(minutes=5), description="Random extra delay per run, so replicas and tables do not run in lockstep."
    )
    rewrite_options: Properties = Field(
        default_factory=dict,
        description="Iceberg `rewrite_data_files` options, e.g. `target-file-size-bytes`, `min-input-files`.",
    )
    partial_progress: PartialProgressConfig = Field(
        default_factory=PartialProgressConfig, description="Partial-progress commits."
    )
    remove_dangling_deletes: bool = Field(True, description="Drop delete files that no longer apply to any data file.")
    expire_snapshots: ExpireSnapshotsConfig = Field(
        default_factory=ExpireSnapshotsConfig, description="Snapshot expiry."
    )
    remove_orphans: RemoveOrphansConfig = Field(default_factory=RemoveOrphansConfig, description="Orphan file removal.")

    @model_validator(mode="after")
    def _coherent(self) -> "CompactionConfig":
        problems = [
            (render_path(("rewrite_options", key)), problem)
            for key, value in self.rewrite_options.items()
            if (problem := _rewrite_option_problem(key, value)) is not None
        ]
        if self.jitter >= self.interval:
            problems.append(
                (
                    "jitter",
                    f"must be shorter than interval ({format_duration(self.interval)}), "
                    f"got {format_duration(self.jitter)!r}",
                )
            )
        _raise_all(problems)
        return self


class HttpConfig(_Model):
    """The ops endpoint (`/metrics`, `/healthz`, `/readyz`) of each component."""

    host: str = Field("0.0.0.0", description="Address to listen on.")
    ingest_port: int = Field(9464, ge=0, le=65535, description="Port of `floe ingest` (0: any free port).")
    compact_port: int = Field(
        9465,
        ge=0,
        le=65535,
        description="Port of `floe compact`; differs from ingest_port because both share a pod's network.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> "HttpConfig":
        if self.ingest_port == self.compact_port != 0:
            raise _problems(
                (
                    "compact_port",
                    f"must differ from ingest_port (both containers share the pod's network), got {self.compact_port}",
                )
            )
        return self

    def port_for(self, component: str) -> int:
        return self.ingest_port if component == "ingest" else self.compact_port


class ReadinessConfig(_Model):
    """What `/readyz` of the ingest component requires."""

    max_commit_age: Duration = Field(
        timedelta(minutes=15), description="Not ready when the last commit is older than this."
    )


# ----------------------------------------------------------------------------- root


class FloeConfig(_Model):
    """The whole configuration of one Floe deployment."""

    kafka: KafkaConfig = Field(description="Kafka connection and read settings.")
    catalog: CatalogConfig = Field(description="Iceberg catalog and warehouse.")
    tables: list[TableConfig] = Field(min_length=1, description="Tables to land, one streaming query each.")
    checkpoint_location: Location = Field(
        description="Spark checkpoint root; each table's query uses `<root>/<identifier>`."
    )
    trigger: TriggerConfig = Field(default_factory=TriggerConfig, description="Micro-batch trigger.")
    compaction: CompactionConfig = Field(default_factory=CompactionConfig, description="Compactor settings.")
    http: HttpConfig = Field(default_factory=HttpConfig, description="Ops HTTP endpoint.")
    readiness: ReadinessConfig = Field(default_factory=ReadinessConfig, description="Readiness rules.")
    log_level: Annotated[
        Literal["DEBUG", "INFO", "WARNING", "ERROR"], BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v)
    ] = Field("INFO", description="Log level of the JSON-lines log.")

    def table(self, identifier: str) -> TableConfig:
        """The table with this identifier; KeyError names the known ones."""
        for table in self.tables:
            if table.identifier == identifier:
                return table
        raise KeyError(
            f"no table {identifier!r} in the configuration (tables: {', '.join(t.identifier for t in self.tables)})"
        )

    def checkpoint_for(self, table: TableConfig) -> str:
        return f"{self.checkpoint_location}/{table.identifier}"

    @model_validator(mode="after")
    def _coherent(self) -> "FloeConfig":
        problems = [*_duplicate_tables(self.tables), *_shared_topics(self.tables), *_dead_letter_clashes(self.tables)]
        trigger = self.trigger.processing_time
        if not self.trigger.available_now and self.readiness.max_commit_age <= trigger:
            problems.append(
                (
                    "readiness.max_commit_age",
                    f"must be longer than trigger.processing_time ({format_duration(trigger)}), "
                    f"got {format_duration(self.readiness.max_commit_age)!r}",
                )
            )
        if isinstance(self.kafka.starting_offsets, dict):
            listed = {t for table in self.tables for t in table.source_topics}
            problems += [
                (f"kafka.starting_offsets.{topic}", f"topic {topic!r} is not listed in any table's topics")
                for topic in self.kafka.starting_offsets
                if topic not in listed
            ]
        _raise_all(problems)
        return self


def _duplicate_tables(tables: list[TableConfig]) -> Iterator[tuple[str, str]]:
    first: dict[str, int] = {}
    for i, table in enumerate(tables):
        if table.identifier in first:
            yield f"tables[{i}].identifier", f"{table.identifier!r} is already used by tables[{first[table.identifier]}]"
        first.setdefault(table.identifier, i)


def _readers(tables: list[TableConfig], topic: str) -> list[int]:
    """Indexes of the tables that read ``topic`` (listed, or matched by their pattern)."""
    return [
        i
        for i, t in enumerate(tables)
        if topic in t.source_topics or (t.topic_pattern is not None and re.fullmatch(t.topic_pattern, topic))
    ]


def _shared_topics(tables: list[TableConfig]) -> Iterator[tuple[str, str]]:
    for i, table in enumerate(tables):
        for j, topic in enumerate(table.source_topics):
            others = [k for k in _readers(tables, topic) if k != i]
            if others and not all(tables[k].share_topics for k in [i, *others]):
                names = ", ".join(f"tables[{k}] ({tables[k].identifier})" for k in others)
                yield (
                    f"tables[{i}].topics[{j}]",
                    f"topic {topic!r} is also read by {names}; set share_topics: true on each of them to allow it",
                )


def _dead_letter_clashes(tables: list[TableConfig]) -> Iterator[tuple[str, str]]:
    for i, table in enumerate(tables):
        topic = table.dead_letter_topic
        if topic is not None and (readers := _readers(tables, topic)):
            yield (
                f"tables[{i}].dead_letter_topic",
                f"topic {topic!r} is a source of tables[{readers[0]}]; dead letters would be read back",
            )


# ----------------------------------------------------------------------------- loading


class _StrictLoader(yaml.SafeLoader):
    """YAML loader that refuses duplicate keys (PyYAML silently keeps the last one)."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the config file: {exc.strerror or exc}"]) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(str(path), [f"{where}{problem}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), [f"expected a mapping of sections at the top level, got {type(data).__name__}"])
    return data


class EnvOverride(NamedTuple):
    variable: str
    path: tuple[str, ...]
    value: str


def env_overrides(environ: Mapping[str, str]) -> list[EnvOverride]:
    """The ``FLOE_*`` variables that override config keys (see the module docstring)."""
    top_level = set(FloeConfig.model_fields)
    found = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        rest = variable[len(ENV_PREFIX) :].lower()
        if ENV_NESTING not in rest and rest not in top_level:
            continue  # FLOE_JARS_DIR and friends: not configuration keys
        found.append(EnvOverride(variable, tuple(rest.split(ENV_NESTING)), environ[variable]))
    return found


def apply_env_overrides(data: dict[str, Any], overrides: Sequence[EnvOverride]) -> dict[str, Any]:
    """A copy of ``data`` with each override set; ConfigError when a path cannot be followed."""
    data = copy.deepcopy(data)
    problems = []
    for override in overrides:
        problem = _set_path(data, override)
        if problem:
            problems.append(f"{override.variable}: {problem}")
    if problems:
        raise ConfigError("environment", problems)
    return data


def _set_path(data: dict[str, Any], override: EnvOverride) -> Optional[str]:
    node: Any = data
    path = override.path
    if any(not part for part in path):
        return f"empty key segment in {override.variable!r} (use single '__' between keys)"
    for depth, part in enumerate(path):
        last = depth == len(path) - 1
        where = render_path(path[: depth + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return f"{where}: no such list item (the list has {len(node)} items)"
            index: Any = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and not isinstance(node.get(part), (dict, list)):
                if node.get(part) is not None:
                    return f"{where}: is a value, not a section"
                if path[depth + 1].isdigit():
                    return f"{where}: no such list in the file (an override can change list items, not add them)"
                node[part] = {}
        else:
            return f"{render_path(path[:depth])}: is a value, not a section"
        if last:
            node[index] = override.value
        else:
            node = node[index]
    return None


def render_path(loc: Sequence[Any]) -> str:
    """``("tables", 0, "key")`` → ``tables[0].key``; ``("properties", "a.b")`` → ``properties['a.b']``."""
    out = ""
    for part in loc:
        if isinstance(part, int) or (isinstance(part, str) and part.isdigit() and out):
            out += f"[{part}]"
        elif not re.fullmatch(r"[A-Za-z0-9_\-]+", str(part)):
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_config(
    path: Union[str, os.PathLike[str]],
    environ: Mapping[str, str] = os.environ,
    *,
    check_files: bool = True,
) -> FloeConfig:
    """Read ``path``, apply ``FLOE_*`` overrides from ``environ``, validate.

    Raises :class:`ConfigError` with one line per problem. ``check_files``
    also requires every referenced file (secrets, Avro schemas) to exist, which
    is what ``floe check`` inside the container wants; pass False to check a
    config away from its deployment.
    """
    path = Path(path)
    overrides = env_overrides(environ)
    data = apply_env_overrides(_read_yaml(path), overrides)
    context = {"base_dir": path.resolve().parent, "check_files": check_files}
    try:
        return FloeConfig.model_validate(data, context=context)
    except ValidationError as exc:
        # "from None": the pydantic error's own rendering could show secret inputs.
        raise ConfigError(str(path), render_errors(exc, overrides)) from None


def parse_config(data: Mapping[str, Any], *, base_dir: Optional[Path] = None) -> FloeConfig:
    """Validate an already-parsed mapping (tests, embedded demo defaults); ConfigError on problems."""
    try:
        return FloeConfig.model_validate(dict(data), context={"base_dir": base_dir, "check_files": False})
    except ValidationError as exc:
        raise ConfigError("mapping", render_errors(exc, [])) from None


# ----------------------------------------------------------------------------- error rendering


def render_errors(exc: ValidationError, overrides: Sequence[EnvOverride] = ()) -> list[str]:
    """One ``path: message`` line per problem, secrets never shown, sorted by path."""
    sources = {render_path(o.path): o.variable for o in overrides}
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        for path, message in _error_lines(error):
            lines.append(f"{path}: {message}" + _env_note(path, sources))
    return sorted(dict.fromkeys(lines), key=_path_sort_key)


def _path_sort_key(line: str) -> list[Any]:
    path = line.split(": ", 1)[0]
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\[\]]+", path) if p]


def _env_note(path: str, sources: dict[str, str]) -> str:
    for source_path, variable in sources.items():
        if path == source_path or path.startswith(source_path + ".") or path.startswith(source_path + "["):
            return f" (from {variable})"
    return ""


def _error_lines(error: Mapping[str, Any]) -> list[tuple[str, str]]:
    loc = tuple(error["loc"])
    if error["type"] == "floe":
        return [(_extend(render_path(loc), rel), message) for rel, message in error["ctx"]["problems"]]
    return [(render_path(loc) or "(top level)", _describe(error, loc))]


def _extend(base: str, rel: str) -> str:
    if not rel:
        return base or "(top level)"
    if not base:
        return rel
    return base + rel if rel.startswith("[") else f"{base}.{rel}"


_MESSAGES: dict[str, str] = {
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "path_type": "expected a file path",
}


def _describe(error: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    secret = any(isinstance(part, str) and is_secret_key(part) for part in loc)
    got = "<redacted>" if secret else _show(error.get("input"))
    if kind == "missing":
        return "required (got nothing)"
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        return "unknown key" + (f" (expected one of: {', '.join(allowed)})" if allowed else "")
    if kind in _MESSAGES:
        return f"{_MESSAGES[kind]}, got {got}"
    if kind in ("literal_error", "enum"):
        return f"expected one of {ctx.get('expected')}, got {got}"
    bounds = {
        "greater_than": "greater than {gt}",
        "greater_than_equal": "at least {ge}",
        "less_than": "less than {lt}",
        "less_than_equal": "at most {le}",
    }
    if kind in bounds:
        return f"expected a number {bounds[kind].format(**ctx)}, got {got}"
    if kind in ("too_short", "too_long"):
        limit = "at least {min_length}" if kind == "too_short" else "at most {max_length}"
        unit = "character(s)" if isinstance(error.get("input"), str) else "item(s)"
        return f"expected {limit.format(**ctx)} {unit}, got {got}"
    if kind == "value_error":
        return f"{ctx.get('error')}, got {got}"
    message = str(error.get("msg", kind))
    return f"{message[:1].lower()}{message[1:]}, got {got}"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the model at ``loc`` accepts (for "unknown key" messages)."""
    current: Any = FloeConfig
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = _unwrap(current)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return [info.alias or name for name, info in model.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and Optional down to the type that holds keys."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = next((a for a in args if _holds_keys(a)), args[0])
        else:
            return annotation


def _holds_keys(annotation: Any) -> bool:
    inner = _unwrap(annotation)
    return typing.get_origin(inner) in (list, dict) or (isinstance(inner, type) and issubclass(inner, BaseModel))


def _step(annotation: Any, part: Any) -> Any:
    inner = _unwrap(annotation)
    origin = typing.get_origin(inner)
    if isinstance(inner, type) and issubclass(inner, BaseModel) and isinstance(part, str):
        by_key = {info.alias or name: info for name, info in inner.model_fields.items()}
        return by_key[part].annotation if part in by_key else None
    if origin is list and isinstance(part, int):
        return typing.get_args(inner)[0]
    if origin is dict:
        return typing.get_args(inner)[1]
    return None


# ----------------------------------------------------------------------------- display


def redacted_dict(config: FloeConfig) -> dict[str, Any]:
    """The configuration as plain data for ``floe check``: defaults filled in, every secret masked."""
    return redact(config.model_dump(mode="json", by_alias=True))


def render_config_reference() -> str:
    """A Markdown table of every key: path, type, default, description (for the README)."""
    lines = [
        "| key | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| `{path}` | {kind} | {default} | {text} |" for path, kind, default, text in _reference_rows(FloeConfig, "")
    ]
    return "\n".join(lines) + "\n"


def _reference_rows(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, str, str, str]]:
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        inner = _unwrap(info.annotation)
        description = _cell(info.description or "")
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            default = "unset" if info.default is None else _default_text(info, section=True)
            yield path, "section", default, description
            yield from _reference_rows(inner, f"{path}.")
        elif typing.get_origin(inner) is list and _is_model(typing.get_args(inner)[0]):
            item = _unwrap(typing.get_args(inner)[0])
            yield path, f"list of {item.__name__.removesuffix('Config').lower() or 'item'}", _default_text(
                info
            ), description
            yield from _reference_rows(item, f"{path}[].")
        else:
            yield path, _cell(_type_name(info)), _default_text(info), description


def _is_model(annotation: Any) -> bool:
    inner = _unwrap(annotation)
    return isinstance(inner, type) and issubclass(inner, BaseModel)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type_name(info: FieldInfo) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "type_name" in extra:
        return str(extra["type_name"])
    return _annotation_name(info.annotation, info.metadata)


def _annotation_name(annotation: Any, metadata: list[Any] = ()) -> str:
    if annotation is timedelta or any(isinstance(m, BeforeValidator) and m.func is _parse_duration for m in metadata):
        return "duration"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _annotation_name(args[0], [*metadata, *args[1:]])
    if origin in (Union, types.UnionType):
        names = [_annotation_name(a) for a in args if a is not type(None)]
        return " or ".join(names)
    if origin is Literal:
        return " | ".join(f"`{a}`" for a in args)
    if origin is list:
        return f"list of {_annotation_name(args[0])}"
    if origin is dict:
        return f"map of {_annotation_name(args[0])} to {_annotation_name(args[1])}"
    simple = {
        str: "string",
        int: "integer",
        bool: "boolean",
        float: "number",
        Path: "file path",
        SecretStr: "secret string",
    }
    return simple.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default_text(info: FieldInfo, section: bool = False) -> str:
    if info.is_required():
        return "**required**"
    if section:
        return ""
    value = info.default_factory() if info.default_factory is not None else info.default
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    if isinstance(value, (list, dict)) and not value:
        return "empty"
    return f"`{json.dumps(value)}`" if not isinstance(value, str) else f"`{value}`"
