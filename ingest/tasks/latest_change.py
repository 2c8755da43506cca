"""A key's last change in Kafka order, in one task's rows.

"Last" is Kafka order: the greatest ``(partition, offset, topic)``
(:data:`KAFKA_ORDER`). The driver's reduction (:mod:`ingest.driver.reduction`)
applies the same rule to a whole batch with a Spark window; here it runs on
one task's rows, in Arrow, for the direct upsert (:mod:`ingest.tasks.direct`):
where every change of a key is in one task, the task's last change of each
key is the batch's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.tasks.decode_records import OFFSET_COLUMN, PARTITION_COLUMN
from ingest.tasks.frame import TOPIC_COLUMN

KAFKA_ORDER = (PARTITION_COLUMN, OFFSET_COLUMN, TOPIC_COLUMN)


_RANK = "_floe_rank"


def latest_positions(rows: pa.Table | pa.RecordBatch, keys: pa.Table) -> np.ndarray:
    """The positions in ``rows`` of each key's last change in Kafka order, ascending. Pure.

    Each row gets its rank in Kafka order, and a hash aggregation keeps the highest rank per key: no sort
    of the rows themselves.
    """
    n = rows.num_rows
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    order_by = pa.table([rows.column(c) for c in KAFKA_ORDER], names=list(KAFKA_ORDER))
    order = pc.sort_indices(order_by, sort_keys=[(c, "ascending") for c in KAFKA_ORDER]).to_numpy()
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    ranked = keys.append_column(_RANK, pa.array(rank))
    last = ranked.group_by(keys.column_names, use_threads=False).aggregate([(_RANK, "max")])
    return np.sort(order[last.column(f"{_RANK}_max").to_numpy()])
