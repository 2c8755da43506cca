"""Builds and runs the streaming query of one ingest job, and stops it gracefully.

:func:`run_ingest` prepares the table (:mod:`ingest.driver.table_setup`), reads the
source with Spark's Kafka source, hands every micro-batch to
:class:`ingest.driver.batch.BatchProcessor` through ``foreachBatch`` and returns an
:class:`IngestQuery` (a ``StreamingQuery``-style handle).

Graceful stop (``stop_event`` set, or :meth:`IngestQuery.stop`): no new batch
starts (one that begins anyway raises :class:`IngestStopped` before touching
anything, so Spark replays it after a restart); the running batch is given
``job.grace_seconds`` to finish; then the query is stopped, which cancels a
batch still running. A commit is a single compare-and-swap of the table
pointer, so whatever happens the table gets a whole batch or nothing.

Where a new checkpoint starts: Spark honours ``startingOffsets`` only when
the checkpoint is new. If the table already holds committed offsets (a lost
or moved checkpoint), the query starts from them rather than from the
configured position, so records are neither read twice nor skipped.
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from commit.catalog.base import Catalog
from commit.exactly_once import committed_offsets, last_batch_snapshot
from ingest.driver.batch import BatchProcessor, IngestStopped
from ingest.driver.lag import LagMonitor, LagProbe
from ingest.driver.metrics import IngestMetrics
from ingest.driver.offset_accounting import PINNED_START, starting_offsets
from ingest.driver.table_setup import ensure_table
from ingest.job import IngestJob, JobSpecError, SharedIngestJob, with_decode_schema
from ingest.kafka_source.offsets import Offsets, high_offsets, reached, starting_offsets_now
from ingest.kafka_source.watermarks import TopicWatermarks
from table.io import FileIO

log = logging.getLogger("floe.ingest")


class StopGate:
    """Lets batches run one at a time until a stop is requested, then refuses them."""

    def __init__(self) -> None:
        self._running = threading.Lock()
        self.stopping = threading.Event()
        self.refused = False

    @contextlib.contextmanager
    def between_batches(self) -> Iterator[bool]:
        """Work of the query's own between two batches (a due commit): it holds the batch slot, so a stop
        waits for it as for a batch; yields False, doing nothing, once a stop was requested."""
        with self._running:
            yield not self.stopping.is_set()

    def wrap(self, process: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
        def run(df: Any, batch_id: int) -> None:
            with self._running:
                if self.stopping.is_set():
                    self.refused = True
                    raise IngestStopped(f"batch {batch_id} refused: the query is stopping")
                try:
                    process(df, batch_id)
                except IngestStopped:  # given up in a wait (a raced batch's backoff): the stop asked for
                    self.refused = True
                    raise

        return run

    def stop(self, query: Any, grace_s: float) -> None:
        """Refuse new batches, wait up to ``grace_s`` for the running one, then stop the query.

        The lock is released before ``query.stop()``: Spark's stop waits for
        the batch thread, which may be waiting on this very lock.
        """
        self.stopping.set()
        if self._running.acquire(timeout=grace_s):
            self._running.release()
        else:
            log.warning("the running batch did not finish within %.0fs; cancelling it", grace_s)
        query.stop()


class IngestQuery:
    """A running ingest query: ``StreamingQuery``-style, with a graceful :meth:`stop`."""

    def __init__(
        self,
        query: Any,
        job: IngestJob | SharedIngestJob,
        gate: StopGate,
        stop_event: threading.Event,
        metrics: IngestMetrics,
        monitor: LagMonitor | None,
        catalog: Catalog,
        ending: Offsets | None = None,
        on_end: Callable[[], None] = lambda: None,
        failure: Callable[[], BaseException | None] = lambda: None,
    ) -> None:
        self.query = query
        self._on_end = on_end
        self._failure = failure
        self._catalog = catalog
        self.job = job
        self._gate = gate
        self._stop_event = stop_event
        self._metrics = metrics
        self._monitor = monitor
        self._finished = threading.Event()
        # The threads that may call ``query.stop()``: joined by :meth:`stop`, so that none calls it after the
        # caller has gone on to stop the Spark session (a query that ended by itself meanwhile).
        self._stoppers = [threading.Thread(target=self._watch_stop, name="floe-stop-watch", daemon=True)]
        if ending is not None:
            self._stoppers.append(
                threading.Thread(target=self._watch_caught_up, args=(ending,), name="floe-caught-up", daemon=True)
            )
        for thread in self._stoppers:
            thread.start()
        threading.Thread(target=self._watch_end, name="floe-end-watch", daemon=True).start()

    @property
    def id(self) -> str:
        """The query id: the writer id recorded in every snapshot this job commits."""
        return self.query.id

    @property
    def is_active(self) -> bool:
        return self.query.isActive

    @property
    def recent_progress(self) -> list:
        return self.query.recentProgress

    def stop(self) -> None:
        """Graceful stop; returns when the query has stopped and nothing of this query will touch Spark again."""
        self._stop_event.set()
        self._finished.wait()
        for thread in self._stoppers:
            thread.join()

    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query to end; raises its error, unless the end was a requested stop."""
        if not self._finished.wait(timeout):
            return False
        error = self.exception()
        if error is not None:
            raise error
        return True

    def exception(self) -> BaseException | None:
        """The query's error (or of its work between batches); None while it runs, after success, or after a
        graceful stop."""
        failure = self._failure()
        if failure is not None:
            return failure
        error = self.query.exception()
        if error is not None and self._gate.refused and IngestStopped.__name__ in str(error):
            return None  # our own IngestStopped: the stop that was asked for
        return error

    def _watch_stop(self) -> None:
        while not self._finished.is_set():
            if self._stop_event.wait(1.0) or self._failure() is not None:
                log.info("stopping ingest query %s", self.job.name, extra=_tables_extra(self.job))
                self._gate.stop(self.query, self.job.grace_seconds)
                return

    def _watch_caught_up(self, ending: Offsets) -> None:
        """An ``availableNow`` run of the Python source: stop once a finished batch reached ``ending``
        (an end of its own, not a requested stop)."""
        while not self._finished.wait(0.2):
            try:
                end = _progress_end(self.query.lastProgress)
            except Exception as error:  # noqa: BLE001 - a query that died ends through _watch_end
                log.warning("could not read the query's progress: %s", error)
                continue
            if end is not None and reached(end, ending):
                log.info(
                    "ingest query %s read everything available at its start",
                    self.job.name,
                    extra=_tables_extra(self.job),
                )
                self._gate.stop(self.query, self.job.grace_seconds)
                return

    def _watch_end(self) -> None:
        try:
            self.query.awaitTermination()
        except Exception:  # noqa: BLE001 - the error stays on the query: exception() reports it
            pass
        finally:
            for table in self.job.table_ids:
                self._metrics.set_active(table, False)
            self._on_end()
            if self._monitor is not None:
                self._monitor.stop()
            self._catalog.close()
            self._finished.set()


