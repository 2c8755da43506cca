"""Table schemas from the schemas producers write with, on the driver.

One module per writer schema format maps one schema to Iceberg columns (:mod:`.avro_types`,
:mod:`.json_schema_types`, :mod:`.protobuf_types`; what they cannot map is :class:`.unmappable.UnmappableSchema`);
:mod:`.fold` folds a writer's columns into a table's schema by Iceberg's evolution rules; :mod:`.subject`
follows a registry subject's versions while the query runs. All pure but :mod:`.subject`, which asks the
registry.
"""
