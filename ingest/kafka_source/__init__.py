"""Floe's own Kafka source for Spark (``kafka.reader: python``): Spark plans the micro-batches and keeps
the offsets; the tasks read the records with librdkafka and decode and write them in the same Python
process, so the records never pass through the JVM.

* :mod:`.offsets`: pure planning (start offsets, admission control, task ranges);
* :mod:`.watermarks`: what Kafka holds now (topics, partitions, watermarks);
* :mod:`.reader`: the Spark data source (``format("floe-kafka")``), whose batches are offset ranges;
* :mod:`.consume`: a task reading its ranges as Spark's Kafka rows;
* :mod:`.rows`: the batch's Kafka rows from either source, for the batch's Arrow maps.
"""
