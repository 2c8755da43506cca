"""The ``spark`` and ``storage`` sections: validation, what reaches Spark and the environment, redaction,
and ``floe check``'s Spark line."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from runtime.spark_session import base_spark_conf, local_cores
from service.check import check_spark
from service.config import FloeConfig, load_config, redacted_dict
from service.config.spark import SparkConfig
from service.spark_setup import object_store_settings, spark_session_settings
from tests.service.test_config import minimal, problems_of, write


def load(data: dict[str, Any], tmp_path: Path) -> FloeConfig:
    return load_config(write(tmp_path, data), {})


def with_sections(**sections: Any) -> dict[str, Any]:
    return {**minimal(), **sections}


def test_defaults_are_local_mode_and_leave_the_environment_alone(tmp_path: Path) -> None:
    config = load(with_sections(), tmp_path)
    assert config.spark.master == "local[*]" and config.spark.local and config.compactor_spark is config.spark
    assert config.storage.s3.environment() == {}


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[4,3]", "spark://h1:7077",
                                    "spark://h1:7077,h2:7077", "k8s://https://10.0.0.1:443", "yarn"])
def test_masters_spark_accepts(master: str, tmp_path: Path) -> None:
    assert load(with_sections(spark={"master": master}), tmp_path).spark.master == master


def test_bad_master_and_conf_keys_are_named(tmp_path: Path) -> None:
    problems = problems_of(with_sections(spark={"master": "spark:/h:7077", "conf": {
        "executor.memory": "4g", "spark.master": "local", "spark.driver.host": "x", "spark.executor.cores": 2}}),
        tmp_path)
    assert sorted(problems) == sorted([
        "spark.master: expected local[*], local[N], spark://host:port, k8s://https://host:port or yarn, "
        "got 'spark:/h:7077'",
        "spark.conf.executor.memory: expected a Spark setting, whose name starts with 'spark.'",
        "spark.conf.spark.master: Floe sets it; use spark.master",
        "spark.conf.spark.driver.host: Floe sets it; use spark.driver_host",
    ])


def test_a_cluster_session_gets_the_master_conf_and_driver_address(tmp_path: Path) -> None:
    spark = load(with_sections(spark={"master": "spark://m:7077", "conf": {"spark.executor.cores": 1},
                                      "driver_host": "floe-driver.ns.svc", "bind_address": "0.0.0.0"}),
                 tmp_path).spark
    settings = {**base_spark_conf(spark.master), **spark_session_settings(spark, {})}
    assert settings["spark.master"] == "spark://m:7077" and settings["spark.executor.cores"] == "1"
    assert settings["spark.driver.host"] == "floe-driver.ns.svc" and settings["spark.driver.bindAddress"] == "0.0.0.0"


def test_a_cluster_driver_is_not_bound_to_loopback_unless_asked() -> None:
    assert "spark.driver.host" not in base_spark_conf("spark://m:7077")
    assert base_spark_conf("local[3]")["spark.driver.host"] == "127.0.0.1"
    assert base_spark_conf("local[3]")["spark.default.parallelism"] == "3"
    assert local_cores("local") == 1 and local_cores("local[4,2]") == 4 and local_cores("local[*]") >= 1


def test_the_compactor_may_have_its_own_spark(tmp_path: Path) -> None:
    config = load(with_sections(spark={"master": "spark://m:7077"},
                                compaction={"executor": "spark", "spark": {"master": "local[1]"}}), tmp_path)
    assert config.compactor_spark.master == "local[1]" and config.spark.master == "spark://m:7077"


def test_s3_settings_and_credentials_become_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    config = load(with_sections(storage={"s3": {"endpoint": "http://minio:9000", "region": "eu-west-1",
                                                "path_style_access": True, "access_key_id": "AKIA1",
                                                "secret_access_key_file": str(secret)}}), tmp_path)
    assert config.storage.s3.environment() == {
        "AWS_ENDPOINT_URL_S3": "http://minio:9000", "AWS_REGION": "eu-west-1", "FLOE_S3_PATH_STYLE_ACCESS": "true",
        "AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "s3cr3t"}


def test_bad_storage_settings_are_named(tmp_path: Path) -> None:
    problems = problems_of(with_sections(storage={"s3": {"endpoint": "minio:9000", "secret_access_key": "x"}}),
                           tmp_path)
    assert sorted(problems) == sorted([
        "storage.s3.endpoint: expected http(s)://host[:port], got 'minio:9000'",
        "storage.s3.access_key_id: set it together with secret_access_key (or neither, for the AWS default "
        "provider chain)",
    ])


def test_executors_and_s3a_get_the_drivers_object_store_settings() -> None:
    environ = {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "FLOE_S3_PATH_STYLE_ACCESS": "true",
               "AWS_SECRET_ACCESS_KEY": "s", "HOME": "/root"}
    settings = object_store_settings(environ)
    assert settings["spark.executorEnv.AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    assert settings["spark.executorEnv.AWS_SECRET_ACCESS_KEY"] == "s"
    assert "spark.executorEnv.HOME" not in settings
    assert settings["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert settings["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert settings["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"


def test_secrets_in_spark_conf_and_storage_are_masked(tmp_path: Path) -> None:
    config = load(with_sections(
        spark={"conf": {"spark.hadoop.fs.s3a.secret.key": "hunter2", "spark.executor.memory": "4g"}},
        storage={"s3": {"access_key_id": "AKIA1", "secret_access_key": "hunter2"}}), tmp_path)
    shown = redacted_dict(config)
    assert "hunter2" not in repr(shown)
    assert shown["spark"]["conf"]["spark.executor.memory"] == "4g"


def test_check_reports_local_mode_and_a_master_in_one_line() -> None:
    assert check_spark(SparkConfig(master="local[2]"), "spark").line() == \
        "ok   spark local[2]: local mode, 2 task slot(s) in the driver's process"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        reached = check_spark(SparkConfig(master=f"spark://127.0.0.1:{port}"), "spark")
    assert reached.line() == f"ok   spark spark://127.0.0.1:{port}: master reachable at 127.0.0.1:{port}"
    refused = check_spark(SparkConfig(master=f"spark://127.0.0.1:{port}"), "spark")
    assert not refused.ok and "\n" not in refused.line() and "refused" in refused.line().lower()


def test_on_kubernetes_the_driver_names_its_pod_and_executors_take_credentials_from_a_secret(tmp_path: Path) -> None:
    from service.spark_setup import kubernetes_defaults

    namespace = tmp_path / "namespace"
    namespace.write_text("floe\n")
    assert kubernetes_defaults({"HOSTNAME": "floe-7d9f-abc"}, namespace) == {
        "spark.kubernetes.driver.pod.name": "floe-7d9f-abc", "spark.kubernetes.namespace": "floe"}
    environ = {"HOSTNAME": "floe-7d9f-abc", "AWS_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "s"}
    spark = SparkConfig(master="k8s://https://kubernetes.default.svc:443",
                        conf={"spark.kubernetes.driver.pod.name": "configured"})
    settings = spark_session_settings(spark, environ)
    assert settings["spark.kubernetes.driver.pod.name"] == "configured"  # the section wins
    assert settings["spark.executorEnv.AWS_REGION"] == "eu-west-1"
    assert "spark.executorEnv.AWS_SECRET_ACCESS_KEY" not in settings
    assert "spark.executorEnv.AWS_SECRET_ACCESS_KEY" in spark_session_settings(SparkConfig(master="spark://m:7077"),
                                                                               environ)
