"""The dead-letter pass: a batch's bad records, produced to the dead-letter topic before its commit.

Only a batch with bad records under the ``dead-letter`` policy runs it: a
second Spark job decodes the batch's records again, with their headers, and
its tasks produce the ones that fail (:mod:`ingest.tasks.dead_letter_task`).
Kafka must acknowledge every one of them, or the batch fails and commits
nothing: a bad record is never dropped.
"""

from __future__ import annotations

from functools import partial

from ingest.driver.offset_accounting import BatchStats
from ingest.job import IngestJob, TableSpec
from ingest.kafka_source.rows import KafkaRows
from ingest.tasks.dead_letter_task import SENT_DDL, DeadLetterTarget, decode_and_send
from ingest.tasks.dead_letters import DeadLetterDeliveryError


def send_dead_letters(job: IngestJob, table: TableSpec, rows: KafkaRows, stats: BatchStats) -> None:
    """Produce the batch's bad records to ``table``'s dead-letter topic; raise unless all were acknowledged."""
    from pyspark.sql import functions as F

    assert table.dead_letter_topic is not None  # the fail policy raised in the decode tasks
    target = DeadLetterTarget(table.dead_letter_topic, tuple(job.source.librdkafka_config().items()))
    counts = rows.map(partial(decode_and_send, decode=table.decode, target=target), SENT_DDL, headers=True)
    sent = counts.agg(F.sum("sent").alias("sent")).collect()[0]["sent"] or 0
    if sent != stats.bad_records:
        raise DeadLetterDeliveryError(f"{sent} dead letters acknowledged by Kafka, {stats.bad_records} expected")
