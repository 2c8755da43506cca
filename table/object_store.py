"""How Floe reaches an S3-compatible object store: endpoint, region, addressing style.

Every process that touches table files needs the same settings: the driver,
the compactor, and each Spark executor's Python worker, which may run on
another host. The process environment is the one channel that reaches all
of them (a pod's env, ``spark.executorEnv.*``, a worker's own environment),
and the AWS SDKs already read their credentials from it. So the settings
are read from the environment, under the AWS SDKs' own names where they
have one:

- ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``: an S3-compatible server
  (MinIO, S3Proxy, Ceph); unset for AWS itself.
- ``AWS_REGION`` or ``AWS_DEFAULT_REGION``.
- ``FLOE_S3_PATH_STYLE_ACCESS``: ``true`` for ``http://host/bucket/key``
  addressing, which most S3-compatible servers need (the AWS SDKs have no
  environment name for it).
- ``AWS_CA_BUNDLE``: a PEM file of the certificate authorities to trust for
  an ``https://`` endpoint signed by a CA of one's own; unset, the system's.

Credentials are not read from here: a catalog may vend them per table
(:mod:`table.storage_credentials`), and otherwise the AWS SDK's default
provider chain finds them (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/
``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and the shared files, web identity
as on EKS, the instance or container role).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
REGION_VARIABLES = ("AWS_REGION", "AWS_DEFAULT_REGION")
PATH_STYLE_VARIABLE = "FLOE_S3_PATH_STYLE_ACCESS"
CA_BUNDLE_VARIABLE = "AWS_CA_BUNDLE"
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no", ""})


class ObjectStoreSettingError(ValueError):
    """An object-store setting in the environment has a value Floe cannot use."""


@dataclass(frozen=True)
class S3Settings:
    """Where and how to address S3; ``None`` leaves the choice to the AWS SDK."""

    endpoint: str | None = None
    region: str | None = None
    path_style_access: bool = False
    ca_file: str | None = None
    """PEM certificate authorities trusted for the endpoint's TLS; None: the system's."""
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    """Explicit keys (vended by a catalog: :mod:`table.storage_credentials`); else the SDK's chain finds them."""

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> S3Settings:
        """The settings in ``environ``, checked; a bad value names its variable."""
        endpoint = _first(environ, ENDPOINT_VARIABLES)
        if endpoint is not None:
            problem = endpoint_problem(endpoint)
            if problem is not None:
                name = next(v for v in ENDPOINT_VARIABLES if environ.get(v))
                raise ObjectStoreSettingError(f"{name}={endpoint!r}: {problem}")
        flag = environ.get(PATH_STYLE_VARIABLE, "").strip().lower()
        if flag not in _TRUE | _FALSE:
            raise ObjectStoreSettingError(
                f"{PATH_STYLE_VARIABLE}={environ[PATH_STYLE_VARIABLE]!r}: expected true or false"
            )
        ca_file = _first(environ, (CA_BUNDLE_VARIABLE,))
        if ca_file is not None and not os.path.isfile(ca_file):
            raise ObjectStoreSettingError(f"{CA_BUNDLE_VARIABLE}={ca_file!r}: no such file")
        return cls(endpoint, _first(environ, REGION_VARIABLES), flag in _TRUE, ca_file)

    def with_keys(self, access_key: str, secret_key: str, session_token: str | None) -> S3Settings:
        """The same store, reached with these keys instead of the SDK's default chain."""
        return replace(self, access_key=access_key, secret_key=secret_key, session_token=session_token)

    def environment(self) -> dict[str, str]:
        """The variables that carry these settings to another process (an executor)."""
        variables = {PATH_STYLE_VARIABLE: "true" if self.path_style_access else "false"}
        if self.endpoint is not None:
            variables[ENDPOINT_VARIABLES[0]] = self.endpoint
        if self.region is not None:
            variables[REGION_VARIABLES[0]] = self.region
        if self.ca_file is not None:
            variables[CA_BUNDLE_VARIABLE] = self.ca_file
        return variables

    def pyarrow_options(self) -> dict[str, object]:
        """Keyword arguments for ``pyarrow.fs.S3FileSystem``."""
        # pyarrow addresses a bucket by path whenever an endpoint is given, so
        # virtual addressing must be asked for there unless path style is wanted.
        options: dict[str, object] = {
            "force_virtual_addressing": self.endpoint is not None and not self.path_style_access
        }
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint)
            options.update(endpoint_override=parts.netloc, scheme=parts.scheme)
        if self.region is not None:
            options["region"] = self.region
        if self.ca_file is not None:
            options["tls_ca_file_path"] = self.ca_file
        if self.access_key is not None:
            options.update(
                access_key=self.access_key, secret_key=self.secret_key, session_token=self.session_token or ""
            )
        return options

    def hadoop_options(self) -> dict[str, str]:
        """The same settings for Hadoop's S3A file system (a Spark checkpoint on ``s3a://``)."""
        options = {"fs.s3a.path.style.access": "true" if self.path_style_access else "false"}
        if self.endpoint is not None:
            options["fs.s3a.endpoint"] = self.endpoint
            options["fs.s3a.connection.ssl.enabled"] = str(urlsplit(self.endpoint).scheme == "https").lower()
        if self.region is not None:
            options["fs.s3a.endpoint.region"] = self.region
        return options


def endpoint_problem(endpoint: str) -> str | None:
    """What is wrong with an endpoint, or None: it is ``http(s)://host[:port]`` (the scheme decides TLS, no path)."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path.strip("/") or parts.query:
        return "expected http(s)://host[:port]"
    return None


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


CREDENTIAL_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
FORWARDED_VARIABLES = (
    *ENDPOINT_VARIABLES,
    *REGION_VARIABLES,
    PATH_STYLE_VARIABLE,
    CA_BUNDLE_VARIABLE,
    *CREDENTIAL_VARIABLES,
)
"""Every variable an executor needs to reach the store as its driver does."""