def _tables_extra(job: IngestJob | SharedIngestJob) -> dict[str, Any]:
    """The log fields naming a query's tables: ``table`` for one, ``tables`` (their count) for a shared query."""
    ids = job.table_ids
    return {"table": ids[0]} if len(ids) == 1 else {"tables": len(ids)}


def _progress_end(progress: Any) -> dict | None:
    """The source's end offset in a progress report (pyspark gives it as JSON, or as a dict's text)."""
    sources = progress["sources"] if progress else []
    end = sources[0]["endOffset"] if sources else None
    if not isinstance(end, str):
        return end
    try:
        return json.loads(end)
    except ValueError:
        return ast.literal_eval(end)


def run_ingest(
    job: IngestJob,
    spark: Any,
    stop_event: threading.Event | None = None,
    metrics: IngestMetrics | None = None,
    *,
    lag_monitor: bool = True,
) -> IngestQuery:
    """Start the job's streaming query in ``spark``; returns at once with its handle.

    ``metrics`` defaults to a private registry (the service passes the one it
    exports). ``lag_monitor`` runs the lag/freshness probe against Kafka.
    """
    from prometheus_client import CollectorRegistry

    if job.commit_interval_seconds is not None:
        raise JobSpecError("commit_interval_seconds", "only a shared query commits by interval (ingest.query: shared)")
    metrics = metrics or IngestMetrics(CollectorRegistry())
    stop_event = stop_event or threading.Event()
    catalog = job.catalog.open()
    try:
        probe = LagProbe(job, catalog, metrics)
        try:
            probe.require_topics()  # before the table: nothing is created for a topic that cannot be read
            loaded = ensure_table(catalog, job.table)
            last = last_batch_snapshot(loaded.metadata)
            metrics.register_table(job.table.identifier, None if last is None else last.timestamp_ms / 1000)
            table = with_decode_schema(job.table, loaded.metadata.schema())
            start = _start_offsets(job, loaded.metadata, probe)
            if job.source.reader == "python":
                start = pinned_starting_offsets(job.checkpoint_location, start, probe)
            ending = available_now_end(job, probe)
        except BaseException:
            probe.close()
            raise
        if not lag_monitor:
            probe.close()
        monitor = LagMonitor(probe, job.lag_interval_seconds) if lag_monitor else None
        gate = StopGate()
        processor = BatchProcessor(
            job, table, catalog, metrics, on_commit=monitor.poke if monitor else lambda: None, stopping=gate.stopping
        )
        query = start_query(job, spark, gate.wrap(processor), start, ending)
    except BaseException:
        catalog.close()
        raise
    processor.bind(query.id)
    metrics.set_active(job.table.identifier, True)
    if monitor is not None:
        monitor.start()
    log.info("ingest query %s started (id %s)", job.name, query.id, extra={"table": job.table.identifier})
    return IngestQuery(query, job, gate, stop_event, metrics, monitor, catalog, ending)


