"""Oracle operations (run inside the Iceberg Java process): how Java plans a filtered scan.

Called through ``iceberg_oracle.call("tests.ingest.oracle_scan:planned_files", ...)``;
the first argument is the oracle's SparkSession.
"""

from __future__ import annotations

from typing import Any


def planned_files(spark: Any, metadata_location: str, column: str, low: int, high: int) -> dict[str, Any]:
    """Java's scan planning for ``low <= column < high`` on the table at ``metadata_location``.

    Returns every data file with its partition as Java reads it, the files
    ``newScan().filter(...).planFiles()`` keeps, and the files the partition
    filter alone keeps (the inclusive projection evaluated on each file's
    partition tuple: partition pruning, without column-metrics pruning).
    """
    jvm = spark._jvm
    io = jvm.org.apache.iceberg.hadoop.HadoopFileIO(spark._jsc.hadoopConfiguration())
    table = jvm.org.apache.iceberg.BaseTable(jvm.org.apache.iceberg.StaticTableOperations(metadata_location, io), "t")
    e = jvm.org.apache.iceberg.expressions.Expressions
    bounds = getattr(e, "and")(
        e.greaterThanOrEqual(column, jvm.java.lang.Long.valueOf(str(low))),
        e.lessThan(column, jvm.java.lang.Long.valueOf(str(high))),
    )
    spec = table.spec()
    by_partition = jvm.org.apache.iceberg.expressions.Evaluator(
        spec.partitionType(), jvm.org.apache.iceberg.expressions.Projections.inclusive(spec).project(bounds)
    )
    everything, partition_kept = {}, []
    for task in _tasks(table.newScan()):
        path = str(task.file().location())
        partition = task.file().partition()
        everything[path] = [_python(partition.get(i, jvm.java.lang.Object().getClass())) for i in range(partition.size())]
        if by_partition.eval(partition):
            partition_kept.append(path)
    planned = [str(t.file().location()) for t in _tasks(table.newScan().filter(bounds))]
    return {"files": everything, "planned": sorted(planned), "partition_kept": sorted(partition_kept)}


def _tasks(scan: Any) -> list[Any]:
    iterable = scan.planFiles()
    try:
        tasks, it = [], iterable.iterator()
        while it.hasNext():
            tasks.append(it.next())
        return tasks
    finally:
        iterable.close()


def _python(value: Any) -> Any:
    return None if value is None else int(str(value)) if str(value).lstrip("-").isdigit() else str(value)
