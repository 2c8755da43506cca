"""Operations that run inside the oracle process, on Iceberg's Java runtime.

Each takes the oracle's SparkSession first; see ``IcebergOracle.call``.
"""

from __future__ import annotations

from typing import Any, Optional


def read_by_metadata_location(spark: Any, metadata_location: str, columns: Optional[list[str]] = None,
                              where: Optional[str] = None, snapshot_id: Optional[int] = None) -> Any:
    """Every live row of the table at ``metadata_location`` (of ``snapshot_id``, else current), as Arrow.

    Iceberg's Spark source loads a path containing ``metadata.json`` as a
    static table, so no catalog is involved.
    """
    df = _snapshot_frame(spark, metadata_location, snapshot_id)
    if where:
        df = df.where(where)
    if columns:
        df = df.select(*columns)
    return df.toArrow()


def read_snapshots_by_metadata_location(spark: Any, metadata_location: str, snapshot_ids: list[int],
                                        snapshot_column: str = "_snapshot") -> Any:
    """The live rows of each of ``snapshot_ids``, in one Spark job: the rows of
    every snapshot, with ``snapshot_column`` naming the snapshot they belong to.

    One job for a table's whole history, instead of one per snapshot: each
    is its own Iceberg scan (``versionAsOf``), planned by Iceberg Java.
    """
    from functools import reduce

    from pyspark.sql import functions as F

    frames = [_snapshot_frame(spark, metadata_location, snapshot_id).withColumn(snapshot_column, F.lit(snapshot_id))
              for snapshot_id in snapshot_ids]
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames).toArrow()


def _snapshot_frame(spark: Any, metadata_location: str, snapshot_id: Optional[int]) -> Any:
    """Iceberg's Spark source on the table at ``metadata_location``, at ``snapshot_id`` (else current)."""
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("versionAsOf", str(snapshot_id))
    return reader.load(metadata_location)


def current_metadata_location(spark: Any, table: str) -> str:
    """The metadata file the catalog currently points ``table`` at."""
    jtable = _load_table(spark, table)
    return jtable.operations().current().metadataFileLocation()


def write_equality_deletes(spark: Any, table: str, column: str, values: list[Any],
                           partition_values: Optional[list[Any]] = None) -> str:
    """Deletes rows whose ``column`` is in ``values`` with a Java-written equality delete file.

    For a partitioned table, ``partition_values`` gives the delete's partition
    tuple (in partition-spec order, as Java values for the transform results).
    Returns the delete file's path.
    """
    jvm = spark._jvm
    gateway = spark.sparkContext._gateway
    jtable = _load_table(spark, table)
    schema = jtable.schema()
    field = schema.findField(column)
    eq_ids = gateway.new_array(jvm.int, 1)
    eq_ids[0] = field.fieldId()
    delete_schema = jvm.org.apache.iceberg.types.TypeUtil.select(schema, jvm.java.util.Collections.singleton(field.fieldId()))
    # Iceberg 1.12 removed GenericAppenderFactory; its file writer factory is built per table.
    builder = getattr(jvm.org.apache.iceberg.data, "GenericFileWriterFactory$Builder")(jtable)
    factory = (builder.deleteFileFormat(jvm.org.apache.iceberg.FileFormat.PARQUET).equalityFieldIds(eq_ids)
               .equalityDeleteRowSchema(delete_schema).build())
    location = jtable.locationProvider().newDataLocation(f"eq-deletes-{jvm.java.util.UUID.randomUUID().toString()}.parquet")
    out = jvm.org.apache.iceberg.encryption.EncryptedFiles.plainAsEncryptedOutput(jtable.io().newOutputFile(location))
    partition = _partition_data(jvm, jtable, partition_values) if partition_values is not None else None
    writer = factory.newEqualityDeleteWriter(out, jtable.spec(), partition)
    # The delete records are the table's own matching rows, projected by Iceberg's
    # generic reader: Java-typed values that never cross into Python (py4j would
    # turn a boxed Long into a Python int and back into an Integer).
    columns = jvm.java.util.ArrayList()
    columns.add(column)
    matching = (
        jvm.org.apache.iceberg.data.IcebergGenerics.read(jtable)
        .select(columns)
        .where(_any_equal(jvm, column, values))
        .build()
    )
    rows = matching.iterator()
    while rows.hasNext():
        writer.write(rows.next())
    matching.close()
    writer.close()
    jtable.newRowDelta().addDeletes(writer.toDeleteFile()).commit()
    return location


def _any_equal(jvm: Any, column: str, values: list[Any]) -> Any:
    """``column = v1 OR column = v2 ...`` as an Iceberg expression."""
    expressions = jvm.org.apache.iceberg.expressions.Expressions
    result = expressions.alwaysFalse()
    for value in values:
        result = getattr(expressions, "or")(result, expressions.equal(column, value))
    return result


def _partition_data(jvm: Any, jtable: Any, values: list[Any]) -> Any:
    data = jvm.org.apache.iceberg.PartitionData(jtable.spec().partitionType())
    for i, v in enumerate(values):
        data.set(i, _java_value(jvm, jtable.spec().partitionType().fields().get(i).type(), v))
    return data


def _java_value(jvm: Any, iceberg_type: Any, value: Any) -> Any:
    """Boxes a Python value as the Java class Iceberg's generic records expect."""
    type_id = iceberg_type.typeId().toString()
    if value is None:
        return None
    if type_id == "LONG":
        return jvm.java.lang.Long.valueOf(str(value))
    if type_id in ("INTEGER", "DATE"):
        return jvm.java.lang.Integer.valueOf(str(value))
    if type_id == "STRING":
        return str(value)
    if type_id == "DOUBLE":
        return jvm.java.lang.Double.valueOf(str(value))
    raise ValueError(f"oracle cannot box a {type_id} value yet")


def _load_table(spark: Any, table: str) -> Any:
    return spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
