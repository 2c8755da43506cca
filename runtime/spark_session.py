"""Builds the SparkSession that Floe's streaming job runs in.

The Kafka source jars come from the ``spark-kafka`` jar set (see
``runtime.jars``). PYSPARK_PYTHON is pinned to the interpreter running the
driver, so that executors (Python workers) see the same installed packages.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

from runtime.jars import jar_paths


def local_spark_conf(cores: int = 2, shuffle_partitions: int = 4) -> dict[str, str]:
    """Settings for a small local-mode Spark: no UI, few shuffle partitions."""
    return {
        "spark.master": f"local[{cores}]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.default.parallelism": str(cores),
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def build_spark_session(
    app_name: str,
    conf: Optional[Mapping[str, str]] = None,
    extra_jars: tuple[str, ...] = (),
):  # -> pyspark.sql.SparkSession (imported lazily: pyspark is heavy)
    """A SparkSession with the Kafka source on its classpath."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    jars = [*jar_paths("spark-kafka"), *extra_jars]
    builder = SparkSession.builder.appName(app_name).config("spark.jars", ",".join(jars))
    for key, value in {**local_spark_conf(), **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
