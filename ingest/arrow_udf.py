"""``DataFrame.mapInArrow`` without pandas.

PySpark 4.1's public ``mapInArrow`` builds its UDF through ``pandas_udf``,
which refuses to run unless pandas is installed, although an Arrow map never
touches pandas (neither on the driver nor in the Python workers). Floe does
not depend on pandas, so when it is missing this builds the same Arrow-map
UDF (``SQL_MAP_ARROW_ITER_UDF``) directly and hands it to the same JVM method
the public API calls. With pandas installed, the public API is used.

Every Arrow map of Floe goes through here, so this is also where its Python
worker stops re-reading Spark's archives before every task
(:mod:`runtime.python_worker`). The storage credentials a task needs travel
in its own description, with its table's FileIO.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from runtime.python_worker import skip_unchanged_archive_rereads

ArrowMapFunction = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def map_in_arrow(df: Any, func: ArrowMapFunction, schema: Any | str) -> Any:
    """``df.mapInArrow(func, schema)``, with or without pandas installed."""
    func = partial(_in_worker, func=func)
    if importlib.util.find_spec("pandas") is not None:
        return df.mapInArrow(func, schema)
    from pyspark.sql import DataFrame
    from pyspark.sql.udf import _create_udf
    from pyspark.util import PythonEvalType

    udf = _create_udf(func, schema, PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
    column = udf(*[df[name] for name in df.columns])
    return DataFrame(df._jdf.mapInArrow(column._jc, False, None), df.sparkSession)


def _in_worker(batches: Iterator[pa.RecordBatch], func: ArrowMapFunction) -> Iterator[pa.RecordBatch]:
    skip_unchanged_archive_rereads()
    return func(batches)