def start_query(
    job: IngestJob | SharedIngestJob,
    spark: Any,
    process: Callable[[Any, int], None],
    start: str,
    ending: Offsets | None,
) -> Any:
    if job.source.reader == "python":
        reader = spark.readStream.format(_registered_python_source(spark))
        options = python_source_options(job, ending, local_task_slots(spark))
    else:
        reader = spark.readStream.format("kafka")
        options = job.source.spark_options()
    for key, value in options.items():
        reader = reader.option(key, value)
    source = reader.option("startingOffsets", start).load()
    writer = (
        source.writeStream.foreachBatch(process)
        .queryName(job.name)
        .option("checkpointLocation", job.checkpoint_location)
    )
    if ending is not None:  # the Python source's availableNow: batches back to back up to ``ending``
        writer = writer.trigger(processingTime="0 seconds")
    elif job.trigger.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger.processing_time_seconds} seconds")
    return writer.start()


def available_now_end(job: IngestJob | SharedIngestJob, probe: LagProbe | TopicWatermarks) -> Offsets | None:
    """Where an ``availableNow`` run of the Python source ends: the latest offsets now."""
    if job.source.reader != "python" or not job.trigger.available_now:
        return None
    return high_offsets(probe.watermarks())


def _registered_python_source(spark: Any) -> str:
    """Floe's Kafka source, registered with the session (again: registering replaces)."""
    from ingest.kafka_source.reader import SOURCE_NAME, FloeKafkaSource

    spark.dataSource.register(FloeKafkaSource)
    return SOURCE_NAME


def python_source_options(
    job: IngestJob | SharedIngestJob, ending: Offsets | None = None, task_slots: int | None = None
) -> dict[str, str]:
    """The options of Floe's source for ``job``, with ``ending``, the end of an ``availableNow`` run.

    Unless the job caps a batch's tasks, a session with a fixed number of ``task_slots`` (local mode)
    gets one task per slot: a task has a fixed cost, and more tasks than slots only queue
    (docs/performance.md). On a cluster a batch keeps a task per range, as on Spark's source: dynamic allocation asks for executors
    by the tasks waiting.
    """
    options = job.source.python_source_options()
    if "maxPartitions" not in options and task_slots is not None:
        options["maxPartitions"] = str(task_slots)
    if ending is not None:
        options["endingOffsets"] = json.dumps(ending)
    return options


def local_task_slots(spark: Any) -> int | None:
    """The task slots of a local-mode session (fixed); None on a cluster, whose executors come and go."""
    context = spark.sparkContext
    return max(context.defaultParallelism, 1) if context.master.startswith("local") else None


def pinned_starting_offsets(checkpoint: str, start: str, probe: LagProbe | TopicWatermarks) -> str:
    """``startingOffsets`` for Floe's source, resolved once per checkpoint and kept in it.

    Spark plans batch 0 from the source's initial offsets, and asks for them again when it replays
    that batch after a crash, in a new process: ``latest`` (or -1) resolved then would start later
    than the first time. Spark's own source keeps them in the checkpoint likewise.
    """
    path = f"{checkpoint.rstrip('/')}/{PINNED_START}"
    io = FileIO.for_location(path)
    if io.exists(path):
        return io.read_bytes(path).decode()
    text = json.dumps(starting_offsets_now(start, probe.watermarks()))
    io.write_bytes(path, text.encode())
    return text


def _start_offsets(job: IngestJob, metadata: Any, probe: LagProbe) -> str:
    """``startingOffsets``: from the table's committed offsets if any, else as configured."""
    configured = job.source.starting_offsets_option()
    committed = committed_offsets(metadata)
    if not committed:
        return configured
    return starting_offsets(configured, committed, probe.topic_partitions(), job.table.identifier) or configured
