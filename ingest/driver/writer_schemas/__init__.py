"""Table schemas from the schemas producers write with (Avro today), on the driver.

:mod:`.avro_types` maps one writer schema to Iceberg columns; :mod:`.fold`
folds a writer's columns into a table's schema by Iceberg's evolution rules;
:mod:`.subject` follows a registry subject's versions while the query runs.
Pure apart from :mod:`.subject`, which asks the registry.
"""
