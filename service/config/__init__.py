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
- **Environment overrides**: ``FLOE_<PATH>`` overrides the key at ``<PATH>``,
  e.g. ``FLOE_CATALOG__PASSWORD`` (see :mod:`service.config.environment`).
- **Secrets** are ``SecretStr`` (masked in ``repr`` and dumps) or files
  (``*_file``, read only when used); passwords inside URIs are rejected.
  :func:`redacted_dict` is the only form for display.
- Relative file paths (``*_file``, ``schema_dir``) are resolved against the
  directory of the config file; locations (warehouse, checkpoints) must be
  absolute paths or URIs.

Modules, from the bottom up: ``problems`` (how problems are reported),
``fields`` (shared value types), ``credentials`` (secrets), ``terms`` and
``schema`` (partition/sort terms, column types), the sections ``kafka``,
``catalog``, ``tables``, ``compactor``, the root ``model``; then
``environment``, ``messages`` and ``loading`` (reading a file), and
``redaction`` and ``reference`` (showing a config and its keys).
"""

from service.config.catalog import CatalogConfig
from service.config.compactor import (
    CompactionConfig,
    ExpireSnapshotsConfig,
    PartialProgressConfig,
    RemoveOrphansConfig,
)
from service.config.environment import ENV_NESTING, ENV_PREFIX, EnvOverride, apply_env_overrides, env_overrides
from service.config.fields import (
    ConfigPath,
    Duration,
    Location,
    NonNegativeDuration,
    Properties,
    StringList,
    TopicName,
    format_duration,
)
from service.config.kafka import KafkaConfig, KafkaSecurity, SaslConfig, SslConfig
from service.config.loading import load_config, parse_config
from service.config.messages import render_errors
from service.config.model import FloeConfig, HttpConfig, ReadinessConfig, TriggerConfig
from service.config.problems import ConfigError, render_path
from service.config.redaction import redacted_dict
from service.config.reference import render_config_reference
from service.config.schema import Column, build_schema
from service.config.tables import FormatConfig, OpConfig, TableConfig
from service.config.terms import SortTerm, Term, parse_sort_term, parse_term

__all__ = [
    "ENV_NESTING",
    "ENV_PREFIX",
    "CatalogConfig",
    "Column",
    "CompactionConfig",
    "ConfigError",
    "ConfigPath",
    "Duration",
    "EnvOverride",
    "ExpireSnapshotsConfig",
    "FloeConfig",
    "FormatConfig",
    "HttpConfig",
    "KafkaConfig",
    "KafkaSecurity",
    "Location",
    "NonNegativeDuration",
    "OpConfig",
    "PartialProgressConfig",
    "Properties",
    "ReadinessConfig",
    "RemoveOrphansConfig",
    "SaslConfig",
    "SortTerm",
    "SslConfig",
    "StringList",
    "TableConfig",
    "Term",
    "TopicName",
    "TriggerConfig",
    "apply_env_overrides",
    "build_schema",
    "env_overrides",
    "format_duration",
    "load_config",
    "parse_config",
    "parse_sort_term",
    "parse_term",
    "redacted_dict",
    "render_config_reference",
    "render_errors",
    "render_path",
]
