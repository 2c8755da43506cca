"""Test oracle: a SparkSession with Iceberg's Java runtime, in its own process.

Iceberg's runtime is test-only and must never share a classpath with Floe's
Spark, so the oracle runs in a separate Python process (and JVM). It reads
one JSON request per line on stdin and answers one line, prefixed with
``@@oracle ``, on stdout; tables travel as Arrow IPC files.

Requests:
  {"op": "conf", "settings": {...}}                  spark.conf.set each
  {"op": "sql", "query": "...", "out": path|null}   run SQL, maybe save result
  {"op": "call", "func": "pkg.mod:fn", "kwargs": {...}, "out": path|null}
      fn(spark, **kwargs); a returned pyarrow.Table is saved to ``out``,
      anything else is returned as JSON ``value``.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

REPLY_PREFIX = "@@oracle "


def build_oracle_session():
    from pyspark.sql import SparkSession

    from runtime import class_archive
    from runtime.jars import jar_paths
    from runtime.spark_session import local_spark_conf

    builder = SparkSession.builder.appName("iceberg-oracle").config(
        "spark.jars", ",".join(jar_paths("iceberg-oracle"))
    )
    conf = {
        **local_spark_conf(),
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": class_archive.java_options(),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def save_arrow(table: Any, out: str) -> int:
    import pyarrow as pa

    with pa.OSFile(out, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return table.num_rows


def handle(spark: Any, request: dict[str, Any]) -> dict[str, Any]:
    import pyarrow as pa

    op = request["op"]
    if op == "conf":
        for key, value in request["settings"].items():
            spark.conf.set(key, value)
        return {}
    if op == "sql":
        df = spark.sql(request["query"])
        if request.get("out"):
            return {"rows": save_arrow(df.toArrow(), request["out"])}
        df.collect()
        return {}
    if op == "call":
        module_name, func_name = request["func"].split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = func(spark, **request.get("kwargs", {}))
        if isinstance(result, pa.Table):
            return {"rows": save_arrow(result, request["out"])}
        return {"value": result}
    raise ValueError(f"unknown oracle op {op!r}")


def reply(message: dict[str, Any]) -> None:
    sys.stdout.write(REPLY_PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    spark = build_oracle_session()
    reply({"ok": True, "ready": True, "spark": spark.version})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply({"ok": True, **handle(spark, json.loads(line))})
        except Exception as exc:  # noqa: BLE001 - reported to the test, which raises it
            reply({"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()})
    spark.stop()


if __name__ == "__main__":
    main()
