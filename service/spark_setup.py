"""Starts the Spark session of a Floe command from its configuration.

The ``storage`` settings go into this process's environment first (the
driver's own file IO reads them there), then to the executors as
``spark.executorEnv.*`` and to Hadoop's S3A as ``spark.hadoop.fs.s3a.*``, so
that every process reaches the object store the same way. On a cluster the
executors are checked, before any work, to be able to import Floe.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.logging import redact
from runtime.spark_session import ExecutorSetupError, build_spark_session, ship_floe_packages, verify_executors
from service.config import FloeConfig
from service.config.spark import SparkConfig
from service.failures import CommandError
from table.object_store import CREDENTIAL_VARIABLES, FORWARDED_VARIABLES, S3Settings

log = logging.getLogger(__name__)
_S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def apply_storage(config: FloeConfig) -> None:
    """Put the configured object-store settings into this process's environment."""
    os.environ.update(config.storage.s3.environment())


def object_store_settings(environ: Mapping[str, str], *, credentials: bool = True) -> dict[str, str]:
    """Spark settings that give executors and Hadoop's S3A the driver's object-store settings.

    ``credentials=False`` leaves the AWS credentials out of the executors'
    environment: on Kubernetes, executor pods take them from a Secret
    (``spark.kubernetes.executor.secretKeyRef.*``) instead of the pod spec.
    """
    names = [n for n in FORWARDED_VARIABLES if credentials or n not in CREDENTIAL_VARIABLES]
    settings = {f"spark.executorEnv.{name}": environ[name] for name in names if environ.get(name)}
    hadoop = S3Settings.from_environment(environ).hadoop_options()
    settings.update({f"spark.hadoop.{key}": value for key, value in hadoop.items()})
    # s3:// (the warehouse's scheme) served by S3A too, so a checkpoint may be written either way.
    settings["spark.hadoop.fs.s3.impl"] = _S3A
    return settings


def spark_session_settings(spark: SparkConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Every Spark setting a Floe session gets from its configuration (secrets included)."""
    on_kubernetes = spark.master.startswith("k8s://")
    return {
        "spark.master": spark.master,
        **object_store_settings(environ, credentials=not on_kubernetes),
        **(kubernetes_defaults(environ) if on_kubernetes else {}),
        **spark.session_settings(),
    }


def kubernetes_defaults(
    environ: Mapping[str, str], namespace_file: Path = _SERVICE_ACCOUNT_NAMESPACE
) -> dict[str, str]:
    """The driver pod's own name and namespace, which Spark needs in client mode.

    With the pod's name, executor pods are owned by the driver pod and
    deleted with it, even when the driver is killed; a pod's host name is
    its name. The namespace is the service account's. The ``spark.conf``
    section overrides both.
    """
    defaults = {}
    if environ.get("HOSTNAME"):
        defaults["spark.kubernetes.driver.pod.name"] = environ["HOSTNAME"]
    if namespace_file.is_file():
        defaults["spark.kubernetes.namespace"] = namespace_file.read_text().strip()
    return defaults


def start_spark(config: FloeConfig, app_name: str, spark: SparkConfig) -> Any:
    """The command's SparkSession: configured, given Floe's code if asked, its executors checked."""
    apply_storage(config)
    settings = spark_session_settings(spark, os.environ)
    log.info(
        "spark starting",
        extra={"app": app_name, "master": spark.master, "conf": redact(dict(spark.conf)) if spark.conf else {}},
    )
    session = build_spark_session(app_name, settings)
    try:
        if spark.ship_floe:
            ship_floe_packages(session)
        if not spark.local:
            hosts = verify_executors(session)
            log.info("spark executors can run Floe", extra={"master": spark.master, "hosts": ",".join(hosts)})
    except ExecutorSetupError as error:
        session.stop()
        raise CommandError(str(error)) from None
    return session
