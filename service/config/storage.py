"""The ``storage`` section: how every Floe process reaches the object store of the warehouse.

The settings travel as environment variables (:mod:`table.object_store`),
the one channel that reaches the driver, the compactor and every executor.
Keys left unset here keep whatever the environment already says, so a pod
that sets ``AWS_REGION`` or uses a web-identity role needs nothing here.
Credentials set here are secrets: masked in ``floe check`` and in logs;
prefer the AWS SDK's default provider chain (a role) in production.
"""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator

from service.config.credentials import secret_source_problems, secret_value
from service.config.fields import ConfigPath, Section
from service.config.problems import Problem, raise_all
from table.object_store import PATH_STYLE_VARIABLE, S3Settings, endpoint_problem


class S3Config(Section):
    """An S3 or S3-compatible store (MinIO, Ceph, S3Proxy) for `s3://` warehouses and `s3a://` checkpoints."""

    endpoint: str | None = Field(
        None, description="`http(s)://host[:port]` of an S3-compatible server; unset for AWS S3 itself."
    )
    region: str | None = Field(None, description="AWS region, e.g. `eu-west-1` (else `AWS_REGION`).")
    path_style_access: bool = Field(
        False, description="Address buckets as `host/bucket/key` (most S3-compatible servers need it)."
    )
    ca_file: ConfigPath | None = Field(
        None,
        description="PEM bundle of CA certificates to trust for an `https://` endpoint (else `AWS_CA_BUNDLE`, "
        "else the system's).",
    )
    access_key_id: str | None = Field(
        None, description="Access key id; unset to use the AWS default provider chain (env, files, role)."
    )
    secret_access_key: SecretStr | None = Field(
        None, description="Secret access key (prefer `FLOE_STORAGE__S3__SECRET_ACCESS_KEY` or the `_file`)."
    )
    secret_access_key_file: ConfigPath | None = Field(None, description="File holding the secret access key.")
    session_token: SecretStr | None = Field(None, description="Session token of temporary credentials.")
    session_token_file: ConfigPath | None = Field(None, description="File holding the session token.")

    @model_validator(mode="after")
    def _coherent(self) -> S3Config:
        raise_all([*self._endpoint_problems(), *self._credential_problems()])
        return self

    def _endpoint_problems(self) -> list[Problem]:
        problem = None if self.endpoint is None else endpoint_problem(self.endpoint)
        return [] if problem is None else [("endpoint", f"{problem}, got {self.endpoint!r}")]

    def _credential_problems(self) -> list[Problem]:
        problems = secret_source_problems("secret_access_key", self.secret_access_key, self.secret_access_key_file)
        problems += secret_source_problems("session_token", self.session_token, self.session_token_file)
        has_secret = self.secret_access_key is not None or self.secret_access_key_file is not None
        if has_secret != (self.access_key_id is not None):
            problems.append(
                (
                    "access_key_id",
                    "set it together with secret_access_key (or neither, for the AWS default provider chain)",
                )
            )
        return problems

    def environment(self) -> dict[str, str]:
        """The variables that carry these settings to Floe's processes. Holds secrets: never log it."""
        ca_file = None if self.ca_file is None else str(self.ca_file)
        settings = S3Settings(self.endpoint, self.region, self.path_style_access, ca_file)
        variables = {
            k: v
            for k, v in settings.environment().items()
            if k != PATH_STYLE_VARIABLE or "path_style_access" in self.model_fields_set
        }
        credentials = {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": secret_value(self.secret_access_key, self.secret_access_key_file),
            "AWS_SESSION_TOKEN": secret_value(self.session_token, self.session_token_file),
        }
        return {**variables, **{k: v for k, v in credentials.items() if v is not None}}


class StorageConfig(Section):
    """Object stores of the warehouse and the checkpoints (GCS and ADLS: see docs/object-storage.md)."""

    s3: S3Config = Field(default_factory=S3Config, description="S3 and S3-compatible stores.")
